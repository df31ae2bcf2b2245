//! The review queue's values: a pair a judge was unsure of ([`NewReview`]), an entry of the
//! queue ([`Review`]) and what a person or an agent decides about it ([`ReviewDecision`]).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{MemoryId, MergeId, Scope};

/// Most reasons one entry keeps, and most characters of each.
pub const MAX_REVIEW_REASONS: usize = 16;
/// Longest reason an entry keeps, in characters; longer ones are cut.
pub const MAX_REVIEW_REASON_CHARS: usize = 500;

/// A review entry's id: unique within one database, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ReviewId(i64);

impl ReviewId {
    /// Wraps a raw id.
    pub const fn new(id: i64) -> ReviewId {
        ReviewId(id)
    }

    /// The raw id.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for ReviewId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for ReviewId {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<ReviewId, Self::Err> {
        s.parse().map(ReviewId)
    }
}

/// A pair of live memories of one scope that a judge was unsure of.
#[derive(Debug, Clone, PartialEq)]
pub struct NewReview {
    /// The scope both memories are in.
    pub scope: Scope,
    /// One memory of the pair.
    pub a: MemoryId,
    /// The other.
    pub b: MemoryId,
    /// Their cosine.
    pub cosine: f32,
    /// The judge's P(duplicate), when it gives one.
    pub probability: Option<f32>,
    /// Which judge was unsure (`learned`, `local`, …).
    pub judge: String,
    /// Why, in words (never more than [`MAX_REVIEW_REASONS`] are kept).
    pub reasons: Vec<String>,
    /// What queued it: `add`, `capture`, `hook`, `dedup`, …
    pub source: String,
}

/// Where an entry of the queue stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewStatus {
    /// Waiting for a decision.
    Pending,
    /// Waiting, but one of its memories changed, was merged or deleted since it was
    /// queued: it cannot be decided (a judge queues the pair again if still unsure).
    Expired,
    /// Decided: merged (the merge is in the ledger and can be undone).
    Merged,
    /// Decided: the two memories say different things; the pair is never queued again.
    Apart,
    /// Passed over; queued again the next time a judge is unsure of the pair.
    Skipped,
}

impl ReviewStatus {
    /// The status's name, as stored and serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewStatus::Pending => "pending",
            ReviewStatus::Expired => "expired",
            ReviewStatus::Merged => "merged",
            ReviewStatus::Apart => "apart",
            ReviewStatus::Skipped => "skipped",
        }
    }
}

impl fmt::Display for ReviewStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An entry of the review queue.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Review {
    /// Its id.
    pub id: ReviewId,
    /// The scope of both memories.
    pub scope: Scope,
    /// The memory of lower id.
    pub low: MemoryId,
    /// The memory of higher id.
    pub high: MemoryId,
    /// Their cosine when queued.
    pub cosine: f32,
    /// The judge's P(duplicate), when it gave one.
    pub probability: Option<f32>,
    /// The judge that was unsure.
    pub judge: String,
    /// Why.
    pub reasons: Vec<String>,
    /// What queued it.
    pub source: String,
    /// Where it stands.
    pub status: ReviewStatus,
    /// The merge a `merged` decision made.
    pub merge_id: Option<MergeId>,
    /// When it was (last) queued.
    pub created_at: DateTime<Utc>,
    /// When it was decided.
    pub decided_at: Option<DateTime<Utc>>,
}

/// A decision that changes no memory (a merge is [`Store::merge_review`](crate::Store::merge_review)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewDecision {
    /// The two memories say different things: never queue the pair again, and never
    /// propose it to an assisted dedup pass.
    Apart,
    /// Pass: queue the pair again the next time a judge is unsure of it.
    Skip,
}

/// Which entries [`Store::reviews`](crate::Store::reviews) lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReviewFilter {
    /// Only this domain.
    pub domain: Option<String>,
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Decided and expired entries too (by default only pending ones).
    pub all: bool,
    /// At most this many, lowest id first (0: no limit).
    pub limit: usize,
}
