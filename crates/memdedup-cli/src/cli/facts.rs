//! The arguments of `memdedup facts …`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use memdedup::crates::core::{DEFAULT_CONFIDENCE_THRESHOLD, DEFAULT_MAX_FACTS, DEFAULT_MAX_TOKENS, FactCategory};

use super::dedup::JudgeArgs;
use super::{ScopeArgs, parse_unit};

/// The `facts` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum FactsCommand {
    /// Store a fact unless its confidence is too low or the scope has it already
    /// (ignoring case). A full scope drops its lowest-confidence fact first.
    ///
    /// Prints what happened: added (with the id), skipped as a duplicate (of which id) or
    /// skipped for low confidence. All three exit 0.
    Add(FactsAddArgs),
    /// List the facts of a scope, highest confidence first.
    List(FactsListArgs),
    /// Change a fact's content, category or confidence (only those given).
    Update(FactsUpdateArgs),
    /// Delete a fact.
    Delete(FactsDeleteArgs),
    /// Print the profile and facts of a scope as text for a system prompt, within a token
    /// budget (cl100k_base tokens): lowest-confidence facts are dropped first, then the
    /// text is cut and ends with "\n...".
    Context(FactsContextArgs),
    /// Ask the judge's LLM for the facts of a conversation and store the confident ones.
    ///
    /// Input: a JSON turn {"user": …, "assistant": …} (a file, or `-` for stdin), or a
    /// plain-text --transcript. Facts at or above --min-confidence are stored as `facts
    /// add` stores them (duplicates ignoring case are skipped; a full scope drops its
    /// lowest-confidence fact); the rest are counted, by category, and not stored. A model
    /// reply that is not the expected JSON, or holds an invalid fact, fails (exit 1) and
    /// stores nothing. The LLM is the judge of `memdedup dedup`: --judge flags, then
    /// MEMDEDUP_JUDGE*, then `[judge]` of memdedup.toml.
    Extract(FactsExtractArgs),
    /// Print the profile summaries of a scope as JSON, or replace them with --set.
    ///
    /// The JSON has DeerFlow's memory.json shape: {"user": {"workContext": {"summary":
    /// …}, "personalContext": …, "topOfMind": …}, "history": {"recentMonths": …,
    /// "earlierContext": …, "longTermBackground": …}}; missing members are empty.
    Profile(FactsProfileArgs),
}

#[derive(Debug, Args)]
pub(crate) struct FactsAddArgs {
    /// The fact (`-` reads stdin).
    pub text: String,
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// preference, knowledge, context, behavior, goal or correction.
    #[arg(long, short, default_value = "context")]
    pub category: FactCategory,
    /// How sure the fact is, in [0, 1] (a fact stated by hand defaults to certain).
    #[arg(long, value_parser = parse_unit, default_value = "1.0")]
    pub confidence: f64,
    /// Where the fact came from (a thread or message id).
    #[arg(long)]
    pub source: Option<String>,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Overrides of the fact policy.
#[derive(Debug, Args)]
pub(crate) struct PolicyArgs {
    /// Facts less confident than this are not stored.
    #[arg(long, value_parser = parse_unit, default_value_t = DEFAULT_CONFIDENCE_THRESHOLD)]
    pub min_confidence: f64,
    /// The most facts the scope keeps.
    #[arg(long, value_parser = parse_max_facts, default_value_t = DEFAULT_MAX_FACTS)]
    pub max_facts: usize,
}

#[derive(Debug, Args)]
pub(crate) struct FactsExtractArgs {
    /// A JSON file {"user": "…", "assistant": "…"} (`-` reads stdin).
    #[arg(value_name = "TURN", required_unless_present = "transcript", conflicts_with = "transcript")]
    pub turn: Option<PathBuf>,
    /// A plain-text transcript (`-` reads stdin): a line starting `user:` or `assistant:`
    /// (any case) starts a message, other lines continue the one before; each user
    /// message with the assistant's reply after it is one turn, one LLM call.
    #[arg(long, value_name = "FILE")]
    pub transcript: Option<PathBuf>,
    #[command(flatten)]
    pub scope: ScopeArgs,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Where the facts came from (a thread or message id), stored with each.
    #[arg(long)]
    pub source: Option<String>,
    /// Extract and print the facts; store nothing (no database is opened).
    #[arg(long)]
    pub dry_run: bool,
    /// Print the outcome as one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub judge: JudgeArgs,
}

#[derive(Debug, Args)]
pub(crate) struct FactsListArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Print a JSON array.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct FactsUpdateArgs {
    /// The fact id (`fact_` and 8 hex digits).
    pub id: String,
    /// New content (`-` reads stdin).
    #[arg(long)]
    pub content: Option<String>,
    /// New category.
    #[arg(long, short)]
    pub category: Option<FactCategory>,
    /// New confidence, in [0, 1].
    #[arg(long, value_parser = parse_unit)]
    pub confidence: Option<f64>,
    /// Print the updated fact as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct FactsDeleteArgs {
    /// The fact id (`fact_` and 8 hex digits).
    pub id: String,
    /// Print `{"deleted": id}`.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct FactsContextArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// The token budget, 1 to 1,000,000 (as the HTTP API).
    #[arg(long, value_parser = parse_max_tokens, default_value_t = DEFAULT_MAX_TOKENS)]
    pub max_tokens: usize,
    /// Print `{"context": …, "tokens": …, "max_tokens": …}`.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct FactsProfileArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Replace the profile with this JSON file (`-` reads stdin).
    #[arg(long, value_name = "FILE")]
    pub set: Option<PathBuf>,
}

/// A whole number of at least 1.
pub(crate) fn parse_max_facts(raw: &str) -> Result<usize, String> {
    match raw.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{raw}` is not a whole number")),
    }
}

/// Largest `--max-tokens`, the bound `GET /v1/facts/context` applies too.
const MAX_CONTEXT_TOKENS: usize = 1_000_000;

/// A token budget in `1..=MAX_CONTEXT_TOKENS`: an empty budget gives no context at all,
/// which is a mistake, not a request.
pub(crate) fn parse_max_tokens(raw: &str) -> Result<usize, String> {
    match raw.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_CONTEXT_TOKENS).contains(&n) => Ok(n),
        Ok(n) => Err(format!("{n} is not in 1..={MAX_CONTEXT_TOKENS}")),
        Err(_) => Err(format!("`{raw}` is not a whole number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defect_11_max_tokens_zero_is_refused_as_over_http() {
        assert_eq!(parse_max_tokens("2000"), Ok(2000));
        assert_eq!(parse_max_tokens("1000000"), Ok(MAX_CONTEXT_TOKENS));
        assert_eq!(parse_max_tokens("0"), Err("0 is not in 1..=1000000".to_owned()));
        assert!(parse_max_tokens("1000001").is_err());
        assert!(parse_max_tokens("-1").unwrap_err().contains("not a whole number"));
    }

    #[test]
    fn unit_values_are_validated() {
        assert_eq!(parse_unit("0.75"), Ok(0.75));
        assert_eq!(parse_unit(" 1 "), Ok(1.0));
        assert!(parse_unit("1.5").unwrap_err().contains("outside [0, 1]"));
        assert!(parse_unit("NaN").is_err());
        assert!(parse_unit("sure").unwrap_err().contains("not a number"));
        assert_eq!(parse_max_facts("3"), Ok(3));
        assert!(parse_max_facts("0").is_err());
        assert!(parse_max_facts("-1").is_err());
    }
}
