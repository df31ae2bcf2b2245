//! `memdedup review`: list the pairs a judge was unsure of, and decide them.

use anyhow::{Context, Result};
use memdedup::crates::store::{Memory, MemoryId, Review, ReviewDecision, ReviewFilter, ReviewId, ReviewStatus, Store};
use serde_json::{Value, json};

use crate::UsageError;
use crate::cli::GlobalArgs;
use crate::cli::review::{DecideArgs, ReviewArgs, ReviewCommand};
use crate::open::{config_file, open_store};
use crate::output::{emit, plural};

mod interactive;

pub(crate) async fn run(global: &GlobalArgs, args: &ReviewArgs) -> Result<()> {
    let config = config_file(global)?;
    let store = open_store(global, &config).await?;
    let result = match &args.command {
        None if interactive::wanted(args) => interactive::run(global, &store, args).await,
        None => list(&store, args).await,
        Some(ReviewCommand::Decide(decide_args)) => decide(global, &store, decide_args).await,
    };
    store.close().await;
    result
}

async fn list(store: &Store, args: &ReviewArgs) -> Result<()> {
    let filter = ReviewFilter {
        domain: args.domain.clone(),
        namespace: args.namespace.clone(),
        all: args.all,
        limit: args.limit,
    };
    let reviews = store.reviews(&filter).await?;
    let mut shown = Vec::with_capacity(reviews.len());
    for review in &reviews {
        let low = store.get(review.low).await?;
        let high = store.get(review.high).await?;
        shown.push((review, low, high));
    }
    if args.json {
        let items: Vec<Value> =
            shown.iter().map(|(r, low, high)| review_json(r, low.as_ref(), high.as_ref())).collect();
        return emit(&format!("{}\n", Value::Array(items)));
    }
    if shown.is_empty() {
        return emit(if args.all { "the review queue is empty\n" } else { "no pair waits for review\n" });
    }
    let mut out = String::new();
    for (review, low, high) in &shown {
        let probability = review.probability.map(|p| format!(", P(duplicate) {p:.3}")).unwrap_or_default();
        out.push_str(&format!(
            "review {} [{}] {}: memories {} and {}, cosine {:.4}{probability}, judge {} ({})\n",
            review.id, review.scope, review.status, review.low, review.high, review.cosine, review.judge, review.source
        ));
        for (id, memory) in [(review.low, low), (review.high, high)] {
            let text = memory.as_ref().map_or("(deleted)", |m| m.content.as_str());
            out.push_str(&format!("  {id}  {}\n", one_line(text)));
        }
        for reason in &review.reasons {
            out.push_str(&format!("  why: {reason}\n"));
        }
    }
    let pending = shown.iter().filter(|(r, ..)| r.status == ReviewStatus::Pending).count();
    out.push_str(&format!(
        "{} pending; decide with: memdedup review decide ID merge|apart|skip\n",
        plural(pending, "pair")
    ));
    emit(&out)
}

async fn decide(global: &GlobalArgs, store: &Store, args: &DecideArgs) -> Result<()> {
    let id: ReviewId =
        args.id.trim().parse().map_err(|_| UsageError(format!("`{}` is not a review entry id", args.id)))?;
    let (review, merge) = match args.decision.as_str() {
        "merge" => {
            let (review, record) = merge_entry(store, id, args.survivor.map(MemoryId::new)).await?;
            (review, Some(record))
        }
        "apart" => (store.decide_review(id, ReviewDecision::Apart).await?, None),
        _ => (store.decide_review(id, ReviewDecision::Skip).await?, None),
    };
    if args.json {
        let mut out = review_json(&review, None, None);
        out["merge"] = serde_json::to_value(&merge)?;
        return emit(&format!("{out}\n"));
    }
    let (flags, note) = crate::dedup_cmd::undo_flags(global);
    let line = match (&merge, review.status) {
        (Some(record), _) => format!(
            "review {id}: merged memory {} into {} (merge {})\nundo with: memdedup{flags} undo {}{note}\n",
            record.absorbed.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
            record.survivor,
            record.id,
            record.id
        ),
        (None, ReviewStatus::Apart) => format!(
            "review {id}: memories {} and {} kept apart; the pair will not be proposed again\n",
            review.low, review.high
        ),
        (None, _) => format!("review {id}: skipped\n"),
    };
    emit(&line)
}

/// Decides entry `id` merge, keeping `survivor` (default: the older memory, of lower id),
/// through the merge ledger. A survivor outside the pair is a usage error.
pub(crate) async fn merge_entry(
    store: &Store,
    id: ReviewId,
    survivor: Option<MemoryId>,
) -> Result<(Review, memdedup::MergeRecord)> {
    if let Some(s) = survivor {
        let review = store.review(id).await?.with_context(|| format!("no review entry with id {id}"))?;
        if s != review.low && s != review.high {
            return Err(UsageError(format!(
                "--survivor {s} is not one of the pair's memories ({} and {})",
                review.low, review.high
            ))
            .into());
        }
    }
    Ok(store.merge_review_keeping(id, survivor, 1.0, &format!("decided in review {id}"), "review").await?)
}

fn review_json(review: &Review, low: Option<&Memory>, high: Option<&Memory>) -> Value {
    let memory = |id: MemoryId, memory: Option<&Memory>| json!({"id": id, "urn": review.scope.urn(id), "text": memory.map(|m| m.content.as_str())});
    json!({
        "id": review.id,
        "scope": review.scope,
        "status": review.status,
        "low": memory(review.low, low),
        "high": memory(review.high, high),
        "cosine": review.cosine,
        "probability": review.probability,
        "judge": review.judge,
        "reasons": review.reasons,
        "source": review.source,
        "merge_id": review.merge_id,
        "created_at": review.created_at,
        "decided_at": review.decided_at,
    })
}

/// `text` on one line: line breaks as spaces.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
