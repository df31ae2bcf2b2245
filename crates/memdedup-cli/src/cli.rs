//! Command-line definitions (clap derive).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Keep an AI agent's long-term memory free of duplicates.
///
/// memdedup embeds memory texts with a local model (all-MiniLM-L6-v2, offline) and groups
/// those whose cosine similarity reaches a threshold. Install the model once with
/// `cargo xtask fetch-model`.
#[derive(Debug, Parser)]
#[command(name = "memdedup", version, propagate_version = true, max_term_width = 100)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command accepts.
#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// Directory of the local model (default: $MEMDEDUP_MODEL_DIR, then
    /// $MEMDEDUP_HOME/models/all-minilm-l6-v2-int8, then
    /// ${XDG_CACHE_HOME:-~/.cache}/memdedup/models/all-minilm-l6-v2-int8).
    #[arg(long, global = true, value_name = "DIR")]
    pub model_dir: Option<PathBuf>,
    /// No progress bar and no warnings, only errors.
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// More log output on stderr (-v info, -vv debug). MEMDEDUP_LOG overrides.
    #[arg(long, short, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Work on an agent playbook (JSON with sections of key points).
    Playbook {
        #[command(subcommand)]
        command: PlaybookCommand,
    },
    /// Find groups of duplicates in a JSONL file (or JSON array) of memories.
    Scan(ScanArgs),
    /// Print the cosine similarity of two texts, to tune thresholds.
    Similarity(SimilarityArgs),
}

#[derive(Debug, Subcommand)]
pub(crate) enum PlaybookCommand {
    /// Merge semantically duplicate entries across all sections.
    ///
    /// The first entry (canonical section order, then list order) of each group survives
    /// with its text and place; helpful and harmful counters are summed; the others are
    /// removed. Without -o or --in-place the result goes to stdout and the report to
    /// stderr.
    Dedup(PlaybookDedupArgs),
}

#[derive(Debug, Args)]
pub(crate) struct PlaybookDedupArgs {
    /// The playbook JSON file.
    pub file: PathBuf,
    /// Cosine threshold in [0, 1] (default: $AGENTIC_CONTEXT_DEDUP_THRESHOLD, else 0.85).
    #[arg(long, value_parser = parse_threshold)]
    pub threshold: Option<f64>,
    /// Write the deduplicated playbook here (atomically).
    #[arg(short, long, value_name = "OUT", conflicts_with = "in_place")]
    pub output: Option<PathBuf>,
    /// Replace FILE (atomically).
    #[arg(long)]
    pub in_place: bool,
    /// Report what would merge; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// If the model is unavailable, write the playbook unchanged and exit 0.
    #[arg(long)]
    pub fail_open: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ScanArgs {
    /// JSONL (one object per line) or a JSON array; `-` reads stdin. Objects need `id`
    /// (string or number) and `text`; `namespace` is optional; other fields are ignored.
    pub file: PathBuf,
    /// Cosine threshold in [0, 1].
    #[arg(long, value_parser = parse_threshold, default_value = "0.85")]
    pub threshold: f64,
    /// Print one JSON object on stdout (shape documented in docs/CLI.md).
    #[arg(long)]
    pub json: bool,
    /// Group across namespaces too (default: only within a namespace).
    #[arg(long)]
    pub cross_namespace: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SimilarityArgs {
    /// First text.
    pub first: String,
    /// Second text.
    pub second: String,
    /// Print `{"model": ..., "cosine": ...}`.
    #[arg(long)]
    pub json: bool,
}

/// A threshold must be a finite number in [0, 1].
fn parse_threshold(raw: &str) -> Result<f64, String> {
    let value: f64 = raw.trim().parse().map_err(|_| format!("`{raw}` is not a number"))?;
    if !(0.0..=1.0).contains(&value) {
        return Err(format!("{raw} is outside [0, 1]"));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn thresholds_are_validated() {
        assert_eq!(parse_threshold("0.9"), Ok(0.9));
        assert!(parse_threshold("1.5").unwrap_err().contains("outside [0, 1]"));
        assert!(parse_threshold("NaN").is_err());
        assert!(parse_threshold("high").unwrap_err().contains("not a number"));
    }
}
