//! The pre-compact hook part of `cargo xtask bench`: generated Claude Code transcripts of
//! about 200 KB and 2 MB, and cold-process timings of `memdedup hook pre-compact` on them.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::process;

/// Transcript sizes benchmarked, in bytes (each is reached or passed by whole lines).
const SIZES: [(usize, &str); 2] = [(200 * 1024, "200 KB"), (2 * 1024 * 1024, "2 MB")];

/// One statement in this many user messages carries a capture cue.
const CUE_EVERY: usize = 6;

/// Deterministic pseudo-random numbers (a 64-bit LCG), so every run benchmarks the same
/// transcript.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> usize {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.next() % items.len()]
    }
}

const SUBJECTS: [&str; 12] = [
    "the billing service",
    "the search index",
    "the mobile app",
    "the admin dashboard",
    "the import job",
    "the payment webhook",
    "the audit log",
    "the cache layer",
    "the onboarding flow",
    "the export API",
    "the nightly backup",
    "the feature flag service",
];
const CHOICES: [&str; 10] = [
    "PostgreSQL",
    "Redis",
    "SQLite",
    "Kafka",
    "a cron job",
    "gRPC",
    "plain JSON files",
    "the standard library",
    "a worker queue",
    "server-side rendering",
];
const CUES: [&str; 6] = [
    "We decided to use {choice} for {subject}",
    "Turns out {subject} was slow because of {choice}",
    "The convention is that {subject} never talks to {choice} directly",
    "I prefer {choice} over anything else for {subject}",
    "Let's go with {choice} for {subject} from now on",
    "The root cause was that {subject} retried {choice} without a limit",
];
const CHATTER: [&str; 6] = [
    "Can you look at the failing test in {subject} and tell me what you see",
    "I read the module again and the loop over {subject} looks fine to me",
    "Please run the suite once more, then summarise what changed in {subject}",
    "Here is the diff for {subject}, with the new error handling around {choice}",
    "That makes sense, thanks for checking {subject} so carefully",
    "I updated the docs of {subject} to mention {choice} and the new flag",
];

fn fill(template: &str, rng: &mut Lcg, serial: usize) -> String {
    template
        .replace("{subject}", &format!("{} (part {serial})", rng.pick(&SUBJECTS)))
        .replace("{choice}", rng.pick(&CHOICES))
}

/// A Claude Code transcript of at least `bytes`: user and assistant text (with code
/// blocks), tool calls with large inputs and results, thinking and summary lines; one
/// user message in [`CUE_EVERY`] states a decision, lesson, convention or preference.
pub fn transcript(bytes: usize, seed: u64) -> String {
    let mut rng = Lcg(seed);
    let mut out = String::new();
    let mut serial = 0;
    let line = |value: Value, out: &mut String| {
        let _ = writeln!(out, "{value}");
    };
    line(json!({"type": "summary", "summary": "Working on the services", "leafUuid": "0"}), &mut out);
    while out.len() < bytes {
        serial += 1;
        let template = if serial % CUE_EVERY == 0 { rng.pick(&CUES) } else { rng.pick(&CHATTER) };
        let said = format!("{}. Thanks!", fill(template, &mut rng, serial));
        line(
            json!({"type": "user", "message": {"role": "user", "content": said}, "uuid": format!("u{serial}")}),
            &mut out,
        );
        let reply = format!(
            "{}.\n\n```rust\nfn check_{serial}() -> Result<()> {{\n    run(\"{}\")?;\n    Ok(())\n}}\n```\n\nI will run the tests next.",
            fill(rng.pick(&CHATTER), &mut rng, serial),
            rng.pick(&CHOICES)
        );
        line(
            json!({"type": "assistant", "message": {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Let me think about the change.", "signature": "sig"},
                {"type": "text", "text": reply},
                {"type": "tool_use", "id": format!("t{serial}"), "name": "Bash", "input": {"command": "cargo test --workspace"}},
            ]}}),
            &mut out,
        );
        let output: String = (0..40).map(|i| format!("test case_{serial}_{i} ... ok\n")).collect();
        line(
            json!({"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": format!("t{serial}"), "content": output},
            ]}}),
            &mut out,
        );
    }
    out
}

/// Times the hook as a fresh process on each generated transcript: once against an
/// empty store (it captures), once more against the same store (all duplicates).
pub fn run(bin: &Path, root: &Path, scratch: &Path, gnu_time: &str) -> Result<()> {
    for (index, (bytes, label)) in SIZES.iter().enumerate() {
        let path = scratch.join(format!("transcript-{index}.jsonl"));
        let text = transcript(*bytes, 2026 + index as u64);
        std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
        let db = scratch.join(format!("hook-{index}.db"));
        println!(
            "\n==> memdedup hook pre-compact on a generated {label} transcript ({} bytes, {} lines), cold processes",
            text.len(),
            text.lines().count()
        );
        for run in ["empty store", "same transcript again"] {
            let (secs, kib, report) = time_hook(bin, root, &db, &path, scratch, gnu_time)?;
            println!(
                "  {run:<22}: {secs:>5.2} s wall  {:>6.1} MiB peak RSS  read+analyse {} ms  {} candidates, {} stored, {} skipped",
                kib as f64 / 1024.0,
                report["analysis_ms"],
                report["candidates"].as_array().map_or(0, Vec::len),
                report["stored"],
                report["skipped"],
            );
        }
    }
    Ok(())
}

/// Runs `memdedup --db DB hook pre-compact --json` under GNU time with the hook input on
/// stdin; wall seconds, peak KiB and the report.
fn time_hook(
    bin: &Path,
    root: &Path,
    db: &Path,
    transcript: &Path,
    scratch: &Path,
    gnu_time: &str,
) -> Result<(f64, u64, Value)> {
    let timing = scratch.join("hook-time.txt");
    let input = json!({"session_id": "bench", "transcript_path": transcript, "hook_event_name": "PreCompact", "trigger": "auto"});
    let mut cmd = Command::new(gnu_time);
    cmd.args(["-f", "%e %M", "-o"])
        .arg(&timing)
        .arg(bin)
        .arg("--db")
        .arg(db)
        .args(["hook", "pre-compact", "--json", "--offline"])
        .current_dir(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let line = process::describe(&cmd);
    let mut child = cmd.spawn().with_context(|| format!("could not start `{line}`"))?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write as _;
        stdin.write_all(input.to_string().as_bytes()).context("writing the hook input")?;
    }
    let out = child.wait_with_output().with_context(|| format!("`{line}` did not finish"))?;
    if !out.status.success() {
        bail!("`{line}` failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr).trim_end());
    }
    let report: Value = serde_json::from_slice(&out.stdout).context("the hook's --json report")?;
    if report["failures"].as_array().is_some_and(|f| !f.is_empty()) {
        bail!("the hook reported failures: {}", report["failures"]);
    }
    let measured = std::fs::read_to_string(&timing).with_context(|| format!("reading {}", timing.display()))?;
    let (secs, kib) =
        super::parse_time_output(&measured).with_context(|| format!("unexpected {gnu_time} output: {measured:?}"))?;
    Ok((secs, kib, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcripts_are_deterministic_jsonl_of_the_asked_size() {
        let a = transcript(50_000, 7);
        assert_eq!(a, transcript(50_000, 7));
        assert!(a.len() >= 50_000 && a.len() < 60_000, "{}", a.len());
        assert!(a.lines().all(|l| serde_json::from_str::<Value>(l).is_ok()));
        assert!(a.contains("\"tool_result\"") && a.contains("```rust"));
    }
}
