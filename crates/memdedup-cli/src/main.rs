//! The `memdedup` command: deduplicate agent playbooks and memory collections, and check and
//! store memories in a persistent store, from the shell.
//!
//! Exit codes: 0 success, 1 failure (bad input, model unavailable, I/O), 2 usage error.
//! Data goes to stdout (`--json` prints exactly one JSON document); progress, warnings and
//! errors go to stderr. Nothing is written on any error: regular files are replaced
//! atomically (pipes and devices are written directly).

mod calibrate_cmd;
mod capture_cmd;
mod checker;
mod cli;
mod dedup_cmd;
mod eval_cmd;
mod facts_cmd;
mod hook_cmd;
mod input;
mod judging;
mod labelled;
mod lifecycle_cmd;
mod mcp_cmd;
mod memory_cmd;
mod merges_cmd;
mod open;
mod output;
mod playbook_cmd;
mod precompact;
mod progress;
mod reembed_cmd;
mod review_cmd;
mod scan_cmd;
mod search_cmd;
mod serve_cmd;
mod server_client;
mod similarity_cmd;
mod transcript;
mod undo_cmd;
mod verdict;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, PlaybookCommand};

/// A failure that maps to exit code 2 (the command line itself is wrong).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(pub String);

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.global.quiet, cli.global.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match &cli.command {
            Command::Playbook { command: PlaybookCommand::Dedup(args) } => playbook_cmd::run(&cli.global, args).await,
            Command::Scan(args) => scan_cmd::run(&cli.global, args).await,
            Command::Eval(args) => eval_cmd::run(&cli.global, args).await,
            Command::Calibrate(args) => calibrate_cmd::run(&cli.global, args).await,
            Command::Serve(args) => serve_cmd::run(&cli.global, args).await,
            Command::Mcp => mcp_cmd::run(&cli.global).await,
            Command::Similarity(args) => similarity_cmd::run(&cli.global, args).await,
            Command::Check(args) => memory_cmd::check(&cli.global, args).await,
            Command::Add(args) => memory_cmd::add(&cli.global, args).await,
            Command::Capture(args) => capture_cmd::run(&cli.global, args).await,
            Command::List(args) => memory_cmd::list(&cli.global, args).await,
            Command::Search(args) => search_cmd::run(&cli.global, args).await,
            Command::Show(args) => memory_cmd::show(&cli.global, args).await,
            Command::Edit(args) => lifecycle_cmd::edit(&cli.global, args).await,
            Command::Forget(args) => lifecycle_cmd::forget(&cli.global, args).await,
            Command::History(args) => lifecycle_cmd::history(&cli.global, args).await,
            Command::Stats(args) => memory_cmd::stats(&cli.global, args).await,
            Command::Reembed(args) => reembed_cmd::run(&cli.global, args).await,
            Command::Facts { command } => facts_cmd::run(&cli.global, command).await,
            Command::Hook { command } => hook_cmd::run(&cli.global, command).await,
            Command::Dedup(args) => dedup_cmd::run(&cli.global, args).await,
            Command::Merges(args) => merges_cmd::run(&cli.global, args).await,
            Command::Undo(args) => undo_cmd::run(&cli.global, args).await,
            Command::Review(args) => review_cmd::run(&cli.global, args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A closed stdout (`memdedup scan f | head -1`) is the reader's choice, not a failure.
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", format_chain(&e));
            if e.downcast_ref::<UsageError>().is_some() { ExitCode::from(2) } else { ExitCode::FAILURE }
        }
    }
}

/// `outer: inner: innermost`, skipping causes already contained in the message.
fn format_chain(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

fn init_logging(quiet: bool, verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, _) => "debug",
    };
    let filter = EnvFilter::try_from_env("MEMDEDUP_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    // The MCP SDK logs whole requests (memory text) at debug level: it stays at warn
    // unless MEMDEDUP_LOG names it.
    let named_rmcp = std::env::var("MEMDEDUP_LOG").is_ok_and(|value| value.contains("rmcp"));
    let filter = match "rmcp=warn".parse() {
        Ok(directive) if !named_rmcp => filter.add_directive(directive),
        _ => filter,
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .with_target(false)
        .init();
}
