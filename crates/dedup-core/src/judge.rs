//! Seed 003's judge contract: the batch a judge receives, the reply it must give, and the
//! checks a reply passes before anything is merged.
//!
//! A [`JudgeBatch`] serialises to the seed's user payload (`mode`, `batch_id`, `rules`,
//! `memories`, `candidate_edges`); a [`JudgeResponse`] deserialises from the seed's reply
//! (`groups`, `no_match_ids`, `notes`). [`validate_response`] enforces every rule of the
//! seed's "Output constraints" and "Recommended post-parse safety checks" in both modes and
//! returns a [`ValidatedResponse`] in the seed's deterministic order, or every
//! [`Violation`] it found. A reply that fails changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest `reason` a group may give, in characters (seed 003 §3).
pub const MAX_REASON_CHARS: usize = 160;
/// Most sentences a canonical text may have (seed 003 §3 and §5).
pub const MAX_CANONICAL_SENTENCES: usize = 2;

/// Which decision rules a batch is judged by (seed 003 §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JudgeMode {
    /// Unverified memories against verified candidates: every unverified id is decided,
    /// every group holds an unverified id.
    Incremental,
    /// No stable verified pool yet: any ids of the batch may form groups, every id is
    /// decided.
    Bootstrap,
}

impl JudgeMode {
    /// `incremental` or `bootstrap`.
    pub fn as_str(self) -> &'static str {
        match self {
            JudgeMode::Incremental => "incremental",
            JudgeMode::Bootstrap => "bootstrap",
        }
    }
}

/// Whether a memory of a batch has been verified by an earlier pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryStatus {
    /// Not decided yet: this batch must decide it.
    Unverified,
    /// Decided earlier: a merge target or bridge.
    Verified,
}

/// One memory as the judge sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeMemory {
    /// The memory's id.
    pub id: i64,
    /// Verified or not.
    pub status: MemoryStatus,
    /// Its text.
    pub text: String,
    /// Its kind ("lesson", "decision", …).
    pub kind: String,
    /// Its metadata (tags, repos, paths, … — the preconditions a judge must respect).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// How often it was seen.
    pub occurrence_count: u64,
}

/// A candidate pair found by embedding similarity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CandidateEdge {
    /// The memory looking for a match (unverified in incremental mode).
    pub source_id: i64,
    /// The candidate (verified in incremental mode).
    pub target_id: i64,
    /// Cosine similarity, rounded to three decimals in the payload.
    #[serde(serialize_with = "round3")]
    pub similarity: f32,
}

fn round3<S: serde::Serializer>(value: &f32, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64((f64::from(*value) * 1000.0).round() / 1000.0)
}

/// The batch-level rules sent along with the memories.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct JudgeRules {
    /// Groups below this confidence must not be emitted.
    pub min_confidence_hint: f64,
    /// Most groups one reply may hold.
    pub max_groups: usize,
}

impl Default for JudgeRules {
    fn default() -> JudgeRules {
        JudgeRules { min_confidence_hint: 0.8, max_groups: 20 }
    }
}

/// One judge call's input: seed 003's user payload.
///
/// **Invariants** (kept by whoever builds it): ids are distinct; every edge joins two
/// memories of the batch; in incremental mode every edge goes from an unverified memory
/// to a verified one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeBatch {
    /// The decision rules.
    pub mode: JudgeMode,
    /// A name for this batch, unique within a run (for logs and the ledger).
    pub batch_id: String,
    /// Confidence hint and group cap.
    pub rules: JudgeRules,
    /// The memories, in id order.
    pub memories: Vec<JudgeMemory>,
    /// The candidate pairs, highest similarity first.
    pub candidate_edges: Vec<CandidateEdge>,
}

impl JudgeBatch {
    /// The payload as compact JSON, as it is sent to a judge.
    pub fn to_payload(&self) -> String {
        // Serialising plain data with string keys cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The ids a reply must decide: the unverified ones in incremental mode, all in
    /// bootstrap mode.
    pub fn ids_to_decide(&self) -> BTreeSet<i64> {
        self.memories
            .iter()
            .filter(|m| self.mode == JudgeMode::Bootstrap || m.status == MemoryStatus::Unverified)
            .map(|m| m.id)
            .collect()
    }
}

/// One duplicate group of a reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeGroup {
    /// The duplicates, at least two.
    pub ids: Vec<i64>,
    /// The text the group should keep.
    pub canonical_text: String,
    /// How sure the judge is, in `[0, 1]`.
    pub confidence: f64,
    /// Why, in at most [`MAX_REASON_CHARS`] characters.
    pub reason: String,
}

/// A judge's reply: seed 003's output schema. Unknown fields are ignored; `no_match_ids`
/// and `notes` may be omitted (then empty).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeResponse {
    /// The duplicate groups.
    pub groups: Vec<JudgeGroup>,
    /// Ids decided as having no duplicate.
    #[serde(default)]
    pub no_match_ids: Vec<i64>,
    /// Free-form remarks.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Pairs the judge was unsure of (an offline judge's uncertain band), to queue for
    /// review. Not part of seed 003's contract: never read from nor written to a reply.
    #[serde(skip)]
    pub uncertain: Vec<UncertainPair>,
}

/// A pair of a batch that a judge was unsure of.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UncertainPair {
    /// The memory of lower id.
    pub low: i64,
    /// The other.
    pub high: i64,
    /// Their cosine.
    pub cosine: f32,
    /// The judge's P(duplicate), when it gives one.
    pub probability: Option<f32>,
    /// The judge's name (`learned`, `local`).
    pub judge: String,
    /// Why.
    pub reasons: Vec<String>,
}

impl JudgeResponse {
    /// The JSON schema of a reply, for servers that constrain output to a schema.
    pub fn json_schema() -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["groups", "no_match_ids", "notes"],
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": false,
                        "required": ["ids", "canonical_text", "confidence", "reason"],
                        "properties": {
                            "ids": {"type": "array", "items": {"type": "integer"}},
                            "canonical_text": {"type": "string"},
                            "confidence": {"type": "number"},
                            "reason": {"type": "string"}
                        }
                    }
                },
                "no_match_ids": {"type": "array", "items": {"type": "integer"}},
                "notes": {"type": "array", "items": {"type": "string"}}
            }
        })
    }
}

/// Limits a reply is held to beyond the batch's own rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContractLimits {
    /// Longest reason, in characters. Default [`MAX_REASON_CHARS`].
    pub max_reason_chars: usize,
    /// Most sentences in a canonical text the merge takes; a longer one is not a
    /// contract violation: the merge keeps a member's text instead. Default
    /// [`MAX_CANONICAL_SENTENCES`].
    pub max_canonical_sentences: usize,
    /// Notes kept; more are dropped. Default 16.
    pub max_notes: usize,
    /// Characters kept of each note. Default 300.
    pub max_note_chars: usize,
}

impl Default for ContractLimits {
    fn default() -> ContractLimits {
        ContractLimits {
            max_reason_chars: MAX_REASON_CHARS,
            max_canonical_sentences: MAX_CANONICAL_SENTENCES,
            max_notes: 16,
            max_note_chars: 300,
        }
    }
}

/// One way a reply breaks the contract. Groups are numbered from 0 in reply order.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Violation {
    /// An id that is not positive.
    NonPositiveId {
        /// The id.
        id: i64,
    },
    /// An id the batch does not hold.
    UnknownId {
        /// The id.
        id: i64,
        /// Where it appeared ("group 2", "no_match_ids").
        place: String,
    },
    /// An id listed twice within one group.
    RepeatedInGroup {
        /// The group.
        group: usize,
        /// The id.
        id: i64,
    },
    /// An id placed more than once across groups and `no_match_ids`.
    PlacedTwice {
        /// The id.
        id: i64,
        /// Where it appeared.
        places: Vec<String>,
    },
    /// An id the reply had to decide but left out.
    Missing {
        /// The id.
        id: i64,
    },
    /// A group of fewer than two distinct ids.
    GroupTooSmall {
        /// The group.
        group: usize,
        /// Its distinct ids.
        size: usize,
    },
    /// More groups than the batch allows.
    TooManyGroups {
        /// Groups in the reply.
        count: usize,
        /// The batch's `max_groups`.
        max: usize,
    },
    /// A confidence outside `[0, 1]` or not a number.
    ConfidenceOutOfRange {
        /// The group.
        group: usize,
        /// The value.
        confidence: f64,
    },
    /// A group below the batch's confidence hint.
    BelowConfidenceHint {
        /// The group.
        group: usize,
        /// Its confidence.
        confidence: f64,
        /// The hint.
        hint: f64,
    },
    /// A reason longer than the limit.
    ReasonTooLong {
        /// The group.
        group: usize,
        /// Its length in characters.
        chars: usize,
        /// The limit.
        max: usize,
    },
    /// A blank canonical text.
    EmptyCanonicalText {
        /// The group.
        group: usize,
    },
    /// An incremental group without an unverified id.
    NoUnverifiedId {
        /// The group.
        group: usize,
    },
    /// A verified id in `no_match_ids` of an incremental reply.
    VerifiedInNoMatch {
        /// The id.
        id: i64,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::NonPositiveId { id } => write!(f, "id {id} is not a positive integer"),
            Violation::UnknownId { id, place } => write!(f, "{place} names id {id}, which is not in the batch"),
            Violation::RepeatedInGroup { group, id } => write!(f, "group {group} lists id {id} twice"),
            Violation::PlacedTwice { id, places } => write!(f, "id {id} appears in {}", places.join(" and ")),
            Violation::Missing { id } => write!(f, "id {id} is in neither a group nor no_match_ids"),
            Violation::GroupTooSmall { group, size } => {
                write!(f, "group {group} has {size} distinct id(s); a group needs at least 2")
            }
            Violation::TooManyGroups { count, max } => write!(f, "{count} groups, over the batch's max_groups {max}"),
            Violation::ConfidenceOutOfRange { group, confidence } => {
                write!(f, "group {group} has confidence {confidence}, outside [0, 1]")
            }
            Violation::BelowConfidenceHint { group, confidence, hint } => {
                write!(f, "group {group} has confidence {confidence}, below min_confidence_hint {hint}")
            }
            Violation::ReasonTooLong { group, chars, max } => {
                write!(f, "group {group}'s reason is {chars} characters, over the limit of {max}")
            }
            Violation::EmptyCanonicalText { group } => write!(f, "group {group}'s canonical_text is empty"),
            Violation::NoUnverifiedId { group } => {
                write!(f, "group {group} has no unverified id (incremental mode needs one per group)")
            }
            Violation::VerifiedInNoMatch { id } => {
                write!(f, "verified id {id} is in no_match_ids (incremental mode lists only unverified ids there)")
            }
        }
    }
}

/// Why a reply was rejected: every violation found, in a stable order.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the judge's reply breaks the contract: {}", summary(.violations))]
pub struct ContractError {
    /// What is wrong; never empty.
    pub violations: Vec<Violation>,
}

fn summary(violations: &[Violation]) -> String {
    const SHOWN: usize = 3;
    let mut text = violations.iter().take(SHOWN).map(ToString::to_string).collect::<Vec<_>>().join("; ");
    if violations.len() > SHOWN {
        text.push_str(&format!("; and {} more", violations.len() - SHOWN));
    }
    text
}

/// A reply that passed [`validate_response`], in the seed's deterministic order: ids
/// ascending within each group, groups by smallest id, `no_match_ids` ascending.
///
/// **Invariants:** every id is in the batch and appears once; every group has at least
/// two ids, a confidence in `[0, 1]` at or above the hint, a non-blank canonical text
/// (one over the sentence limit is not merged: a member's text is kept) and a short reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValidatedResponse {
    /// The groups.
    pub groups: Vec<JudgeGroup>,
    /// The ids without a duplicate.
    pub no_match_ids: Vec<i64>,
    /// The notes, at most [`ContractLimits::max_notes`], each cut to
    /// [`ContractLimits::max_note_chars`].
    pub notes: Vec<String>,
    /// Whether notes were dropped or cut.
    pub notes_trimmed: bool,
    /// The pairs the judge was unsure of whose memories are both in the batch.
    pub uncertain: Vec<UncertainPair>,
}

/// Checks `response` against `batch` and `limits`; see [`ValidatedResponse`] for what a
/// passing reply guarantees. Ordering rules are met by sorting, not by rejecting; oversized
/// notes are trimmed; everything else that breaks the contract is a [`Violation`].
pub fn validate_response(
    batch: &JudgeBatch,
    response: JudgeResponse,
    limits: &ContractLimits,
) -> Result<ValidatedResponse, ContractError> {
    let status: BTreeMap<i64, MemoryStatus> = batch.memories.iter().map(|m| (m.id, m.status)).collect();
    let incremental = batch.mode == JudgeMode::Incremental;
    let mut violations = Vec::new();
    let mut places: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    let mut check_id = |id: i64, place: String, violations: &mut Vec<Violation>| {
        if id <= 0 {
            violations.push(Violation::NonPositiveId { id });
        } else if !status.contains_key(&id) {
            violations.push(Violation::UnknownId { id, place: place.clone() });
        }
        places.entry(id).or_default().push(place);
    };

    if response.groups.len() > batch.rules.max_groups {
        violations.push(Violation::TooManyGroups { count: response.groups.len(), max: batch.rules.max_groups });
    }
    let hint = batch.rules.min_confidence_hint;
    for (g, group) in response.groups.iter().enumerate() {
        let mut seen = BTreeSet::new();
        for &id in &group.ids {
            if !seen.insert(id) {
                violations.push(Violation::RepeatedInGroup { group: g, id });
                continue;
            }
            check_id(id, format!("group {g}"), &mut violations);
        }
        if seen.len() < 2 {
            violations.push(Violation::GroupTooSmall { group: g, size: seen.len() });
        }
        if !(0.0..=1.0).contains(&group.confidence) {
            violations.push(Violation::ConfidenceOutOfRange { group: g, confidence: group.confidence });
        } else if group.confidence < hint {
            violations.push(Violation::BelowConfidenceHint { group: g, confidence: group.confidence, hint });
        }
        let reason_chars = group.reason.chars().count();
        if reason_chars > limits.max_reason_chars {
            violations.push(Violation::ReasonTooLong { group: g, chars: reason_chars, max: limits.max_reason_chars });
        }
        // A canonical text over the sentence limit is not a broken reply: the merge keeps
        // a member's text instead (`group_merge::choose_text`), so the batch's other groups
        // are not lost to a wordy rewrite.
        if group.canonical_text.trim().is_empty() {
            violations.push(Violation::EmptyCanonicalText { group: g });
        }
        if incremental && !seen.iter().any(|id| status.get(id) == Some(&MemoryStatus::Unverified)) {
            violations.push(Violation::NoUnverifiedId { group: g });
        }
    }
    for &id in &response.no_match_ids {
        check_id(id, "no_match_ids".to_owned(), &mut violations);
        if incremental && status.get(&id) == Some(&MemoryStatus::Verified) {
            violations.push(Violation::VerifiedInNoMatch { id });
        }
    }
    for (&id, at) in &places {
        if at.len() > 1 {
            violations.push(Violation::PlacedTwice { id, places: at.clone() });
        }
    }
    for id in batch.ids_to_decide() {
        if !places.contains_key(&id) {
            violations.push(Violation::Missing { id });
        }
    }
    if !violations.is_empty() {
        return Err(ContractError { violations });
    }

    let mut groups = response.groups;
    for group in &mut groups {
        group.ids.sort_unstable();
        group.canonical_text = group.canonical_text.trim().to_owned();
    }
    groups.sort_by_key(|g| g.ids.first().copied());
    let mut no_match_ids = response.no_match_ids;
    no_match_ids.sort_unstable();
    let mut notes_trimmed = response.notes.len() > limits.max_notes;
    let notes = response
        .notes
        .into_iter()
        .take(limits.max_notes)
        .map(|note| {
            if note.chars().count() > limits.max_note_chars {
                notes_trimmed = true;
                note.chars().take(limits.max_note_chars).collect()
            } else {
                note
            }
        })
        .collect();
    let uncertain = response
        .uncertain
        .into_iter()
        .filter(|p| status.contains_key(&p.low) && status.contains_key(&p.high))
        .collect();
    Ok(ValidatedResponse { groups, no_match_ids, notes, notes_trimmed, uncertain })
}

#[cfg(test)]
mod tests;
