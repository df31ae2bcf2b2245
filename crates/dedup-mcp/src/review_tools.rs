//! `review_list` and `review_decide`: the host agent as the judge of the review queue.
//!
//! `review_list` gives the pending pairs as seed 003 batches (bootstrap mode: every id is
//! decided), one per namespace, within a size budget, with the judge's prompt and the
//! reply's JSON schema. `review_decide` takes the agent's reply in seed 003's response
//! contract, validates it exactly as an LLM judge's reply is validated (unknown ids, low
//! confidence, missing decisions...) against the batch rebuilt from the queue, and applies
//! it: a group that is one pending pair is merged through the merge ledger (undoable), and
//! every other pending pair of the batch is kept apart. A refused reply changes nothing;
//! a failure half-way undoes what was applied.

use std::collections::{BTreeMap, BTreeSet};

use memdedup::crates::core::{CandidateEdge, ContractLimits, JudgeMemory, JudgeRules, MemoryStatus, validate_response};
use memdedup::crates::store::{Review, ReviewDecision, ReviewFilter, ReviewId, ReviewStatus};
use memdedup::{JudgeBatch, JudgeMode, JudgePrompts, JudgeResponse, Scope};
use serde::Serialize;
use serde_json::Value;

use crate::access::Access;
use crate::args::{ReviewDecideArgs, ReviewListArgs, in_range};
use crate::context::McpContext;
use crate::reply::{ToolError, ToolResult, plural, success};

/// The size budget of `review_list` when not told, and its bounds (bytes of the batches' JSON).
const DEFAULT_MAX_BYTES: u32 = 32 * 1024;
const MAX_BYTES: std::ops::RangeInclusive<u32> = 1024..=256 * 1024;
/// Most pending entries read per call.
const MAX_ENTRIES_READ: usize = 2000;
/// Most pairs one batch holds.
const MAX_PAIRS_PER_BATCH: usize = 50;
/// The prefix of a review batch's id; the entry ids follow, comma separated.
const BATCH_PREFIX: &str = "review:";
/// The judge name a merge decided this way records.
const JUDGE: &str = "agent";

/// The result of `review_list`.
#[derive(Serialize)]
struct Listed {
    /// The batches, one per namespace (a namespace with more pairs than fit may appear in
    /// several calls).
    batches: Vec<JudgeBatch>,
    /// Pending pairs the caller may decide, in all.
    pending: usize,
    /// Pending pairs left out for the size budget.
    left_out: usize,
    /// How to judge a batch: seed 003's system prompt and its bootstrap rules.
    instructions: String,
    /// The JSON schema of the `response` `review_decide` takes.
    response_schema: Value,
}

/// The pending entries the caller may see, in id order, narrowed by the arguments.
async fn pending(
    context: &McpContext,
    access: &Access,
    namespace: &Option<String>,
    domain: &Option<String>,
) -> Result<Vec<Review>, ToolError> {
    if let Some(namespace) = namespace {
        let scope = Scope::new(domain.as_deref().unwrap_or(memdedup::DEFAULT_DOMAIN), namespace)
            .map_err(|e| ToolError::InvalidArgument(e.to_string()))?;
        access.check(&scope)?;
    }
    let filter =
        ReviewFilter { domain: domain.clone(), namespace: namespace.clone(), all: false, limit: MAX_ENTRIES_READ };
    let reviews = context
        .service
        .store()
        .reviews(&filter)
        .await
        .map_err(|e| ToolError::failed("cannot read the review queue", e))?;
    Ok(reviews.into_iter().filter(|r| access.allows(r.scope.namespace_name())).collect())
}

/// The seed 003 batch of `entries` (all of one scope): both memories of every pair, and
/// the pairs as candidate edges. `None` when a memory is gone.
async fn batch_of(context: &McpContext, entries: &[&Review]) -> Result<Option<JudgeBatch>, ToolError> {
    let store = context.service.store();
    let mut memories = BTreeMap::new();
    for entry in entries {
        for id in [entry.low, entry.high] {
            if memories.contains_key(&id.get()) {
                continue;
            }
            let Some(memory) = store.get(id).await.map_err(|e| ToolError::failed("cannot read a memory", e))? else {
                return Ok(None);
            };
            memories.insert(
                id.get(),
                JudgeMemory {
                    id: id.get(),
                    status: MemoryStatus::Unverified,
                    text: memory.content,
                    kind: memory.kind,
                    metadata: memory.metadata,
                    occurrence_count: memory.occurrence_count,
                },
            );
        }
    }
    let mut edges: Vec<CandidateEdge> = entries
        .iter()
        .map(|e| CandidateEdge { source_id: e.low.get(), target_id: e.high.get(), similarity: e.cosine })
        .collect();
    edges.sort_by(|a, b| b.similarity.total_cmp(&a.similarity));
    let ids: Vec<String> = entries.iter().map(|e| e.id.to_string()).collect();
    Ok(Some(JudgeBatch {
        mode: JudgeMode::Bootstrap,
        batch_id: format!("{BATCH_PREFIX}{}", ids.join(",")),
        rules: JudgeRules::default(),
        memories: memories.into_values().collect(),
        candidate_edges: edges,
    }))
}

pub(crate) async fn list(context: &McpContext, access: &Access, args: ReviewListArgs) -> ToolResult {
    let budget = in_range("max_bytes", args.max_bytes.unwrap_or(DEFAULT_MAX_BYTES), MAX_BYTES)?;
    let entries = pending(context, access, &args.namespace, &args.domain).await?;
    let mut by_scope: BTreeMap<Scope, Vec<&Review>> = BTreeMap::new();
    for entry in &entries {
        by_scope.entry(entry.scope.clone()).or_default().push(entry);
    }
    let mut batches = Vec::new();
    let (mut used, mut taken) = (0, 0);
    for scope_entries in by_scope.values() {
        // The largest prefix of the scope's pairs that fits what is left of the budget.
        let mut fitted: Option<(JudgeBatch, usize)> = None;
        for n in 1..=scope_entries.len().min(MAX_PAIRS_PER_BATCH) {
            let Some(batch) = batch_of(context, &scope_entries[..n]).await? else { break };
            let size = batch.to_payload().len();
            if used + size > budget {
                break;
            }
            fitted = Some((batch, size));
        }
        if let Some((batch, size)) = fitted {
            used += size;
            taken += batch.candidate_edges.len();
            batches.push(batch);
        }
    }
    let prompts = JudgePrompts::default();
    let listed = Listed {
        pending: entries.len(),
        left_out: entries.len() - taken,
        batches,
        instructions: format!("{}\n\n{}", prompts.system.trim(), prompts.bootstrap.trim()),
        response_schema: JudgeResponse::json_schema(),
    };
    let text = format!(
        "{} to review in {}{}; reply to each batch with review_decide",
        plural(taken, "pair"),
        plural(listed.batches.len(), "batch"),
        if listed.left_out > 0 {
            format!(" ({} more left out for the size budget)", listed.left_out)
        } else {
            String::new()
        }
    );
    success(&listed, text)
}

/// What `review_decide` did to one pair.
#[derive(Serialize)]
struct Decided {
    review: ReviewId,
    decision: &'static str,
    /// The merge, for a merged pair (undo it with `merge_undo`).
    #[serde(skip_serializing_if = "Option::is_none")]
    merge_id: Option<i64>,
}

/// The entries a batch id names, all pending and of one scope the caller may use.
async fn entries_of(context: &McpContext, access: &Access, batch_id: &str) -> Result<Vec<Review>, ToolError> {
    let bad = || ToolError::InvalidArgument(format!("`{batch_id}` is not a batch id from review_list"));
    let ids = batch_id.strip_prefix(BATCH_PREFIX).ok_or_else(bad)?;
    let ids: BTreeSet<ReviewId> =
        ids.split(',').map(|id| id.trim().parse::<ReviewId>().map_err(|_| bad())).collect::<Result<_, _>>()?;
    if ids.is_empty() || ids.len() > MAX_PAIRS_PER_BATCH {
        return Err(bad());
    }
    let store = context.service.store();
    let mut entries = Vec::new();
    for id in ids {
        let entry = store
            .review(id)
            .await
            .map_err(|e| ToolError::failed("cannot read the review queue", e))?
            .filter(|r| access.allows(r.scope.namespace_name()))
            .ok_or_else(|| ToolError::NotFound(format!("no review entry with id {id}")))?;
        if entry.status != ReviewStatus::Pending {
            return Err(ToolError::InvalidArgument(format!(
                "review entry {id} is {} now: list the queue again with review_list",
                entry.status
            )));
        }
        entries.push(entry);
    }
    if entries.iter().any(|e| e.scope != entries[0].scope) {
        return Err(bad());
    }
    Ok(entries)
}

pub(crate) async fn decide(context: &McpContext, access: &Access, args: ReviewDecideArgs) -> ToolResult {
    let entries = entries_of(context, access, &args.batch_id).await?;
    let refs: Vec<&Review> = entries.iter().collect();
    let batch = batch_of(context, &refs).await?.ok_or_else(|| {
        ToolError::InvalidArgument("a memory of the batch is gone: list the queue again with review_list".to_owned())
    })?;
    let response: JudgeResponse = serde_json::from_value(args.response)
        .map_err(|e| ToolError::InvalidArgument(format!("`response` is not seed 003's reply: {e}")))?;
    let (decided, notes) = apply(context, &entries, &batch, response).await?;
    let merged = decided.iter().filter(|d| d.decision == "merge").count();
    let text = format!(
        "{}: {} merged (undo with merge_undo), {} kept apart",
        args.batch_id,
        plural(merged, "pair"),
        plural(decided.len() - merged, "pair")
    );
    success(&serde_json::json!({"batch_id": args.batch_id, "decided": decided, "notes": notes}), text)
}

/// Validates `response` against `batch` (the batch of `entries`) and applies it: each
/// group, exactly one pending pair, is merged through the ledger; every other pair is
/// kept apart. A refusal changes nothing; a failure half-way takes back what was done.
async fn apply(
    context: &McpContext,
    entries: &[Review],
    batch: &JudgeBatch,
    response: JudgeResponse,
) -> Result<(Vec<Decided>, Vec<String>), ToolError> {
    let validated = validate_response(batch, response, &ContractLimits::default())
        .map_err(|e| ToolError::InvalidArgument(e.to_string()))?;
    // Every group must be exactly one pending pair: that is what a review decides.
    let mut merges: Vec<(&Review, f64, String)> = Vec::new();
    let mut grouped = BTreeSet::new();
    for (g, group) in validated.groups.iter().enumerate() {
        let pair = entries.iter().find(|e| group.ids == [e.low.get(), e.high.get()]);
        let Some(entry) = pair else {
            return Err(ToolError::InvalidArgument(format!(
                "group {g} ({:?}) is not one pair of the batch: a review merges one pending pair at a time",
                group.ids
            )));
        };
        grouped.insert(entry.id);
        merges.push((entry, group.confidence, group.reason.clone()));
    }
    let store = context.service.store();
    let mut decided: Vec<Decided> = Vec::new();
    let mut applied: Vec<(ReviewId, Option<memdedup::MergeId>)> = Vec::new();
    let result: Result<(), ToolError> = async {
        for (entry, confidence, reason) in &merges {
            let (_, record) = store
                .merge_review_keeping(entry.id, None, *confidence, &format!("agent: {reason}"), JUDGE)
                .await
                .map_err(|e| ToolError::InvalidArgument(format!("cannot merge review entry {}: {e}", entry.id)))?;
            applied.push((entry.id, Some(record.id)));
            decided.push(Decided { review: entry.id, decision: "merge", merge_id: Some(record.id.get()) });
        }
        for entry in entries.iter().filter(|e| !grouped.contains(&e.id)) {
            store
                .decide_review(entry.id, ReviewDecision::Apart)
                .await
                .map_err(|e| ToolError::InvalidArgument(format!("cannot decide review entry {}: {e}", entry.id)))?;
            applied.push((entry.id, None));
            decided.push(Decided { review: entry.id, decision: "apart", merge_id: None });
        }
        Ok(())
    }
    .await;
    if let Err(error) = result {
        // Nothing half applied: take back what was done, newest first.
        for (review, merge) in applied.into_iter().rev() {
            if let Some(merge) = merge
                && let Err(e) = store.undo_merge(merge, false).await
            {
                tracing::warn!(%review, error = %e, "review_decide: a merge could not be taken back");
            }
            if let Err(e) = store.reopen_review(review).await {
                tracing::warn!(%review, error = %e, "review_decide: a decision could not be taken back");
            }
        }
        return Err(error);
    }
    Ok((decided, validated.notes))
}

/// `review_run`: the pending pairs judged by the client's own model through MCP sampling,
/// batch by batch, each reply validated and applied as `review_decide` applies one. A batch
/// whose reply is refused (or not given) changes nothing and is reported; the others go on.
pub(crate) async fn run(
    context: &McpContext,
    access: &Access,
    args: ReviewListArgs,
    judge: &dyn memdedup::Judge,
) -> ToolResult {
    let budget = in_range("max_bytes", args.max_bytes.unwrap_or(DEFAULT_MAX_BYTES), MAX_BYTES)?;
    let entries = pending(context, access, &args.namespace, &args.domain).await?;
    let mut by_scope: BTreeMap<Scope, Vec<Review>> = BTreeMap::new();
    for entry in entries {
        by_scope.entry(entry.scope.clone()).or_default().push(entry);
    }
    let (mut decided, mut errors, mut batches) = (Vec::new(), Vec::new(), 0);
    for scope_entries in by_scope.values() {
        for chunk in scope_entries.chunks(MAX_PAIRS_PER_BATCH) {
            let refs: Vec<&Review> = chunk.iter().collect();
            let Some(batch) = batch_of(context, &refs).await? else { continue };
            if batch.to_payload().len() > budget {
                errors.push(format!("{}: over max_bytes ({budget}); left pending", batch.batch_id));
                continue;
            }
            batches += 1;
            let reply = match judge.judge(&batch).await {
                Ok(reply) => reply,
                Err(failure) => {
                    errors.push(format!("{}: {failure}", batch.batch_id));
                    continue;
                }
            };
            match apply(context, chunk, &batch, reply.response).await {
                Ok((done, _)) => decided.extend(done),
                Err(error) => errors.push(format!("{}: {}", batch.batch_id, error.message())),
            }
        }
    }
    let merged = decided.iter().filter(|d| d.decision == "merge").count();
    let text = format!(
        "your model judged {}: {} merged (undo with merge_undo), {} kept apart{}",
        plural(batches, "batch"),
        plural(merged, "pair"),
        plural(decided.len() - merged, "pair"),
        if errors.is_empty() {
            String::new()
        } else {
            format!("; {} not applied: {}", plural(errors.len(), "batch"), errors.join("; "))
        }
    );
    success(&serde_json::json!({"batches": batches, "decided": decided, "errors": errors}), text)
}
