//! The merge ledger's values: what an assisted-dedup merge is asked to do ([`MergePlan`]),
//! what the ledger keeps of it ([`MergeRecord`]), what undoing it did ([`UndoReport`]),
//! and the dedup queue's counts ([`DedupCounts`]).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{Memory, MemoryId, Scope, StoredVector};

/// Longest run id a merge accepts, in characters.
pub const MAX_RUN_ID_CHARS: usize = 128;

/// Most memories (survivor and absorbed together) one merge takes. Undo with
/// `block_remerge` records every pair of the group, so the group is kept small.
pub const MAX_MERGE_MEMBERS: usize = 256;

/// Longest dedup error [`Store::record_dedup_failure`](crate::Store::record_dedup_failure)
/// keeps, in characters; longer ones are cut on a character boundary.
pub const MAX_DEDUP_ERROR_CHARS: usize = 1000;

/// A merge's id in the ledger: unique within one database, assigned by the store, never
/// reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MergeId(i64);

impl MergeId {
    /// Wraps a raw id.
    pub const fn new(id: i64) -> MergeId {
        MergeId(id)
    }

    /// The raw id.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for MergeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for MergeId {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<MergeId, Self::Err> {
        s.parse().map(MergeId)
    }
}

/// Where a merged survivor's text came from; serialised in snake_case (`"canonical"`,
/// `{"existing": {"from": 12}}`, `"unchanged"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextSource {
    /// The judge's canonical text.
    Canonical,
    /// The text of one member of the group, as it was.
    Existing {
        /// The member whose text was taken (the survivor or one of the absorbed).
        from: MemoryId,
    },
    /// The survivor keeps its text.
    Unchanged,
}

impl TextSource {
    /// The stored spelling: `canonical`, `existing` or `unchanged`.
    pub fn as_str(self) -> &'static str {
        match self {
            TextSource::Canonical => "canonical",
            TextSource::Existing { .. } => "existing",
            TextSource::Unchanged => "unchanged",
        }
    }
}

/// One confirmed duplicate group to merge, for [`Store::apply_merge`](crate::Store::apply_merge).
///
/// The store checks it against the database under the scope's write lock before writing
/// anything: every member must still be exactly as `expected` says (dedup bookkeeping
/// aside), so a plan made from stale reads is refused rather than applied.
#[derive(Debug, Clone, PartialEq)]
pub struct MergePlan {
    /// The dedup run this merge belongs to: 1 to [`MAX_RUN_ID_CHARS`] characters, no NUL.
    pub run_id: String,
    /// The scope every member is in.
    pub scope: Scope,
    /// The memory that stays live and takes the merged text, metadata and counters.
    pub survivor: MemoryId,
    /// The memories retired into the survivor: at least one, distinct, not the survivor;
    /// the group has at most [`MAX_MERGE_MEMBERS`] members.
    pub absorbed: Vec<MemoryId>,
    /// Every member (survivor and absorbed, each once, in any order) exactly as the caller
    /// read it. At apply time each row is read again under the scope lock and compared
    /// with this on every field of [`Memory`] except `dedup_verified`, `dedup_attempts` and
    /// `dedup_last_error`; any difference, or a row now deprecated, missing or in another
    /// scope, fails with [`Error::MergeConflict`](crate::Error::MergeConflict) naming the
    /// field, and nothing is written.
    pub expected: Vec<Memory>,
    /// The survivor's new text when it changes (validated like
    /// [`NewMemory::content`](crate::NewMemory::content)); `None` keeps its text.
    pub content: Option<String>,
    /// The survivor's new vector, replacing its vector row. Required when `content`
    /// changes the text of a survivor that has a vector, and then of the same model; it
    /// must have the dimensions of the scope's other vectors of its model.
    pub vector: Option<StoredVector>,
    /// The survivor's merged metadata (validated like
    /// [`NewMemory::metadata`](crate::NewMemory::metadata)); replaces its metadata.
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// The survivor's merged helpful count (the caller sums the group's).
    pub helpful: u64,
    /// The survivor's merged harmful count.
    pub harmful: u64,
    /// The survivor's merged occurrence count.
    pub occurrence_count: u64,
    /// The text the judge proposed, logged even when not used.
    pub canonical_text: Option<String>,
    /// Where the survivor's text comes from; `Existing { from }` names a member.
    pub text_source: TextSource,
    /// The judge's confidence, in `[0, 1]`.
    pub confidence: f64,
    /// The judge's reason for the merge.
    pub reason: String,
    /// Which judge decided (for example `llm` or `threshold`).
    pub judge: String,
    /// The model behind the judge, if any (empty when none).
    pub model: String,
}

impl MergePlan {
    /// The survivor, then the absorbed memories in plan order.
    pub fn members(&self) -> impl Iterator<Item = MemoryId> + '_ {
        std::iter::once(self.survivor).chain(self.absorbed.iter().copied())
    }
}

/// A merge as the ledger keeps it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MergeRecord {
    /// Its id; merges are numbered in the order they were applied.
    pub id: MergeId,
    /// The dedup run it belongs to.
    pub run_id: String,
    /// The scope of its members.
    pub scope: Scope,
    /// The memory that stayed live.
    pub survivor: MemoryId,
    /// The memories retired into the survivor, in plan order.
    pub absorbed: Vec<MemoryId>,
    /// The text the judge proposed, if any.
    pub canonical_text: Option<String>,
    /// The survivor's text right after the merge.
    pub final_text: String,
    /// Where that text came from.
    pub text_source: TextSource,
    /// The judge's confidence.
    pub confidence: f64,
    /// The judge's reason.
    pub reason: String,
    /// Which judge decided.
    pub judge: String,
    /// The model behind the judge (empty when none).
    pub model: String,
    /// When it was applied.
    pub created_at: DateTime<Utc>,
    /// When it was undone, if it was.
    pub undone_at: Option<DateTime<Utc>>,
}

impl MergeRecord {
    /// The survivor, then the absorbed memories.
    pub fn members(&self) -> impl Iterator<Item = MemoryId> + '_ {
        std::iter::once(self.survivor).chain(self.absorbed.iter().copied())
    }
}

/// What [`Store::undo_merge`](crate::Store::undo_merge) did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UndoReport {
    /// The merge undone.
    pub merge: MergeId,
    /// Its survivor, back to its state before the merge.
    pub survivor: MemoryId,
    /// The absorbed memories, back to their state before the merge (live again unless
    /// they were deprecated before it), in plan order.
    pub restored: Vec<MemoryId>,
    /// The pairs of the group now kept from merging again, lower id first, sorted; empty
    /// unless `block_remerge` was asked for.
    pub blocked_pairs: Vec<(MemoryId, MemoryId)>,
}

/// Which merges [`Store::merges`](crate::Store::merges) returns; always in id order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MergeFilter {
    /// Only this domain, if set.
    pub domain: Option<String>,
    /// Only this namespace, if set.
    pub namespace: Option<String>,
    /// Only this run, if set.
    pub run_id: Option<String>,
    /// Also return merges that were undone.
    pub include_undone: bool,
}

/// The dedup queue of one scope, among its live memories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct DedupCounts {
    /// Live memories; always `verified + unverified`.
    pub live: u64,
    /// Live memories an assisted dedup pass verified.
    pub verified: u64,
    /// Live memories waiting for one (whatever their attempts).
    pub unverified: u64,
}

impl MergePlan {
    /// A plan that absorbs `absorbed` into `survivor` as they are now, keeping the
    /// survivor's text and vector: counters summed, metadata merged as assisted dedup
    /// merges it (`dedup_core::merge_metadata`). What a person's or an agent's `merge`
    /// decision of a review entry applies.
    pub fn keeping_survivor(
        run_id: impl Into<String>,
        survivor: &Memory,
        absorbed: &[Memory],
        confidence: f64,
        reason: impl Into<String>,
        judge: impl Into<String>,
    ) -> MergePlan {
        let metadata =
            dedup_core::merge_metadata(&survivor.metadata, &absorbed.iter().map(|m| &m.metadata).collect::<Vec<_>>());
        let all = || std::iter::once(survivor).chain(absorbed);
        MergePlan {
            run_id: run_id.into(),
            scope: survivor.scope.clone(),
            survivor: survivor.id,
            absorbed: absorbed.iter().map(|m| m.id).collect(),
            expected: all().cloned().collect(),
            content: None,
            vector: None,
            metadata,
            helpful: all().map(|m| m.helpful).fold(0, u64::saturating_add),
            harmful: all().map(|m| m.harmful).fold(0, u64::saturating_add),
            occurrence_count: all().map(|m| m.occurrence_count).fold(0, u64::saturating_add),
            canonical_text: None,
            text_source: TextSource::Unchanged,
            confidence,
            reason: reason.into(),
            judge: judge.into(),
            model: String::new(),
        }
    }
}
