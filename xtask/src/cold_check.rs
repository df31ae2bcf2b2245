//! `memdedup check` as a hook runs it: a fresh process per text, semantic path (the text
//! is new, so the model embeds it), timed as a whole with its peak memory.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::process;

/// Memories stored before the timed checks.
const STORED: usize = 200;
/// Timed cold checks (after one untimed warm-up that also builds the model's graph cache).
const RUNS: usize = 21;

/// Stores [`STORED`] memories through one `capture`, then times [`RUNS`] cold `check`
/// processes of texts that are not stored (each embeds) and prints the p50 / p90 wall
/// time and the largest peak RSS.
pub fn run(bin: &Path, root: &Path, scratch: &Path, gnu_time: &str) -> Result<()> {
    let db = scratch.join("cold-check.db");
    let jsonl = crate::compare::memories_jsonl(STORED + RUNS + 1, 2027)?;
    let texts: Vec<String> = jsonl
        .lines()
        .map(|line| -> Result<String> {
            let value: serde_json::Value = serde_json::from_str(line)?;
            value["text"].as_str().map(str::to_owned).context("a generated memory has no text")
        })
        .collect::<Result<_>>()?;
    let (stored, probes) = texts.split_at(STORED);
    let candidates: String = stored.iter().map(|t| format!("{}\n", serde_json::json!({"content": t}))).collect();
    let input = scratch.join("cold-check-stored.jsonl");
    std::fs::write(&input, candidates).with_context(|| format!("writing {}", input.display()))?;
    let mut capture = Command::new(bin);
    capture.arg("--db").arg(&db).args(["capture", "-q"]).arg(&input).current_dir(root).stdin(Stdio::null());
    let line = process::describe(&capture);
    let out = capture.output().with_context(|| format!("could not start `{line}`"))?;
    if !out.status.success() {
        bail!("`{line}` failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr).trim_end());
    }

    println!("\n==> cold `memdedup check` (semantic path: a new text), {RUNS} fresh processes, {STORED} stored");
    let timing = scratch.join("cold-check-time.txt");
    let mut walls = Vec::new();
    let mut peak_kib = 0;
    for (i, text) in probes.iter().enumerate() {
        let mut cmd = Command::new(gnu_time);
        cmd.args(["-f", "%e %M", "-o"])
            .arg(&timing)
            .arg(bin)
            .arg("--db")
            .arg(&db)
            .args(["check", "-q", "--"])
            .arg(text)
            .current_dir(root)
            .stdin(Stdio::null());
        let line = process::describe(&cmd);
        let started = Instant::now();
        let out = cmd.output().with_context(|| format!("could not start `{line}`"))?;
        let wall = started.elapsed().as_secs_f64() * 1e3;
        if !out.status.success() {
            bail!("`{line}` failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr).trim_end());
        }
        let measured = std::fs::read_to_string(&timing).with_context(|| format!("reading {}", timing.display()))?;
        let (_, kib) = crate::bench::parse_time_output(&measured)
            .with_context(|| format!("unexpected {gnu_time} output: {measured:?}"))?;
        if i == 0 {
            println!("  warm-up (builds the optimised-graph cache if missing): {wall:.0} ms");
            continue;
        }
        walls.push(wall);
        peak_kib = peak_kib.max(kib);
    }
    walls.sort_by(f64::total_cmp);
    let at = |q: f64| walls[((walls.len() - 1) as f64 * q).round() as usize];
    println!(
        "  wall p50 {:.0} ms, p90 {:.0} ms, min {:.0} ms; peak RSS {:.0} MiB",
        at(0.5),
        at(0.9),
        walls[0],
        peak_kib as f64 / 1024.0
    );
    Ok(())
}
