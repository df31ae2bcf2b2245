//! `memdedup facts add|list|update|delete|context|profile`: the fact memory (seed 002).

use std::path::Path;

use anyhow::{Context, Result};
use memdedup::crates::core::{FactPolicy, FactView, MemoryProfile, default_token_counter, format_context};
use memdedup::crates::store::{Fact, FactOutcome, FactUpdate, NewFact};
use memdedup::{Scope, Store};
use serde_json::json;

use crate::UsageError;
use crate::cli::GlobalArgs;
use crate::cli::facts::{
    FactsAddArgs, FactsCommand, FactsContextArgs, FactsDeleteArgs, FactsListArgs, FactsProfileArgs, FactsUpdateArgs,
};
use crate::input::{read_text, without_bom};
use crate::open::{config_file, open_store, scope as parse_scope};
use crate::output::{emit, snippet};

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
        FactOutcome::Outranked { confidence, lowest_kept, max_facts } => format!(
            "skipped: {scope} holds {max_facts} facts, and keeping this one (confidence {confidence:.2}) would \
             evict one of confidence {lowest_kept:.2}\n"
        ),
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
