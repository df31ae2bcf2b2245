//! How the checker chain's verdicts read: JSON with the scope, one line of evidence, and
//! warnings for checks that failed open. Shared by `check`, `add` and `capture`.

use memdedup::{AddOutcome, DuplicateCheckResult, Scope};
use serde_json::json;

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
    outcome.explanation(scope)
}

/// One line saying what the check found and why.
pub(crate) fn verdict_line(r: &DuplicateCheckResult, scope: &Scope) -> String {
    r.explanation(scope)
}

pub(crate) fn warn_degraded(result: &DuplicateCheckResult) {
    for failure in &result.degraded {
        tracing::warn!("{} check skipped (failed open): {}", failure.check.label(), failure.error);
    }
    for note in &result.notes {
        tracing::warn!("{note}");
    }
}
