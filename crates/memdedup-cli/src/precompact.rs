//! Seed 004's PreCompact hook output, and where the failures of `hook pre-compact` are
//! counted. Shared by `capture`, `hook pre-compact` and `stats`.

use memdedup::{AddOutcome, DuplicateReason, Scope};
use serde_json::{Value, json};

/// The scope whose skip counters (`Store::record_skip`) count the failures of `hook
/// pre-compact`, by reason (`input`, `transcript`, `llm`, `embedder`, `store`,
/// `timeout`). It holds no memories; `stats` shows its counts apart from the duplicates.
pub(crate) const HOOK_FAILURE_DOMAIN: &str = "global";
/// See [`HOOK_FAILURE_DOMAIN`]; the store refuses memories, facts and nodes there.
pub(crate) const HOOK_FAILURE_NAMESPACE: &str = memdedup::crates::store::HOOK_FAILURE_NAMESPACE;

/// Whether a scope of `stats` is the one counting hook failures.
pub(crate) fn is_hook_failure_scope(domain: &str, namespace: &str) -> bool {
    domain == HOOK_FAILURE_DOMAIN && namespace == HOOK_FAILURE_NAMESPACE
}

/// The one JSON document a PreCompact hook prints: seed 004's `hookSpecificOutput`
/// carrying `context`, and `systemMessage`, the one-line summary Claude Code shows the
/// user (it does not add a PreCompact hook's output to the model's context).
pub(crate) fn hook_output(context: &str, summary: &str) -> Value {
    json!({
        "hookSpecificOutput": {
            "hookEventName": "PreCompact",
            "additionalContext": context,
        },
        "systemMessage": summary,
    })
}

/// The one-line summary of a capture for the user: how many memories were captured and
/// how many duplicates skipped.
pub(crate) fn summary(outcomes: &[(String, Scope, AddOutcome)]) -> String {
    let captured = outcomes.iter().filter(|(_, _, o)| o.stored.is_some()).count();
    let skipped = outcomes.len() - captured;
    let uncertain =
        outcomes.iter().filter(|(_, _, o)| o.stored.is_some() && o.check.likely_duplicate.is_some()).count();
    let mut line = format!(
        "memdedup: captured {} before compaction, skipped {}",
        count(captured, "memory", "memories"),
        count(skipped, "duplicate", "duplicates")
    );
    if uncertain > 0 {
        line.push_str(&format!(" ({uncertain} to review: memdedup review)"));
    }
    line
}

/// Seed 004's hook text: what was captured (with URNs) and what was skipped and why.
pub(crate) fn additional_context(outcomes: &[(String, Scope, AddOutcome)]) -> String {
    let captured: Vec<_> = outcomes.iter().filter(|(_, _, o)| o.stored.is_some()).collect();
    let skipped: Vec<_> = outcomes.iter().filter(|(_, _, o)| o.stored.is_none()).collect();
    let mut out = String::new();
    if captured.is_empty() && skipped.is_empty() {
        return "No memories to capture before compaction.".to_owned();
    }
    if !captured.is_empty() {
        out.push_str(&format!("Auto-captured {} before compaction:\n", count(captured.len(), "memory", "memories")));
        for (i, (content, scope, outcome)) in captured.iter().enumerate() {
            out.push_str(&format!(
                "\n{}. **{}**: {}\n   URN: {}\n",
                i + 1,
                scope.namespace_name(),
                cut(content, 80),
                outcome.urn.as_deref().unwrap_or_default()
            ));
            // The judge was unsure: stored, with the memory it may duplicate, to review.
            if let Some(likely) = &outcome.check.likely_duplicate {
                out.push_str(&format!(
                    "   May duplicate: {likely} (P(duplicate) {:.2}, to review)\n",
                    outcome.check.probability.unwrap_or(0.0)
                ));
            }
        }
    }
    if !skipped.is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("Skipped {}:", count(skipped.len(), "duplicate", "duplicates")));
        for (content, _, outcome) in &skipped {
            let check = &outcome.check;
            let urn = check.matched_urn.as_deref().unwrap_or_default();
            let quoted = format!("\"{}\"", cut(content, 40));
            let line = match check.reason {
                Some(DuplicateReason::ExactMatch) => format!("Exact match: {quoted} (matches {urn})"),
                Some(DuplicateReason::SemanticSimilar) => {
                    let percent = (check.similarity_score.unwrap_or(0.0) * 100.0).floor();
                    format!("Semantic {percent}%: {quoted} (similar to {urn})")
                }
                Some(DuplicateReason::RecentCapture) => {
                    format!("Recent capture: {quoted} (captured {}, {urn})", ago(check.captured_secs_ago.unwrap_or(0)))
                }
                None => format!("Not stored: {quoted}"),
            };
            out.push_str(&format!("\n- {line}"));
        }
    }
    out.trim_end().to_owned()
}

fn count(n: usize, one: &str, many: &str) -> String {
    if n == 1 { format!("1 {one}") } else { format!("{n} {many}") }
}

fn ago(secs: u64) -> String {
    if secs < 60 { format!("{secs} s ago") } else { format!("{} min ago", secs / 60) }
}

/// The text on one line, cut to `max` characters with "..." (the seed's style).
fn cut(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        format!("{}...", flat.chars().take(max).collect::<String>().trim_end())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_short_text_and_marks_cuts() {
        assert_eq!(cut("Use  PostgreSQL\nnow", 40), "Use PostgreSQL now");
        assert_eq!(cut("Use PostgreSQL for the primary database", 20), "Use PostgreSQL for t...");
        assert_eq!(ago(125), "2 min ago");
        assert_eq!(ago(5), "5 s ago");
    }

    #[test]
    fn hook_output_has_the_seed_shape() {
        let value = hook_output("Nothing.", "memdedup: nothing");
        assert_eq!(value["hookSpecificOutput"]["hookEventName"], "PreCompact");
        assert_eq!(value["hookSpecificOutput"]["additionalContext"], "Nothing.");
        assert_eq!(additional_context(&[]), "No memories to capture before compaction.");
        assert!(is_hook_failure_scope("global", "hook.pre-compact"));
        assert!(!is_hook_failure_scope("global", "decisions"));
    }
}
