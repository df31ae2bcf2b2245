//! `memdedup facts add|list|update|delete|context|profile`: the fact memory (seed 002).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use memdedup::crates::core::{
    DEFAULT_CONFIDENCE_THRESHOLD, DEFAULT_MAX_FACTS, DEFAULT_MAX_TOKENS, FactCategory, FactPolicy, FactView,
    MemoryProfile, default_token_counter, format_context,
};
use memdedup::crates::store::{Fact, FactOutcome, FactUpdate, NewFact};
use memdedup::{Scope, Store};
use serde_json::json;

use crate::UsageError;
use crate::cli::{GlobalArgs, ScopeArgs};
use crate::input::{read_text, without_bom};
use crate::memory_cmd::{config_file, open_store, scope as parse_scope};
use crate::output::{emit, snippet};

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

/// Runs one `facts` subcommand.
pub(crate) async fn run(global: &GlobalArgs, command: &FactsCommand) -> Result<()> {
    // Check the scope before opening (and so perhaps creating) a database.
    let scope = match command {
        FactsCommand::Add(FactsAddArgs { scope: args, .. })
        | FactsCommand::List(FactsListArgs { scope: args, .. })
        | FactsCommand::Context(FactsContextArgs { scope: args, .. })
        | FactsCommand::Profile(FactsProfileArgs { scope: args, .. }) => parse_scope(args)?,
        FactsCommand::Update(_) | FactsCommand::Delete(_) => Scope::default(),
    };
    let config = config_file(global)?;
    let store = open_store(global, &config).await?;
    let result = match command {
        FactsCommand::Add(args) => add(&store, scope, args).await,
        FactsCommand::List(args) => list(&store, &scope, args).await,
        FactsCommand::Update(args) => update(&store, args).await,
        FactsCommand::Delete(args) => delete(&store, args).await,
        FactsCommand::Context(args) => context(&store, &scope, args).await,
        FactsCommand::Profile(args) => profile(&store, &scope, args).await,
    };
    store.close().await;
    result
}

async fn add(store: &Store, scope: Scope, args: &FactsAddArgs) -> Result<()> {
    let text = text_arg(&args.text)?;
    let policy =
        FactPolicy::new(args.policy.min_confidence, args.policy.max_facts).map_err(|e| UsageError(e.to_string()))?;
    let mut fact = NewFact::new(scope.clone(), text, args.category, args.confidence);
    if let Some(source) = &args.source {
        fact = fact.with_source(source);
    }
    let outcome = store.add_fact(fact, &policy).await?;
    if args.json {
        emit(&format!("{}\n", serde_json::to_string(&outcome)?))
    } else {
        emit(&outcome_text(&outcome, &scope))
    }
}

/// What `facts add` did, one line per change.
fn outcome_text(outcome: &FactOutcome, scope: &Scope) -> String {
    match outcome {
        FactOutcome::Added { fact, evicted } => {
            let mut out = format!("added {} to {scope}\n", fact.id);
            for old in evicted {
                out.push_str(&format!(
                    "evicted {} (confidence {:.2}) to stay within the fact limit\n",
                    old.id, old.confidence
                ));
            }
            out
        }
        FactOutcome::Duplicate { existing } => {
            format!("skipped: duplicate of {} in {scope} (same content, ignoring case)\n", existing.id)
        }
        FactOutcome::LowConfidence { confidence, threshold } => {
            format!("skipped: confidence {confidence:.2} is below the threshold {threshold:.2}\n")
        }
    }
}

async fn list(store: &Store, scope: &Scope, args: &FactsListArgs) -> Result<()> {
    let facts = store.list_facts(scope).await?;
    if args.json {
        return emit(&format!("{}\n", serde_json::to_string(&facts)?));
    }
    if facts.is_empty() {
        return emit(&format!("no facts in {scope}\n"));
    }
    let mut out = String::new();
    for fact in &facts {
        out.push_str(&fact_line(fact));
    }
    emit(&out)
}

/// `fact_1234abcd  0.90  preference  content…`.
fn fact_line(fact: &Fact) -> String {
    format!("{}  {:.2}  {:<10}  {}\n", fact.id, fact.confidence, fact.category.as_str(), snippet(&fact.content, 70))
}

async fn update(store: &Store, args: &FactsUpdateArgs) -> Result<()> {
    let update = FactUpdate {
        content: args.content.as_deref().map(text_arg).transpose()?,
        category: args.category,
        confidence: args.confidence,
    };
    if update.is_empty() {
        return Err(UsageError("nothing to update: give --content, --category or --confidence".to_owned()).into());
    }
    let fact = store.update_fact(&args.id, update).await?;
    if args.json { emit(&format!("{}\n", serde_json::to_string(&fact)?)) } else { emit(&fact_line(&fact)) }
}

async fn delete(store: &Store, args: &FactsDeleteArgs) -> Result<()> {
    store.delete_fact(&args.id).await?;
    if args.json {
        emit(&format!("{}\n", json!({ "deleted": args.id })))
    } else {
        emit(&format!("deleted {}\n", args.id))
    }
}

async fn context(store: &Store, scope: &Scope, args: &FactsContextArgs) -> Result<()> {
    let profile = store.profile(scope).await?;
    let facts = store.list_facts(scope).await?;
    let views: Vec<FactView<'_>> = facts.iter().map(Fact::view).collect();
    let counter = default_token_counter();
    let text = format_context(&profile, &views, args.max_tokens, counter);
    if args.json {
        let value = json!({ "context": text, "tokens": counter.count(&text), "max_tokens": args.max_tokens });
        emit(&format!("{value}\n"))
    } else if text.is_empty() {
        Ok(())
    } else {
        emit(&format!("{text}\n"))
    }
}

async fn profile(store: &Store, scope: &Scope, args: &FactsProfileArgs) -> Result<()> {
    if let Some(path) = &args.set {
        let text = read_text(path)?;
        let profile: MemoryProfile = serde_json::from_str(crate::input::without_bom(&text))
            .with_context(|| format!("{} is not a profile", crate::input::display_name(path)))?;
        store.put_profile(scope, &profile).await?;
    }
    let profile = store.profile(scope).await?;
    emit(&format!("{}\n", serde_json::to_string_pretty(&profile)?))
}

/// The text argument, or stdin for `-` (without a leading byte-order mark, which is
/// an encoding marker, not text).
fn text_arg(text: &str) -> Result<String> {
    if text == "-" { read_text(Path::new("-")).map(|t| without_bom(&t).to_owned()) } else { Ok(text.to_owned()) }
}

/// A finite number in [0, 1].
fn parse_unit(raw: &str) -> Result<f64, String> {
    let value: f64 = raw.trim().parse().map_err(|_| format!("`{raw}` is not a number"))?;
    if !(0.0..=1.0).contains(&value) {
        return Err(format!("{raw} is outside [0, 1]"));
    }
    Ok(value)
}

/// A whole number of at least 1.
fn parse_max_facts(raw: &str) -> Result<usize, String> {
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
fn parse_max_tokens(raw: &str) -> Result<usize, String> {
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
