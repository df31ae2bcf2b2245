//! `cargo xtask ci`: every check CI runs, in order, stopping at the first failure.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::process::{self, cargo};

/// What cargo-deny checks here. `advisories` is left out on purpose: it needs the RustSec
/// database from GitHub, which this environment cannot reach (see deny.toml).
pub const DENY_CHECKS: [&str; 3] = ["bans", "licenses", "sources"];

enum Outcome {
    Passed,
    Skipped(String),
}

/// Test counts summed over every `test result:` line of `cargo test`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct TestCounts {
    passed: u64,
    failed: u64,
    ignored: u64,
}

/// Runs fmt, clippy, fetch-model, test, tidy, the training smoke run, rustdoc and cargo-deny; prints a header and
/// the elapsed time per step. What the later steps download is fetched beside fmt and
/// clippy (see [`spawn_downloads`]). The test step alone gets `DATABASE_URL` and `REDIS_URL` of
/// a disposable Postgres and redis-server (see [`crate::services`]) unless the
/// environment sets them, and `MEMDEDUP_MCP_PYTHON` of the Python MCP SDK's virtualenv
/// (see [`crate::mcp_python`]).
pub fn run(root: &Path) -> Result<()> {
    type Step<'a> = (&'a str, Box<dyn Fn() -> Result<Outcome> + 'a>);
    let totals = std::cell::Cell::new(TestCounts::default());
    let downloads = std::cell::RefCell::new(Some(spawn_downloads(root)));
    let steps: Vec<Step<'_>> = vec![
        ("cargo fmt --all -- --check", Box::new(|| cargo_step(root, &["fmt", "--all", "--", "--check"]))),
        (
            "cargo clippy --workspace --all-targets --all-features -- -D warnings",
            Box::new(|| {
                cargo_step(root, &["clippy", "--workspace", "--all-targets", "--all-features", "--", "-D", "warnings"])
            }),
        ),
        (
            "fetch-model",
            Box::new(|| {
                if let Some(handle) = downloads.borrow_mut().take() {
                    wait_for_downloads(handle);
                }
                crate::model::fetch_model(None).map(|_| Outcome::Passed)
            }),
        ),
        (
            "cargo test --workspace --all-features",
            Box::new(|| {
                // Postgres and Redis for the tests; stopped when `services` drops, pass or fail.
                let services = crate::services::start()?;
                let mut env = services.env().to_vec();
                // The Python MCP SDK for the second-client tests, unless the caller chose one.
                if std::env::var_os(crate::mcp_python::PYTHON_ENV_VAR).is_none() {
                    let python = crate::mcp_python::ensure()?;
                    env.push((crate::mcp_python::PYTHON_ENV_VAR, python.display().to_string()));
                }
                // The MCP Inspector CLI likewise.
                if std::env::var_os(crate::mcp_inspector::INSPECTOR_ENV_VAR).is_none() {
                    let inspector = crate::mcp_inspector::ensure(root)?;
                    env.push((crate::mcp_inspector::INSPECTOR_ENV_VAR, inspector.display().to_string()));
                }
                let counts = cargo_test(root, &env)?;
                drop(services);
                totals.set(counts);
                Ok(Outcome::Passed)
            }),
        ),
        ("tidy", Box::new(|| crate::tidy::run(root).map(|()| Outcome::Passed))),
        (
            "train-teacher --smoke, train-judge --smoke, --recalibrate --smoke and --embedder --smoke (the training pipelines on a tiny slice; nothing installed)",
            Box::new(|| {
                crate::train_teacher::run(root, &crate::train_teacher::TeacherArgs { smoke: true, max_minutes: None })?;
                for (embedder, recalibrate) in [(false, false), (false, true), (true, false)] {
                    let args =
                        crate::train_judge::TrainArgs { smoke: true, embedder, recalibrate, ..Default::default() };
                    crate::train_judge::run(root, &args)?;
                }
                Ok(Outcome::Passed)
            }),
        ),
        (
            "cargo doc --workspace --no-deps --all-features (warnings denied)",
            Box::new(|| {
                process::run(
                    cargo()
                        .args(["doc", "--workspace", "--no-deps", "--all-features"])
                        .env("RUSTDOCFLAGS", "-D warnings")
                        .current_dir(root),
                )?;
                Ok(Outcome::Passed)
            }),
        ),
        ("cargo deny", Box::new(|| deny(root))),
    ];

    let total = steps.len();
    let mut timings: Vec<(&str, Duration, String)> = Vec::new();
    for (i, (name, step)) in steps.iter().enumerate() {
        println!("\n==> ci [{}/{total}] {name}", i + 1);
        let start = Instant::now();
        let result = step();
        let elapsed = start.elapsed();
        match result {
            Ok(Outcome::Passed) => {
                println!("==> ci [{}/{total}] {name}: ok in {}", i + 1, secs(elapsed));
                timings.push((name, elapsed, "ok".into()));
            }
            Ok(Outcome::Skipped(why)) => {
                println!("==> ci [{}/{total}] {name}: skipped ({why})", i + 1);
                timings.push((name, elapsed, "skipped".into()));
            }
            Err(e) => {
                println!("==> ci [{}/{total}] {name}: FAILED after {}", i + 1, secs(elapsed));
                return Err(e.context(format!("ci step `{name}` failed")));
            }
        }
    }
    println!("\nci summary:");
    for (name, elapsed, status) in &timings {
        println!("  {:>8}  {status:<7}  {name}", secs(*elapsed));
    }
    // The last line: every test that `cargo test` ran, in the plain form CI tools read.
    let t = totals.get();
    println!("tests: {} passed, {} failed, {} skipped", t.passed, t.failed, t.ignored);
    Ok(())
}

/// What the later steps download, fetched on a thread while fmt and clippy keep the CPU
/// busy: the embedder and judge (`fetch-model`), the Python MCP SDK and the MCP Inspector
/// of the tests (unless the environment names its own), and the training virtualenv and
/// base checkpoint of the smoke runs (torch and its CUDA libraries: a few GB of wheels).
/// Each step still calls the same `ensure`, which finds the work done; a failure here is
/// only reported, and the step that needs the download tries again with its own error.
fn spawn_downloads(root: &Path) -> std::thread::JoinHandle<Vec<String>> {
    let root = root.to_path_buf();
    std::thread::spawn(move || {
        type Job<'a> = (&'a str, Box<dyn Fn() -> Result<()> + 'a>);
        let unset = |var: &str| std::env::var_os(var).is_none();
        let mut jobs: Vec<Job<'_>> = vec![("fetch-model", Box::new(|| crate::model::fetch_model(None).map(drop)))];
        if unset(crate::mcp_python::PYTHON_ENV_VAR) {
            jobs.push(("the Python MCP SDK", Box::new(|| crate::mcp_python::ensure().map(drop))));
        }
        if unset(crate::mcp_inspector::INSPECTOR_ENV_VAR) {
            jobs.push(("the MCP Inspector", Box::new(|| crate::mcp_inspector::ensure(&root).map(drop))));
        }
        jobs.push((
            "the training virtualenv and base checkpoint",
            Box::new(|| {
                crate::train_judge::ensure_venv(&root)?;
                crate::train_judge::ensure_base_model().map(drop)
            }),
        ));
        let mut failures = Vec::new();
        for (what, job) in jobs {
            if let Err(e) = job() {
                failures.push(format!("{what}: {e:#}"));
            }
        }
        failures
    })
}

/// Joins [`spawn_downloads`]' thread and reports what it could not fetch.
fn wait_for_downloads(handle: std::thread::JoinHandle<Vec<String>>) {
    let start = Instant::now();
    let failures = handle.join().unwrap_or_else(|_| vec!["the download thread panicked".to_owned()]);
    println!("==> ci: background downloads done (waited {})", secs(start.elapsed()));
    for failure in failures {
        println!("==> ci: background download failed, the step that needs it tries again: {failure}");
    }
}

/// `cargo test --workspace --all-features` with `env` added to its environment, its stdout
/// passed through line by line and its `test result:` lines added up.
fn cargo_test(root: &Path, env: &[(&str, String)]) -> Result<TestCounts> {
    let mut cmd = cargo();
    cmd.args(["test", "--workspace", "--all-features"])
        .envs(env.iter().map(|(name, value)| (name, value)))
        .current_dir(root)
        .stdout(Stdio::piped());
    let line = process::describe(&cmd);
    let mut child = cmd.spawn().with_context(|| format!("could not start `{line}`"))?;
    let mut counts = TestCounts::default();
    if let Some(stdout) = child.stdout.take() {
        for text in BufReader::new(stdout).lines() {
            let text = text.with_context(|| format!("reading the output of `{line}`"))?;
            println!("{text}");
            if let Some(c) = parse_test_result(&text) {
                counts.passed += c.passed;
                counts.failed += c.failed;
                counts.ignored += c.ignored;
            }
        }
    }
    let status = child.wait().with_context(|| format!("waiting for `{line}`"))?;
    if !status.success() {
        bail!("`{line}` failed ({status})");
    }
    Ok(counts)
}

/// Reads `test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; ...`.
fn parse_test_result(line: &str) -> Option<TestCounts> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let (_, counts) = rest.split_once(". ")?;
    let mut out = TestCounts::default();
    for part in counts.split(';') {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        match what {
            "passed" => out.passed = n,
            "failed" => out.failed = n,
            "ignored" => out.ignored = n,
            _ => {}
        }
    }
    Some(out)
}

fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

fn cargo_step(root: &Path, args: &[&str]) -> Result<Outcome> {
    process::run(cargo().args(args).current_dir(root))?;
    Ok(Outcome::Passed)
}

/// `cargo deny check bans licenses sources` (all features: see deny.toml) when cargo-deny
/// is installed; when it is not,
/// a failure under CI (`$CI` set) and a warning elsewhere.
fn deny(root: &Path) -> Result<Outcome> {
    if !process::succeeds(cargo().args(["deny", "--version"])) {
        let install = "cargo-deny is not installed (cargo install --locked cargo-deny)";
        if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
            bail!("{install}");
        }
        eprintln!("warning: {install}; skipping the license, ban and source checks");
        return Ok(Outcome::Skipped("cargo-deny not installed".into()));
    }
    // Duplicate-version warnings would each print a long inclusion tree; the crate names
    // are enough here (`cargo deny check bans` shows the trees).
    let mut cmd = cargo();
    cmd.args(["deny", "check", "--hide-inclusion-graph"]).args(DENY_CHECKS).current_dir(root);
    process::run(&mut cmd)?;
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_result_lines_are_counted() {
        let line = "test result: ok. 57 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.23s";
        assert_eq!(parse_test_result(line), Some(TestCounts { passed: 57, failed: 0, ignored: 2 }));
        let failed = "test result: FAILED. 23 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out";
        assert_eq!(parse_test_result(failed), Some(TestCounts { passed: 23, failed: 2, ignored: 0 }));
        assert_eq!(parse_test_result("running 3 tests"), None);
    }
}
