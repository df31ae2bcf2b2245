//! `dedup_scan`, `dedup_run`, `merges_list`, `merge_undo` and the fact tools.

use std::sync::Arc;

use memdedup::crates::core::{
    DEFAULT_MAX_TOKENS, ExtractedFact, FactView, InvalidFact, default_token_counter, format_context,
};
use memdedup::crates::llm::{ConversationTurn, TokenUsage, extract_facts};
use memdedup::crates::store::{Fact, FactOutcome, NewFact};
use memdedup::{CachedEmbedder, Deduplicator, Embedder, Judge, MergeFilter, MergeId, MergeRecord, Scope};
use serde::Serialize;

use crate::access::Access;
use crate::args::{
    DedupArgs, FactsAddArgs, FactsContextArgs, FactsExtractArgs, MergeUndoArgs, MergesListArgs, ScopeArgs, in_range,
    text_arg,
};
use crate::context::McpContext;
use crate::reply::{ToolError, ToolResult, plural, success};

/// Most memories one dedup call may be told to judge.
const MAX_DEDUP_LIMIT: u32 = 100_000;
/// Merges `merges_list` returns when not told, and at most.
const DEFAULT_MERGES: u32 = 50;
const MAX_MERGES: u32 = 500;
/// The largest token budget of `facts_context` (as the HTTP API).
const MAX_CONTEXT_TOKENS: u32 = 1_000_000;

/// A store error: the caller's mistake when the store refused the request, a failure when
/// the store is unavailable.
fn store_error(doing: &str, error: memdedup::crates::store::Error) -> ToolError {
    if error.is_unavailable() { ToolError::failed(doing, error) } else { ToolError::InvalidArgument(error.to_string()) }
}

pub(crate) async fn dedup(
    context: &McpContext,
    access: &Access,
    args: DedupArgs,
    dry_run: bool,
    judge: Arc<dyn Judge>,
) -> ToolResult {
    let mut options = context.dedup_options.clone();
    options.dry_run = dry_run;
    if let Some(limit) = args.limit {
        options.limit = Some(in_range("limit", limit, 1..=MAX_DEDUP_LIMIT)?);
    }
    let store = context.service.store().clone();
    let scopes = if args.all_namespaces {
        if args.namespace.is_some() {
            return Err(ToolError::InvalidArgument("give `namespace` or `all_namespaces`, not both".to_owned()));
        }
        let stats = store.stats().await.map_err(|e| ToolError::failed("cannot list the namespaces", e))?;
        let mut scopes = Vec::new();
        for namespace in stats.namespaces {
            if access.allows(&namespace.namespace) && args.domain.as_deref().is_none_or(|d| d == namespace.domain) {
                scopes.push(
                    Scope::new(&namespace.domain, &namespace.namespace)
                        .map_err(|e| ToolError::failed("a stored namespace is not valid", e))?,
                );
            }
        }
        scopes
    } else {
        let scope = ScopeArgs { namespace: args.namespace, domain: args.domain }.scope()?;
        access.check(&scope)?;
        vec![scope]
    };
    if let Some(why) = &context.judge_unavailable {
        return Err(ToolError::NotConfigured(format!(
            "assisted dedup needs the configured judge, which cannot be made: {why}"
        )));
    }
    let Some(embedder) = context.service.embedder() else {
        return Err(ToolError::NotConfigured(
            "assisted dedup needs the embedding model for its candidates, and this server runs without one".to_owned(),
        ));
    };
    let embedder: Arc<dyn Embedder> = Arc::new(CachedEmbedder::new(embedder.clone(), store.clone()));
    let deduplicator = Deduplicator::new(store, embedder, judge.clone(), options)
        .map_err(|e| ToolError::InvalidArgument(e.to_string()))?;
    let report = deduplicator.run_scopes(&scopes).await.map_err(|e| ToolError::failed("assisted dedup failed", e))?;
    let failed_calls: u64 = report.passes.iter().map(|p| p.failed_batches as u64).sum();
    if report.judge_calls > 0 && failed_calls == report.judge_calls {
        return Err(ToolError::Failed(format!(
            "every judge call failed ({}); the memories stay unverified for the next run",
            report.errors.first().map_or("no detail", String::as_str)
        )));
    }
    let judge = judge.name();
    let text = if dry_run {
        format!(
            "dry run {} (nothing written): the {judge} judge confirms {} in {}",
            report.run_id,
            plural(report.proposals.len(), "group"),
            plural(scopes.len(), "namespace")
        )
    } else if report.merged > 0 {
        format!(
            "run {}: the {judge} judge merged {} ({} absorbed); undo with merge_undo {{\"run_id\": \"{}\"}}",
            report.run_id,
            plural(report.merged as usize, "group"),
            plural(report.absorbed as usize, "memory"),
            report.run_id
        )
    } else {
        format!(
            "run {}: nothing to merge ({} verified)",
            report.run_id,
            plural(report.marked_verified as usize, "memory")
        )
    };
    success(&report, text)
}

/// The result of `merges_list`.
#[derive(Serialize)]
struct Merges {
    merges: Vec<MergeRecord>,
    /// How many matched, before `limit`.
    total: usize,
}

pub(crate) async fn merges(context: &McpContext, access: &Access, args: MergesListArgs) -> ToolResult {
    let limit = in_range("limit", args.limit.unwrap_or(DEFAULT_MERGES), 1..=MAX_MERGES)?;
    if let Some(namespace) = &args.namespace {
        let scope = ScopeArgs { namespace: Some(namespace.clone()), domain: args.domain.clone() }.scope()?;
        access.check(&scope)?;
    } else if let Some(domain) = &args.domain {
        ScopeArgs { namespace: None, domain: Some(domain.clone()) }.scope()?;
    }
    let filter = MergeFilter {
        domain: args.domain,
        namespace: args.namespace,
        run_id: args.run_id,
        include_undone: args.include_undone,
    };
    let mut merges = context
        .service
        .store()
        .merges(&filter)
        .await
        .map_err(|e| ToolError::failed("cannot read the merge ledger", e))?;
    merges.retain(|m| access.allows(m.scope.namespace_name()));
    let total = merges.len();
    let merges = merges.split_off(total.saturating_sub(limit));
    let text = if total > merges.len() {
        format!("{} (the {} most recent shown)", plural(total, "merge"), merges.len())
    } else {
        plural(total, "merge")
    };
    success(&Merges { merges, total }, text)
}

pub(crate) async fn undo(context: &McpContext, access: &Access, args: MergeUndoArgs) -> ToolResult {
    let store = context.service.store();
    let block = !args.allow_remerge;
    let reports = match (args.merge_id, args.run_id) {
        (Some(id), None) => {
            let id = MergeId::new(id);
            let record = store
                .merge(id)
                .await
                .map_err(|e| ToolError::failed("cannot read the merge ledger", e))?
                .ok_or_else(|| ToolError::NotFound(format!("no merge with id {id}")))?;
            access.check(&record.scope)?;
            vec![store.undo_merge(id, block).await.map_err(|e| store_error(&format!("cannot undo merge {id}"), e))?]
        }
        (None, Some(run)) => {
            let filter = MergeFilter { run_id: Some(run.clone()), include_undone: true, ..MergeFilter::default() };
            let records =
                store.merges(&filter).await.map_err(|e| ToolError::failed("cannot read the merge ledger", e))?;
            if records.is_empty() {
                return Err(ToolError::NotFound(format!("the merge ledger has no merge of run {run:?}")));
            }
            for record in &records {
                access.check(&record.scope)?;
            }
            let reports =
                store.undo_run(&run, block).await.map_err(|e| store_error(&format!("cannot undo run {run}"), e))?;
            if reports.is_empty() {
                return Err(ToolError::InvalidArgument(format!(
                    "cannot undo run {run}: its {} undone already",
                    if records.len() == 1 { "merge was".to_owned() } else { format!("{} merges were", records.len()) }
                )));
            }
            reports
        }
        _ => return Err(ToolError::InvalidArgument("give exactly one of `merge_id` and `run_id`".to_owned())),
    };
    let restored: usize = reports.iter().map(|r| r.restored.len()).sum();
    let text = format!("undid {}: restored {}", plural(reports.len(), "merge"), plural(restored, "memory"));
    success(&serde_json::json!({ "undone": reports }), text)
}

pub(crate) async fn facts_add(context: &McpContext, access: &Access, args: FactsAddArgs) -> ToolResult {
    let scope = ScopeArgs { namespace: args.namespace, domain: args.domain }.scope()?;
    text_arg("content", &args.content)?;
    if !(args.confidence.is_finite() && (0.0..=1.0).contains(&args.confidence)) {
        return Err(ToolError::InvalidArgument(format!(
            "`confidence` is {}, not a number from 0 to 1",
            args.confidence
        )));
    }
    access.check(&scope)?;
    let mut fact = NewFact::new(scope.clone(), args.content, args.category, args.confidence);
    if let Some(source) = args.source {
        fact = fact.with_source(source);
    }
    let outcome = context
        .service
        .store()
        .add_fact(fact, &context.fact_policy)
        .await
        .map_err(|e| store_error("cannot add the fact", e))?;
    let text = fact_outcome_text(&outcome, &scope);
    success(&outcome, text)
}

/// What storing a fact did, in one line.
fn fact_outcome_text(outcome: &FactOutcome, scope: &Scope) -> String {
    match outcome {
        FactOutcome::Added { fact, evicted } if evicted.is_empty() => format!("added {} to {scope}", fact.id),
        FactOutcome::Added { fact, evicted } => {
            format!(
                "added {} to {scope}, evicting {} to stay within the fact limit",
                fact.id,
                plural(evicted.len(), "fact")
            )
        }
        FactOutcome::Duplicate { existing } => {
            format!("skipped: duplicate of {} in {scope} (same content, ignoring case)", existing.id)
        }
        FactOutcome::Outranked { confidence, lowest_kept, max_facts } => format!(
            "skipped: {scope} holds {max_facts} facts, and keeping this one (confidence {confidence:.2}) would \
             evict one of confidence {lowest_kept:.2}"
        ),
        FactOutcome::LowConfidence { confidence, threshold } => {
            format!("skipped: confidence {confidence:.2} is below the threshold {threshold:.2}")
        }
    }
}

/// The result of `facts_context`.
#[derive(Serialize)]
struct Context {
    context: String,
    tokens: usize,
    max_tokens: usize,
    facts: usize,
}

pub(crate) async fn facts_context(context: &McpContext, access: &Access, args: FactsContextArgs) -> ToolResult {
    let scope = ScopeArgs { namespace: args.namespace, domain: args.domain }.scope()?;
    let default = u32::try_from(DEFAULT_MAX_TOKENS).unwrap_or(MAX_CONTEXT_TOKENS);
    let max_tokens = in_range("max_tokens", args.max_tokens.unwrap_or(default), 1..=MAX_CONTEXT_TOKENS)?;
    access.check(&scope)?;
    let store = context.service.store();
    let profile = store.profile(&scope).await.map_err(|e| ToolError::failed("cannot read the profile", e))?;
    let facts = store.list_facts(&scope).await.map_err(|e| ToolError::failed("cannot read the facts", e))?;
    let views: Vec<FactView<'_>> = facts.iter().map(Fact::view).collect();
    let counter = default_token_counter();
    let text = format_context(&profile, &views, max_tokens, counter);
    let tokens = counter.count(&text);
    let summary = if text.is_empty() {
        format!("no profile or facts in {scope}")
    } else {
        format!("{} tokens of context from {} in {scope}:\n{text}", tokens, plural(facts.len(), "fact"))
    };
    success(&Context { context: text, tokens, max_tokens, facts: facts.len() }, summary)
}

/// One fact `facts_extract` found, and what storing it did (absent on a dry run).
#[derive(Serialize)]
struct Extracted {
    #[serde(flatten)]
    fact: ExtractedFact,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<FactOutcome>,
}

/// The result of `facts_extract`.
#[derive(Serialize)]
struct Extraction {
    dry_run: bool,
    facts: Vec<Extracted>,
    skipped_low_confidence: Vec<ExtractedFact>,
    /// The model's invalid facts (index and why), not stored.
    skipped_invalid: Vec<InvalidFact>,
    usage: TokenUsage,
}

pub(crate) async fn facts_extract(context: &McpContext, access: &Access, args: FactsExtractArgs) -> ToolResult {
    let Some(chat) = &context.chat else {
        return Err(ToolError::NotConfigured(
            "facts_extract needs a language model: configure an openai or anthropic judge ([judge] in memdedup.toml)"
                .to_owned(),
        ));
    };
    let scope = ScopeArgs { namespace: args.namespace, domain: args.domain }.scope()?;
    if args.user.trim().is_empty() && args.assistant.trim().is_empty() {
        return Err(ToolError::InvalidArgument("`user` and `assistant` are both empty".to_owned()));
    }
    for (what, text) in [("user", &args.user), ("assistant", &args.assistant)] {
        if !text.trim().is_empty() {
            text_arg(what, text)?;
        }
    }
    access.check(&scope)?;
    let turn = ConversationTurn { user: args.user, assistant: args.assistant };
    let extraction = extract_facts(chat.as_ref(), &turn, context.fact_policy.confidence_threshold)
        .await
        .map_err(|e| ToolError::failed("fact extraction failed; nothing was stored", e))?;
    let mut facts = Vec::with_capacity(extraction.kept.len());
    for fact in extraction.kept {
        let outcome = if args.dry_run {
            None
        } else {
            let new = NewFact::new(scope.clone(), &fact.content, fact.category, fact.confidence);
            Some(context.service.store().add_fact(new, &context.fact_policy).await.map_err(|e| {
                store_error(
                    &format!("cannot store fact {} of the turn (the ones before it are stored)", facts.len() + 1),
                    e,
                )
            })?)
        };
        facts.push(Extracted { fact, outcome });
    }
    let added = facts.iter().filter(|f| matches!(f.outcome, Some(FactOutcome::Added { .. }))).count();
    let mut text = if args.dry_run {
        format!("dry run: {} would be stored in {scope}", plural(facts.len(), "fact"))
    } else {
        format!("{} found, {} added to {scope}", plural(facts.len(), "fact"), added)
    };
    if !extraction.skipped_invalid.is_empty() {
        let indexes: Vec<String> = extraction.skipped_invalid.iter().map(|f| f.index.to_string()).collect();
        text.push_str(&format!(
            "; skipped {} of the model's reply (index {}), see skipped_invalid",
            plural(indexes.len(), "invalid fact"),
            indexes.join(", ")
        ));
    }
    success(
        &Extraction {
            dry_run: args.dry_run,
            facts,
            skipped_low_confidence: extraction.skipped_low_confidence,
            skipped_invalid: extraction.skipped_invalid,
            usage: extraction.usage,
        },
        text,
    )
}
