//! How the checker chain's verdicts read: JSON with the scope, one line of evidence, and
//! warnings for checks that failed open. Shared by `check`, `add` and `capture`.

use memdedup::{AddOutcome, DuplicateCheckResult, DuplicateReason, PairVerdict, Scope};
use serde_json::json;

use crate::output::score;

pub(crate) fn add_json(outcome: &AddOutcome, scope: &Scope) -> String {
    with_scope(outcome, scope)
}

/// `value`'s JSON object with a `scope` member added. Serialised directly (not through
/// `serde_json::Value`), so `f32` scores print as their shortest decimal (0.92, not
/// 0.9200000166893005).
pub(crate) fn with_scope<T: serde::Serialize>(value: &T, scope: &Scope) -> String {
    #[derive(serde::Serialize)]
    struct WithScope<'a, T> {
        #[serde(flatten)]
        value: &'a T,
        scope: &'a Scope,
    }
    serde_json::to_string(&WithScope { value, scope }).unwrap_or_else(|e| json!({"error": e.to_string()}).to_string())
}

pub(crate) fn add_line(outcome: &AddOutcome, scope: &Scope) -> String {
    match &outcome.urn {
        Some(urn) => {
            let note = if !outcome.embedded {
                " (without an embedding: no semantic check ran)".to_owned()
            } else if outcome.check.verdict == PairVerdict::Related {
                format!(" ({})", verdict_line(&outcome.check, scope))
            } else {
                String::new()
            };
            format!("stored {urn}{note}")
        }
        None => format!("not stored: {}", verdict_line(&outcome.check, scope)),
    }
}

/// One line saying what the check found and why.
pub(crate) fn verdict_line(r: &DuplicateCheckResult, scope: &Scope) -> String {
    let urn = r.matched_urn.as_deref().unwrap_or("?");
    match r.reason {
        Some(DuplicateReason::ExactMatch) => format!("duplicate of {urn}: exact match (same normalised text)"),
        Some(DuplicateReason::SemanticSimilar) if r.judge != "cosine" => format!(
            "duplicate of {urn}: the {} judge confirms it at cosine {:.4} (threshold {:.2}): {}",
            r.judge,
            score(r.similarity_score.unwrap_or(0.0)),
            r.threshold,
            r.reasons.join("; ")
        ),
        Some(DuplicateReason::SemanticSimilar) => format!(
            "duplicate of {urn}: semantically similar, cosine {:.4} >= threshold {:.2}",
            score(r.similarity_score.unwrap_or(0.0)),
            r.threshold
        ),
        Some(DuplicateReason::RecentCapture) => {
            format!("duplicate of {urn}: captured {} s ago", r.captured_secs_ago.unwrap_or(0))
        }
        None => match r.nearest {
            Some(n) if r.verdict == PairVerdict::Related => format!(
                "related to {}, not a duplicate: cosine {:.4} (threshold {:.2}): {}",
                scope.urn(n.id),
                score(n.score),
                r.threshold,
                r.reasons.join("; ")
            ),
            Some(n) => format!(
                "unique in {scope}: nearest {} at cosine {:.4} < threshold {:.2}",
                scope.urn(n.id),
                score(n.score),
                r.threshold
            ),
            None => format!("unique in {scope}"),
        },
    }
}

pub(crate) fn warn_degraded(result: &DuplicateCheckResult) {
    for failure in &result.degraded {
        tracing::warn!("{} check skipped (failed open): {}", failure.check.label(), failure.error);
    }
}
