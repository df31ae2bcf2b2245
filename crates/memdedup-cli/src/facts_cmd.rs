//! `memdedup facts add|list|update|delete|extract|context|profile`: the fact memory (seed
//! 002).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use memdedup::crates::core::{
    ExtractedFact, FactPolicy, FactView, InvalidFact, MemoryProfile, default_token_counter, format_context,
};
use memdedup::crates::llm::{ConversationTurn, TokenUsage, extract_facts};
use memdedup::crates::store::{Fact, FactOutcome, FactUpdate, NewFact};
use memdedup::{JudgeOverrides, Scope, Store};
use serde_json::{Value, json};

use crate::UsageError;
use crate::cli::GlobalArgs;
use crate::cli::facts::{
    FactsAddArgs, FactsCommand, FactsContextArgs, FactsDeleteArgs, FactsExtractArgs, FactsListArgs, FactsProfileArgs,
    FactsUpdateArgs,
};
use crate::input::{display_name, read_text, without_bom};
use crate::open::{config_file, open_store, scope as parse_scope};
use crate::output::{emit, plural, snippet};
use crate::transcript::{parse_transcript, parse_turn_json};

/// Runs one `facts` subcommand.
pub(crate) async fn run(global: &GlobalArgs, command: &FactsCommand) -> Result<()> {
    // Check the scope before opening (and so perhaps creating) a database.
    let scope = match command {
        FactsCommand::Add(FactsAddArgs { scope: args, .. })
        | FactsCommand::List(FactsListArgs { scope: args, .. })
        | FactsCommand::Context(FactsContextArgs { scope: args, .. })
        | FactsCommand::Profile(FactsProfileArgs { scope: args, .. }) => parse_scope(args)?,
        FactsCommand::Update(_) | FactsCommand::Delete(_) => Scope::default(),
        // Opens the store only to store (not on a dry run).
        FactsCommand::Extract(args) => return extract(global, parse_scope(&args.scope)?, args).await,
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
        FactsCommand::Extract(_) => Ok(()), // returned above
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

/// One line per fact evicted to make room.
fn evicted_lines(evicted: &[memdedup::crates::store::Fact]) -> String {
    evicted
        .iter()
        .map(|old| format!("evicted {} (confidence {:.2}) to stay within the fact limit\n", old.id, old.confidence))
        .collect()
}

/// What `facts add` did, one line per change.
fn outcome_text(outcome: &FactOutcome, scope: &Scope) -> String {
    match outcome {
        FactOutcome::Added { fact, evicted } => {
            format!("added {} to {scope}\n{}", fact.id, evicted_lines(evicted))
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
        let name = crate::input::display_name(path);
        let value: serde_json::Value = serde_json::from_str(crate::input::without_bom(&text))
            .map_err(|e| UsageError(format!("{name} is not JSON: {e}")))?;
        let profile = MemoryProfile::from_replacement(&value)
            .map_err(|e| UsageError(format!("{name} is not a profile: {e}; the stored profile is unchanged")))?;
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

/// One extracted fact and what storing it did.
struct Extracted {
    /// 1-based turn number.
    turn: usize,
    fact: ExtractedFact,
    /// `None` on a dry run.
    outcome: Option<FactOutcome>,
}

async fn extract(global: &GlobalArgs, scope: Scope, args: &FactsExtractArgs) -> Result<()> {
    let policy =
        FactPolicy::new(args.policy.min_confidence, args.policy.max_facts).map_err(|e| UsageError(e.to_string()))?;
    let turns = read_turns(args)?;
    let config = config_file(global)?;
    let overrides = JudgeOverrides {
        kind: args.judge.judge.clone(),
        base_url: args.judge.judge_url.clone(),
        model: args.judge.judge_model.clone(),
        params: None,
    };
    // Extraction needs a chat model: no default judge stands in for one.
    let model = config
        .judge_settings_if_chosen(&overrides)?
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no judge is configured: pass --judge openai|anthropic (with --judge-url and --judge-model), \
                 set MEMDEDUP_JUDGE, or set `judge.kind` in memdedup.toml"
            )
        })?
        .chat_model()?;

    // Every turn is extracted before anything is stored: one unusable reply stores nothing.
    let mut kept = Vec::new();
    let mut skipped: Vec<ExtractedFact> = Vec::new();
    // (turn, the model's invalid fact): skipped, the turn's other facts kept.
    let mut invalid: Vec<(usize, InvalidFact)> = Vec::new();
    let mut usage = TokenUsage::default();
    let mut calls = 0;
    for (index, turn) in turns.iter().enumerate() {
        let extraction = extract_facts(model.as_ref(), turn, policy.confidence_threshold).await.with_context(|| {
            format!("fact extraction failed on turn {} of {}; nothing was stored", index + 1, turns.len())
        })?;
        if !turn.user.trim().is_empty() || !turn.assistant.trim().is_empty() {
            calls += 1;
        }
        usage.input_tokens = usage.input_tokens.saturating_add(extraction.usage.input_tokens);
        usage.output_tokens = usage.output_tokens.saturating_add(extraction.usage.output_tokens);
        kept.extend(extraction.kept.into_iter().map(|fact| (index + 1, fact)));
        skipped.extend(extraction.skipped_low_confidence);
        invalid.extend(extraction.skipped_invalid.into_iter().map(|fact| (index + 1, fact)));
    }

    let mut facts = Vec::with_capacity(kept.len());
    if args.dry_run {
        facts.extend(kept.into_iter().map(|(turn, fact)| Extracted { turn, fact, outcome: None }));
    } else {
        let store = open_store(global, &config).await?;
        let mut stored = Ok(());
        for (turn, fact) in kept {
            let mut new = NewFact::new(scope.clone(), &fact.content, fact.category, fact.confidence);
            if let Some(source) = &args.source {
                new = new.with_source(source);
            }
            match store.add_fact(new, &policy).await {
                Ok(outcome) => facts.push(Extracted { turn, fact, outcome: Some(outcome) }),
                Err(error) => {
                    stored = Err(error);
                    break;
                }
            }
        }
        store.close().await;
        stored?;
    }
    let mut categories: BTreeMap<&str, usize> = BTreeMap::new();
    for fact in &skipped {
        *categories.entry(fact.category.as_str()).or_default() += 1;
    }
    tracing::info!(
        %scope,
        dry_run = args.dry_run,
        turns = turns.len(),
        kept = facts.len(),
        skipped_low_confidence = skipped.len(),
        skipped_invalid = invalid.len(),
        input_tokens = usage.input_tokens,
        output_tokens = usage.output_tokens,
        "extracted facts"
    );
    if args.json {
        let value = json!({
            "dry_run": args.dry_run,
            "scope": scope,
            "turns": turns.len(),
            "llm_calls": calls,
            "facts": facts.iter().map(extracted_json).collect::<Vec<_>>(),
            "skipped_low_confidence": {"count": skipped.len(), "categories": categories},
            "skipped_invalid": invalid
                .iter()
                .map(|(turn, fact)| json!({"turn": turn, "index": fact.index, "reason": fact.reason}))
                .collect::<Vec<_>>(),
            "usage": usage,
        });
        return emit(&format!("{value}\n"));
    }
    let mut out = String::new();
    for extracted in &facts {
        out.push_str(&extracted_text(extracted, &scope));
    }
    for (turn, fact) in &invalid {
        out.push_str(&format!("skipped invalid fact {} of turn {turn} (not stored): {}\n", fact.index, fact.reason));
    }
    if !skipped.is_empty() {
        let counts: Vec<String> = categories.iter().map(|(category, n)| format!("{category} {n}")).collect();
        out.push_str(&format!(
            "skipped {} below the confidence threshold {:.2} (not stored): {}\n",
            plural(skipped.len(), "low-confidence fact"),
            policy.confidence_threshold,
            counts.join(", ")
        ));
    }
    if facts.is_empty() && skipped.is_empty() {
        out.push_str("no facts extracted\n");
    }
    out.push_str(&format!(
        "{}, {}, {} input + {} output tokens{}\n",
        plural(turns.len(), "turn"),
        plural(calls, "LLM call"),
        usage.input_tokens,
        usage.output_tokens,
        if args.dry_run { "; dry run: nothing stored" } else { "" }
    ));
    emit(&out)
}

/// The turns of the input: one JSON turn, or the turns of a transcript.
fn read_turns(args: &FactsExtractArgs) -> Result<Vec<ConversationTurn>> {
    match (&args.transcript, &args.turn) {
        (Some(path), _) => parse_transcript(&read_text(path)?, &display_name(path)),
        (None, Some(path)) => Ok(vec![parse_turn_json(&read_text(path)?, &display_name(path))?]),
        (None, None) => Err(UsageError("give a turn file (or `-`) or --transcript FILE".to_owned()).into()),
    }
}

/// `added fact_1234abcd (preference, 0.90): content`, and what else happened.
fn extracted_text(extracted: &Extracted, scope: &Scope) -> String {
    let fact = &extracted.fact;
    let about = format!("({}, {:.2}): {}", fact.category, fact.confidence, snippet(&fact.content, 200));
    match &extracted.outcome {
        None => format!("extracted {about}\n"),
        Some(FactOutcome::Added { fact: added, evicted }) => {
            format!("added {} {about}\n{}", added.id, evicted_lines(evicted))
        }
        Some(FactOutcome::Duplicate { existing }) => format!("duplicate of {} {about}\n", existing.id),
        Some(FactOutcome::Outranked { lowest_kept, max_facts, .. }) => format!(
            "skipped {about}\n  {scope} holds {max_facts} facts, and keeping this one would evict one of confidence \
             {lowest_kept:.2}\n"
        ),
        Some(other) => format!("skipped {about}\n  {}", outcome_text(other, scope)),
    }
}

/// One fact of `facts extract --json`.
fn extracted_json(extracted: &Extracted) -> Value {
    let fact = &extracted.fact;
    let mut value = json!({
        "turn": extracted.turn,
        "content": fact.content,
        "category": fact.category,
        "confidence": fact.confidence,
    });
    let (outcome, extra) = match &extracted.outcome {
        None => ("extracted", json!({})),
        Some(FactOutcome::Added { fact, evicted }) => {
            ("added", json!({"id": fact.id, "evicted": evicted.iter().map(|f| &f.id).collect::<Vec<_>>()}))
        }
        Some(FactOutcome::Duplicate { existing }) => ("duplicate", json!({"duplicate_of": existing.id})),
        Some(FactOutcome::Outranked { .. }) => ("outranked", json!({})),
        Some(_) => ("skipped", json!({})),
    };
    value["outcome"] = json!(outcome);
    if let (Value::Object(target), Value::Object(extra)) = (&mut value, extra) {
        target.extend(extra);
    }
    value
}
