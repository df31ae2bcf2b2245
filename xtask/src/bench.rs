//! `cargo xtask bench`: the throughput bench (a plain `harness = false` binary), then cold-process timings of the CLI.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::process::{self, cargo};
use crate::temp_dir::TempDir;

mod cold_check;
mod compare;
mod hook_bench;

/// Per-command help text.
pub const HELP: &str = "\
Runs `cargo bench -p memdedup --bench throughput -- ARGS` (skipped with --e2e-only),
then times `memdedup playbook dedup` as a fresh process three times on a generated,
deterministic 1,000-entry playbook (about 15% paraphrase near duplicates), with
/usr/bin/time (Debian: apt-get install time). Each run prints its wall-clock seconds and
peak resident memory; model loading is included, as a user would see it. Finally it
times `memdedup scan --db` twice over an unchanged 2,000-line JSONL file (the second
run reads every vector from the embedding cache), then `scan --judge local` and `scan
--judge learned` on the same file, each with an empty cache and three times against
`scan --judge cosine` with a full one, and
`hook pre-compact --offline` on generated 200 KB and 2 MB Claude Code transcripts
(against an empty store, then again), and 20 cold `memdedup check` processes on new
texts (the semantic path a hook takes; the default learned judge) against 200 stored
memories, 20 more with `--judge cosine`, then 21 more in
client mode against a `memdedup serve` started on loopback: p50 / p90 wall time and peak
RSS. The check-before-store latency bench
is `cargo bench -p memdedup --bench check`, the learned pair judge's cost per pair (256
candidate pairs of holdout.jsonl, all in one call and one per call) is `cargo bench -p
memdedup --bench judge`, and the HTTP check-similar bench (8 and 32
clients, 10k and 100k stored nodes) is `cargo bench -p memdedup --bench http`; the
assisted dedup run (10,000 memories, a fake judge answering after 200 ms, 1, 4 and 16
calls in flight) is `cargo bench -p dedup-assist --bench assisted`; the MCP
`memory_check` round trips over stdio and HTTP against REST `/v1/memory/check` and
check-similar are `cargo bench -p memdedup-cli --bench mcp`; all run first unless
--e2e-only.

With --compare, only this: `memdedup scan FILE --json --threshold 0.85` (no cache) and
xtask/compare/reference_scan.py (the same model, tokenizer.json and model.onnx, run by
onnxruntime 1.31.1, tokenizers and numpy from PyPI in a virtualenv cached in
$MEMDEDUP_COMPARE_PYTHON_DIR, else $XDG_CACHE_HOME/memdedup/compare-python, else
~/.cache/memdedup/compare-python) as cold processes, alternating, three rounds each, on
generated 2,000- and 20,000-line JSONL files; prints the median wall seconds and peak RSS
of each, their ratios, and whether both found the same groups.

With --scaling, only `cargo bench -p dedup-store --bench scaling -- ARGS`: 100 namespaces
of 1,000 synthetic 384-dimension memories in a temporary SQLite file, searched in a
uniform and then a Zipf order under a 32 MiB index budget; prints hit rate, evictions,
cold reload milliseconds per scope, hot and cold search latency and the search process's
peak RSS. `--full`: 1,000,000 memories over 1,000 namespaces, 256 MiB (about 2 GB of
SQLite, a minute or two to generate). Also `--namespaces N`, `--per-namespace N`,
`--budget-mb N`, `--searches N`, `--db FILE` (reuse a generated file) and `--postgres`
(the server of DATABASE_URL).";

const GNU_TIME: &str = "/usr/bin/time";
const ENTRIES: usize = 1000;
const SEED: u64 = 2026;
const RUNS: usize = 3;

/// `cargo xtask bench --compare`: `memdedup scan` against the Python reference only.
pub fn compare(root: &Path) -> Result<()> {
    if !Path::new(GNU_TIME).is_file() {
        bail!("{GNU_TIME} is missing; it measures peak memory: apt-get install time");
    }
    compare::run(root, GNU_TIME)
}

/// `cargo xtask bench --scaling`: the index-budget bench of many namespaces only.
pub fn scaling(root: &Path, bench_args: &[String]) -> Result<()> {
    let shown = if bench_args.is_empty() { String::new() } else { format!(" -- {}", bench_args.join(" ")) };
    println!("==> cargo bench -p dedup-store --bench scaling{shown}");
    process::run(
        cargo().args(["bench", "-p", "dedup-store", "--bench", "scaling", "--"]).args(bench_args).current_dir(root),
    )
}

/// Runs the throughput bench (unless `e2e_only`) and the end-to-end timings.
pub fn run(root: &Path, e2e_only: bool, bench_args: &[String]) -> Result<()> {
    if !e2e_only {
        let shown = if bench_args.is_empty() { String::new() } else { format!(" -- {}", bench_args.join(" ")) };
        println!("==> cargo bench -p memdedup --bench throughput{shown}");
        process::run(
            cargo().args(["bench", "-p", "memdedup", "--bench", "throughput", "--"]).args(bench_args).current_dir(root),
        )?;
        println!("==> cargo bench -p memdedup --bench check");
        process::run(cargo().args(["bench", "-p", "memdedup", "--bench", "check"]).current_dir(root))?;
        println!("==> cargo bench -p memdedup --bench judge");
        process::run(cargo().args(["bench", "-p", "memdedup", "--bench", "judge"]).current_dir(root))?;
        println!("==> cargo bench -p memdedup --bench http");
        process::run(cargo().args(["bench", "-p", "memdedup", "--bench", "http"]).current_dir(root))?;
        println!("==> cargo bench -p memdedup-cli --bench mcp");
        process::run(cargo().args(["bench", "-p", "memdedup-cli", "--bench", "mcp"]).current_dir(root))?;
        println!("==> cargo bench -p dedup-assist --bench assisted");
        process::run(cargo().args(["bench", "-p", "dedup-assist", "--bench", "assisted"]).current_dir(root))?;
    }

    if !Path::new(GNU_TIME).is_file() {
        bail!("{GNU_TIME} is missing; it measures peak memory: apt-get install time");
    }
    crate::model::fetch_model(None)?;
    let bin = crate::demo::build_cli(root)?;

    let scratch = TempDir::new("memdedup-bench")?;
    let input = scratch.path().join(format!("playbook-{ENTRIES}.json"));
    let generated = crate::synthetic_playbook::generate(ENTRIES, SEED);
    let json = serde_json::to_string_pretty(&generated.doc)?;
    std::fs::write(&input, json).with_context(|| format!("writing {}", input.display()))?;
    println!(
        "\n==> end to end: memdedup playbook dedup on {ENTRIES} entries \
         ({} planted near duplicates, seed {SEED}), {RUNS} cold runs",
        generated.near_duplicates
    );

    let output = scratch.path().join("deduped.json");
    let timing = scratch.path().join("time.txt");
    for run in 1..=RUNS {
        let mut cmd = Command::new(GNU_TIME);
        cmd.args(["-f", "%e %M", "-o"])
            .arg(&timing)
            .arg(&bin)
            .args(["playbook", "dedup"])
            .arg(&input)
            .arg("-o")
            .arg(&output)
            .current_dir(root)
            .stdin(Stdio::null());
        let line = process::describe(&cmd);
        let out = cmd.output().with_context(|| format!("could not start `{line}`"))?;
        if !out.status.success() {
            bail!("`{line}` failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr).trim_end());
        }
        let measured = std::fs::read_to_string(&timing).with_context(|| format!("reading {}", timing.display()))?;
        let (secs, kib) =
            parse_time_output(&measured).with_context(|| format!("unexpected {GNU_TIME} output: {measured:?}"))?;
        println!("  run {run}: {secs:>6.2} s wall  {:>7.1} MiB peak RSS", kib as f64 / 1024.0);
    }
    let after: usize = crate::demo::section_counts(&output)?.iter().map(|(_, n)| n).sum();
    println!("  entries: {ENTRIES} -> {after}");
    bench_scan_cache(&bin, root, scratch.path())?;
    hook_bench::run(&bin, root, scratch.path(), GNU_TIME)?;
    cold_check::run(&bin, root, scratch.path(), GNU_TIME)
}

/// Lines in the `scan --db` cache benchmark's input.
const SCAN_LINES: usize = 2000;

/// Times `memdedup scan --db` twice over one unchanged JSONL file: the first run embeds
/// and fills the embedding cache, the second finds every vector there. Then times `scan
/// --judge local` against plain `scan`, with an empty cache and with a full one.
fn bench_scan_cache(bin: &Path, root: &Path, scratch: &Path) -> Result<()> {
    let jsonl = compare::memories_jsonl(SCAN_LINES, SEED + 1)?;
    let input = scratch.join("memories-2000.jsonl");
    std::fs::write(&input, &jsonl).with_context(|| format!("writing {}", input.display()))?;
    let db = scratch.join("scan-cache.db");
    let cosine = ["--judge", "cosine"];
    println!(
        "\n==> scan --db --judge cosine over {SCAN_LINES} lines, twice (cold processes; the second run hits the cache)"
    );
    let plain = time_scan(bin, root, &db, &input, &cosine)?;
    let cached = time_scan(bin, root, &db, &input, &cosine)?;
    println!(
        "  run 1: {plain:>6.2} s wall\n  run 2: {cached:>6.2} s wall\n  second run is {:.1}x faster",
        plain / cached
    );
    for judge in ["local", "learned"] {
        println!("\n==> scan --db --judge {judge} over the same lines (cold processes, {RUNS} runs each)");
        let judged_db = scratch.join(format!("scan-judged-{judge}.db"));
        let judged_cold = time_scan(bin, root, &judged_db, &input, &["--judge", judge])?;
        println!(
            "  embedding as well (empty cache): plain {plain:.2} s, judged {judged_cold:.2} s ({:.2}x)",
            judged_cold / plain
        );
        let mut ratios = Vec::new();
        for run in 1..=RUNS {
            let plain = time_scan(bin, root, &db, &input, &cosine)?;
            let judged = time_scan(bin, root, &db, &input, &["--judge", judge])?;
            println!(
                "  run {run}, vectors from the cache: plain {plain:.2} s, judged {judged:.2} s ({:.1}x)",
                judged / plain
            );
            ratios.push(judged / plain);
        }
        ratios.sort_by(f64::total_cmp);
        println!("  median ratio with the cache: {:.1}x", ratios[ratios.len() / 2]);
    }
    Ok(())
}

/// Runs `memdedup --db DB scan INPUT --json EXTRA...` as a fresh process; its wall seconds.
fn time_scan(bin: &Path, root: &Path, db: &Path, input: &Path, extra: &[&str]) -> Result<f64> {
    let mut cmd = Command::new(bin);
    cmd.arg("--db").arg(db).arg("scan").arg(input).arg("--json").args(extra).current_dir(root).stdin(Stdio::null());
    let line = process::describe(&cmd);
    let started = std::time::Instant::now();
    let out = cmd.output().with_context(|| format!("could not start `{line}`"))?;
    let secs = started.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!("`{line}` failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr).trim_end());
    }
    Ok(secs)
}

/// Reads `%e %M` (seconds, KiB) from GNU time's `-o` file: the last non-empty line.
pub(crate) fn parse_time_output(text: &str) -> Option<(f64, u64)> {
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
    let mut parts = line.split_whitespace();
    let secs = parts.next()?.parse().ok()?;
    let kib = parts.next()?.parse().ok()?;
    Some((secs, kib))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_output() {
        assert_eq!(parse_time_output("1.23 45678\n"), Some((1.23, 45678)));
        assert_eq!(parse_time_output("Command exited with non-zero status 1\n0.50 1024\n"), Some((0.5, 1024)));
        assert_eq!(parse_time_output(""), None);
    }
}
