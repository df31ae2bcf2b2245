//! What `hook pre-compact` prints: seed 004's hook output with a line on what failed, or
//! with `--json` a report of the whole run.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use super::Run;
use super::claude_transcript::Transcript;
use crate::output::plural;
use crate::precompact::additional_context;
use crate::verdict::add_json;

/// What reading the transcript found.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct TranscriptCounts {
    /// Non-blank lines read.
    pub lines: usize,
    /// Human-readable user and assistant messages among them.
    pub messages: usize,
    /// Lines skipped as malformed.
    pub malformed_lines: usize,
    /// Bytes at the start of a long transcript that were not read.
    pub skipped_bytes: u64,
}

impl TranscriptCounts {
    pub(crate) fn of(transcript: &Transcript) -> TranscriptCounts {
        TranscriptCounts {
            lines: transcript.lines,
            messages: transcript.messages.len(),
            malformed_lines: transcript.malformed,
            skipped_bytes: transcript.skipped_bytes,
        }
    }
}

/// The hook output: what was captured and skipped (seed 004's text), then, when anything
/// failed, one line saying what.
pub(crate) fn hook_output(run: &Run) -> Value {
    let mut summary = crate::precompact::summary(&run.outcomes);
    if !run.failures.is_empty() {
        summary.push_str(&format!("; {} failed (see memdedup stats)", plural(run.failures.len(), "step")));
    }
    crate::precompact::hook_output(&context(run), &summary)
}

fn context(run: &Run) -> String {
    let mut text = if run.outcomes.is_empty() && !run.failures.is_empty() {
        "No memories were captured before compaction.".to_owned()
    } else {
        additional_context(&run.outcomes)
    };
    if !run.dropped.is_empty() {
        let (dropped, cap) = (run.dropped.len(), run.max_candidates.unwrap_or_default());
        text.push_str(&format!(
            "\n\nmemdedup: {} over the cap of {cap} (--max-candidates, [hook] max_candidates) \
             {} not captured; the most memorable were kept.",
            plural(dropped, "more candidate"),
            if dropped == 1 { "was" } else { "were" }
        ));
    }
    if !run.failures.is_empty() {
        let messages: Vec<&str> = run.failures.iter().map(|(_, message)| message.as_str()).collect();
        text.push_str(&format!("\n\nmemdedup: {}.", messages.join("; ")));
    }
    text
}

/// The `--json` report of a run.
pub(crate) fn json_report(run: &Run, elapsed: Duration) -> Value {
    let results: Vec<Value> = run
        .outcomes
        .iter()
        .map(|(_, scope, outcome)| serde_json::from_str(&add_json(outcome, scope)).unwrap_or(Value::Null))
        .collect();
    let stored = run.outcomes.iter().filter(|(_, _, o)| o.stored.is_some()).count();
    json!({
        "session_id": run.session_id,
        "trigger": run.trigger,
        "transcript": run.transcript,
        "analyser": run.analyser,
        "llm_calls": run.llm_calls,
        "llm_skipped_invalid": run.llm_skipped_invalid,
        "analysis_ms": run.analysis_ms,
        "candidates": run.candidates,
        "max_candidates": run.max_candidates,
        "dropped": run.dropped,
        "results": results,
        "stored": stored,
        "skipped": run.outcomes.len() - stored,
        "failures": run.failures.iter().map(|(failure, message)| json!({"reason": failure, "message": message})).collect::<Vec<_>>(),
        "elapsed_ms": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
    })
}
