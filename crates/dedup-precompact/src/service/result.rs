//! What the checker chain answers: [`DuplicateCheckResult`] (with its evidence and its
//! explanation line), [`AddOutcome`], and the names of checkers and reasons.

use std::fmt;

use dedup_core::PairVerdict;
use dedup_store::{MemoryId, Neighbour, Scope};
use serde::{Deserialize, Deserializer, Serialize};

use crate::PAIR_JUDGE_NAMES;

/// Why content was judged a duplicate: which checker decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DuplicateReason {
    /// A live memory of the scope has the same normalised content (same SHA-256).
    ExactMatch,
    /// A live memory of the scope is semantically the same: with the cosine judge, its
    /// cosine similarity is at least the scope's threshold; with the local judge, the judge
    /// confirmed it (see [`PairJudgeChoice`](crate::PairJudgeChoice)).
    SemanticSimilar,
    /// The same content was captured in the scope within the recent window.
    RecentCapture,
}

impl DuplicateReason {
    /// The metrics and statistics label: `exact`, `semantic` or `recent`.
    pub fn label(self) -> &'static str {
        match self {
            DuplicateReason::ExactMatch => "exact",
            DuplicateReason::SemanticSimilar => "semantic",
            DuplicateReason::RecentCapture => "recent",
        }
    }
}

impl fmt::Display for DuplicateReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DuplicateReason::ExactMatch => "exact match",
            DuplicateReason::SemanticSimilar => "semantically similar",
            DuplicateReason::RecentCapture => "recent capture",
        })
    }
}

/// One checker of the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckType {
    /// Content-hash lookup in the store.
    Exact,
    /// Embedding plus vector search in the scope.
    Semantic,
    /// Recent-capture cache lookup.
    Recent,
}

impl CheckType {
    /// The metrics label: `exact`, `semantic` or `recent`.
    pub fn label(self) -> &'static str {
        match self {
            CheckType::Exact => "exact",
            CheckType::Semantic => "semantic",
            CheckType::Recent => "recent",
        }
    }
}

/// A checker that failed and was skipped (the check failed open).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckFailure {
    /// Which checker failed.
    pub check: CheckType,
    /// Why, as the failing component reported it (never memory text).
    pub error: String,
}

/// The answer of [`DeduplicationService::check_duplicate`](crate::DeduplicationService::check_duplicate), with its evidence.
///
/// Invariants: `matched_urn` and `matched_memory_id` are set whenever `is_duplicate` is;
/// `verdict` is `duplicate` exactly when `is_duplicate` is. It reads back from its JSON
/// (what `memdedup serve` answers at `/v1/memory/check` and over `/mcp`) unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DuplicateCheckResult {
    /// Whether the content duplicates a memory of its scope.
    pub is_duplicate: bool,
    /// Which checker decided, when it is a duplicate.
    pub reason: Option<DuplicateReason>,
    /// Cosine similarity of the best match: the semantic score, or 1.0 for an exact match.
    pub similarity_score: Option<f32>,
    /// The matched memory.
    pub matched_memory_id: Option<MemoryId>,
    /// The matched memory's URN, `memdedup://{domain}/{namespace}/{id}`.
    pub matched_urn: Option<String>,
    /// How long the check took, in whole milliseconds.
    pub check_duration_ms: u64,
    /// How long the check took, in microseconds.
    pub check_duration_us: u64,
    /// The similarity threshold in force for the scope's namespace.
    pub threshold: f32,
    /// The best semantic match even when below the threshold (for explanations).
    pub nearest: Option<Neighbour>,
    /// For a recent capture: how long ago it was captured, in seconds.
    pub captured_secs_ago: Option<u64>,
    /// Checkers that did not run because they were not needed or not applicable
    /// (deduplication disabled, content shorter than `min_semantic_length` or
    /// `min_semantic_words`, no embedder).
    pub not_run: Vec<CheckType>,
    /// Checkers that failed and were skipped (fail-open).
    pub degraded: Vec<CheckFailure>,
    /// The content hash's 16-digit fingerprint (what logs show instead of the text).
    pub fingerprint: String,
    /// The pair judge in force: `cosine` or `local` ([`PairJudgeChoice::name`](crate::PairJudgeChoice::name)).
    #[serde(deserialize_with = "judge_name")]
    pub judge: JudgeName,
    /// `duplicate`, `related` (a close memory the judge keeps apart: vetoed above the
    /// threshold, or not confirmed in the gray band below it; only with the local judge)
    /// or `unique`.
    pub verdict: PairVerdict,
    /// Why, in words, the first reason deciding: the judge's reasons about the matched
    /// memory (or, when not a duplicate, about the nearest one it judged); empty when no
    /// memory was close enough to judge.
    pub reasons: Vec<String>,
    /// The learned judge's calibrated P(duplicate) for the memory its verdict is about
    /// (the matched one, the likely duplicate, or the nearest it judged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f32>,
    /// With an `uncertain` verdict: the URN of the memory this content may duplicate. The
    /// content is not a duplicate (an `add` stores it); the pair is one to review.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub likely_duplicate: Option<String>,
    /// With an `uncertain` verdict: that memory's id and its cosine with the content. Not
    /// serialised (the URN says which memory); `add` queues the pair for review with it.
    #[serde(skip)]
    pub likely_duplicate_pair: Option<(MemoryId, f32)>,
    /// What the caller should know about how the verdict was reached, e.g. that the
    /// learned judge had no model and cosine decided.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The kinds of credentials replaced by `[REDACTED:<kind>]` before the text was checked
    /// (and stored), in order (`[dedup] secrets = "redact"`); never the values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redacted: Vec<String>,
}

/// A judge's name; an alias so that reading it back does not borrow from the input.
type JudgeName = &'static str;

/// One of [`PAIR_JUDGE_NAMES`], read back as the name [`PairJudgeChoice::name`](crate::PairJudgeChoice::name) gives.
fn judge_name<'de, D: Deserializer<'de>>(deserializer: D) -> std::result::Result<&'static str, D::Error> {
    let name = String::deserialize(deserializer)?;
    PAIR_JUDGE_NAMES.into_iter().find(|known| *known == name).ok_or_else(|| {
        serde::de::Error::custom(format_args!("unknown judge {name:?} (known: {})", PAIR_JUDGE_NAMES.join(", ")))
    })
}

impl DuplicateCheckResult {
    /// One line saying what the check found and why, for a check of content in `scope`:
    /// `duplicate of memdedup://…: semantically similar, cosine 0.9612 >= threshold 0.90`.
    /// Scores are rounded to four decimals. Credentials redacted from the text are named
    /// at the end (`; credentials redacted: aws_access_key_id`).
    pub fn explanation(&self, scope: &Scope) -> String {
        let mut line = self.verdict_explanation(scope);
        line.push_str(&self.redaction_note());
        line
    }

    /// `; credentials redacted: KIND, KIND` when the text had some, else nothing.
    pub fn redaction_note(&self) -> String {
        if self.redacted.is_empty() {
            return String::new();
        }
        format!("; credentials redacted: {}", self.redacted.join(", "))
    }

    fn verdict_explanation(&self, scope: &Scope) -> String {
        let score = |value: f32| (f64::from(value) * 10_000.0).round() / 10_000.0;
        let urn = self.matched_urn.as_deref().unwrap_or("?");
        match self.reason {
            Some(DuplicateReason::ExactMatch) => format!("duplicate of {urn}: exact match (same normalised text)"),
            Some(DuplicateReason::SemanticSimilar) if self.probability.is_some() => format!(
                "duplicate of {urn}: the learned judge gives P(duplicate) {:.3} at cosine {:.4}: {}",
                self.probability.unwrap_or(0.0),
                score(self.similarity_score.unwrap_or(0.0)),
                self.reasons.join("; ")
            ),
            Some(DuplicateReason::SemanticSimilar) if self.judge != "cosine" => format!(
                "duplicate of {urn}: the {} judge confirms it at cosine {:.4} (threshold {:.2}): {}",
                self.judge,
                score(self.similarity_score.unwrap_or(0.0)),
                self.threshold,
                self.reasons.join("; ")
            ),
            Some(DuplicateReason::SemanticSimilar) => format!(
                "duplicate of {urn}: semantically similar, cosine {:.4} >= threshold {:.2}",
                score(self.similarity_score.unwrap_or(0.0)),
                self.threshold
            ),
            Some(DuplicateReason::RecentCapture) => {
                format!("duplicate of {urn}: captured {} s ago", self.captured_secs_ago.unwrap_or(0))
            }
            None => match self.nearest {
                _ if self.verdict == PairVerdict::Uncertain => format!(
                    "uncertain: may duplicate {} (P(duplicate) {:.3}), not merged, to review: {}",
                    self.likely_duplicate.as_deref().unwrap_or("?"),
                    self.probability.unwrap_or(0.0),
                    self.reasons.join("; ")
                ),
                Some(n) if self.probability.is_some() => format!(
                    "{} in {scope}: nearest {} at cosine {:.4}: {}",
                    if self.verdict == PairVerdict::Related { "related, not a duplicate," } else { "unique" },
                    scope.urn(n.id),
                    score(n.score),
                    self.reasons.join("; ")
                ),
                Some(n) if self.verdict == PairVerdict::Related => format!(
                    "related to {}, not a duplicate: cosine {:.4} (threshold {:.2}): {}",
                    scope.urn(n.id),
                    score(n.score),
                    self.threshold,
                    self.reasons.join("; ")
                ),
                Some(n) => format!(
                    "unique in {scope}: nearest {} at cosine {:.4} < threshold {:.2}",
                    scope.urn(n.id),
                    score(n.score),
                    self.threshold
                ),
                None => format!("unique in {scope}"),
            },
        }
    }

    /// [`DuplicateCheckResult::explanation`] followed by each check that failed open and
    /// was skipped, since such a "unique" is unproven: what the MCP tool and the HTTP route
    /// answer, where the CLI prints warnings instead.
    pub fn explanation_noting_failures(&self, scope: &Scope) -> String {
        let mut explanation = self.explanation(scope);
        for failure in &self.degraded {
            explanation.push_str(&format!(
                " (the {} check failed and was skipped: {})",
                failure.check.label(),
                failure.error
            ));
        }
        if self.notes.iter().any(|n| n == crate::NO_EMBEDDER_NOTE) {
            explanation.push_str(&format!(" (warning: {})", crate::NO_EMBEDDER_NOTE));
        }
        explanation
    }
}

impl AddOutcome {
    /// One line saying what adding did: `stored memdedup://…` (with why a close memory
    /// was kept apart, the memory it may duplicate when the judge was unsure, or that no
    /// semantic check ran), or `not stored: duplicate of …`.
    pub fn explanation(&self, scope: &Scope) -> String {
        match &self.urn {
            Some(urn) => {
                let note = if !self.embedded && self.check.notes.iter().any(|n| n == crate::NO_EMBEDDER_NOTE) {
                    format!(" (warning: {})", crate::NO_EMBEDDER_NOTE)
                } else if !self.embedded {
                    " (without an embedding: no semantic check ran)".to_owned()
                } else if matches!(self.check.verdict, PairVerdict::Related | PairVerdict::Uncertain) {
                    format!(" ({})", self.check.explanation(scope))
                } else {
                    String::new()
                };
                let note = if matches!(self.check.verdict, PairVerdict::Related | PairVerdict::Uncertain) {
                    note
                } else {
                    format!("{note}{}", self.check.redaction_note())
                };
                format!("stored {urn}{note}")
            }
            None => format!("not stored: {}", self.check.explanation(scope)),
        }
    }
}

/// What [`DeduplicationService::add`](crate::DeduplicationService::add) did. It reads back from its JSON unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AddOutcome {
    /// The new memory's id, when it was stored.
    pub stored: Option<MemoryId>,
    /// The new memory's URN, when it was stored.
    pub urn: Option<String>,
    /// The duplicate check; when the store caught a duplicate that raced this one in, the
    /// check says so.
    pub check: DuplicateCheckResult,
    /// Whether the memory was stored with its embedding (false when the semantic check
    /// did not run or failed).
    pub embedded: bool,
}
