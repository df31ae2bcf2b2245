//! `cargo xtask ci`: every check CI runs, in order, stopping at the first failure.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::process::{self, cargo};

/// What cargo-deny checks here. `advisories` is left out on purpose: it needs the RustSec
/// database from GitHub, which this environment cannot reach (see deny.toml).
pub const DENY_CHECKS: [&str; 3] = ["bans", "licenses", "sources"];

enum Outcome {
    Passed,
    Skipped(String),
}

/// Runs fmt, clippy, fetch-model, test, tidy and cargo-deny; prints a header and the
/// elapsed time per step.
pub fn run(root: &Path) -> Result<()> {
    type Step<'a> = (&'a str, Box<dyn Fn() -> Result<Outcome> + 'a>);
    let steps: Vec<Step<'_>> = vec![
        (
            "cargo fmt --all -- --check",
            Box::new(|| cargo_step(root, &["fmt", "--all", "--", "--check"])),
        ),
        (
            "cargo clippy --workspace --all-targets -- -D warnings",
            Box::new(|| {
                cargo_step(
                    root,
                    &[
                        "clippy",
                        "--workspace",
                        "--all-targets",
                        "--",
                        "-D",
                        "warnings",
                    ],
                )
            }),
        ),
        (
            "fetch-model",
            Box::new(|| crate::model::fetch_model(None).map(|_| Outcome::Passed)),
        ),
        (
            "cargo test --workspace",
            Box::new(|| cargo_step(root, &["test", "--workspace"])),
        ),
        (
            "tidy",
            Box::new(|| crate::tidy::run(root).map(|()| Outcome::Passed)),
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
                println!(
                    "==> ci [{}/{total}] {name}: FAILED after {}",
                    i + 1,
                    secs(elapsed)
                );
                return Err(e.context(format!("ci step `{name}` failed")));
            }
        }
    }
    println!("\nci summary:");
    for (name, elapsed, status) in &timings {
        println!("  {:>8}  {status:<7}  {name}", secs(*elapsed));
    }
    Ok(())
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
    cmd.args(["deny", "check", "--hide-inclusion-graph"])
        .args(DENY_CHECKS)
        .current_dir(root);
    process::run(&mut cmd)?;
    Ok(Outcome::Passed)
}
