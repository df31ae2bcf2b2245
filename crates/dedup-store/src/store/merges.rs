//! The merge ledger on the `Store` handle (seed 003 §4 and §9), and its queries both
//! backends share (stamped out per backend by `merge_queries!`, like `shared.rs`).
//!
//! A merge runs in one write transaction under its scope's lock: it reads every member
//! again and refuses a stale plan, snapshots the members (rows, vector rows, edges) into
//! `merge_log`, writes the merge, records the state it left and bumps the scope's
//! watermark, so every handle's index drops the absorbed memories and reads the
//! survivor's new vector on its next search. An undo compares the members with the state
//! the merge left and, when nothing changed since, writes the snapshot back the same way.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use dedup_core::ContentHash;

use super::{Backend, Store, metadata_json, now, validate_model, validate_text};
use crate::scope::validate_name;
use crate::{
    Error, MAX_CONTENT_BYTES, MAX_MERGE_MEMBERS, MAX_RUN_ID_CHARS, MemoryId, MergeFilter, MergeId, MergePlan,
    MergeRecord, Result, Scope, TextSource, UndoReport,
};

#[macro_use]
mod queries;
mod snapshot;

use snapshot::changed_field;
pub(super) use snapshot::{EdgeState, LedgerState, MemberState, VectorState, pairs_of};

/// Longest judge or judge-model name a merge accepts, in bytes.
const MAX_JUDGE_BYTES: usize = 256;

impl Store {
    /// Merges one duplicate group in one transaction under its scope's lock, recording it
    /// in the ledger so that [`Store::undo_merge`] can restore the group exactly.
    ///
    /// The plan is validated first ([`Error::InvalidMerge`](crate::Error::InvalidMerge),
    /// [`Error::InvalidContent`](crate::Error::InvalidContent),
    /// [`Error::InvalidName`](crate::Error::InvalidName)); then every member is read again
    /// under the lock and compared with [`MergePlan::expected`], failing with
    /// [`Error::MergeConflict`](crate::Error::MergeConflict) on any difference. A group
    /// holding a pair an undo marked never to merge fails with
    /// [`Error::MergeBlocked`](crate::Error::MergeBlocked); a new text equal to another live
    /// memory's of the scope with [`Error::Conflict`](crate::Error::Conflict); a vector of
    /// the wrong dimensions with [`Error::InvalidVector`](crate::Error::InvalidVector).
    /// Nothing is written on any failure.
    ///
    /// The survivor takes the new text (when given), vector, metadata and counters and is
    /// queued for dedup again (seed 003 §9: unverified, no last error, attempts kept); the
    /// absorbed memories are deprecated into it and marked verified with no last error (their vectors stay);
    /// their edges move to the survivor (self-loops and repeats dropped).
    pub async fn apply_merge(&self, plan: &MergePlan) -> Result<MergeRecord> {
        let prepared = PreparedMerge::new(plan)?;
        let result = dispatch!(self, b => b.apply_merge(&prepared).await);
        let record = self.classify(result)?;
        tracing::debug!(
            merge = %record.id,
            run_id = %record.run_id,
            scope = %record.scope,
            survivor = %record.survivor,
            absorbed = record.absorbed.len(),
            "merged"
        );
        Ok(record)
    }

    /// The merges of the ledger `filter` selects, in id order. Merges logged before the
    /// ledger existed (without a snapshot) are not listed.
    pub async fn merges(&self, filter: &MergeFilter) -> Result<Vec<MergeRecord>> {
        if let Some(domain) = &filter.domain {
            validate_name("domain", domain)?;
        }
        if let Some(namespace) = &filter.namespace {
            validate_name("namespace", namespace)?;
        }
        if let Some(run_id) = &filter.run_id {
            validate_run_id(run_id)?;
        }
        let result = dispatch!(self, b => b.merges(filter).await);
        self.classify(result)
    }

    /// The merge with this id, if the ledger has it.
    pub async fn merge(&self, id: MergeId) -> Result<Option<MergeRecord>> {
        let result = dispatch!(self, b => b.merge(id).await);
        self.classify(result)
    }

    /// Undoes a merge in one transaction under its scope's lock: every member gets back
    /// its row exactly as before the merge (every column, `updated_at` and the dedup
    /// bookkeeping included), its vector row and its edges. With `block_remerge`, every
    /// pair of the group is recorded as never to merge ([`Store::never_merge_pairs`]).
    ///
    /// Fails with [`Error::MergeNotFound`](crate::Error::MergeNotFound) for an unknown id,
    /// and with [`Error::UndoRefused`](crate::Error::UndoRefused), writing nothing, when
    /// the merge was undone already, a member was deleted, a member's row (dedup
    /// bookkeeping aside), vector or edges changed since the merge, a later merge changed
    /// a member (undo that one first), or a text to be made live again is now held by
    /// another live memory of the scope.
    pub async fn undo_merge(&self, id: MergeId, block_remerge: bool) -> Result<UndoReport> {
        let result = dispatch!(self, b => b.undo_merge(id, block_remerge).await);
        let report = self.classify(result)?;
        tracing::debug!(merge = %id, survivor = %report.survivor, restored = report.restored.len(), "merge undone");
        Ok(report)
    }

    /// Undoes every merge of a run not undone yet, newest first, in one transaction: when
    /// any of them is refused (as by [`Store::undo_merge`]), nothing changes. The reports
    /// are in the order undone; none when the run has nothing left to undo.
    pub async fn undo_run(&self, run_id: &str, block_remerge: bool) -> Result<Vec<UndoReport>> {
        validate_run_id(run_id)?;
        let result = dispatch!(self, b => b.undo_run(run_id, block_remerge).await);
        let reports = self.classify(result)?;
        tracing::debug!(run_id, undone = reports.len(), "run undone");
        Ok(reports)
    }

    /// The pairs of `scope` an undo marked never to merge, and those a review decided
    /// apart ([`Store::decide_review`]), lower id first.
    pub async fn never_merge_pairs(&self, scope: &Scope) -> Result<HashSet<(MemoryId, MemoryId)>> {
        let result = dispatch!(self, b => b.never_merge_pairs(scope).await);
        self.classify(result)
    }

    /// Forgets every never-to-merge pair of `scope`; returns how many there were.
    pub async fn clear_never_merge(&self, scope: &Scope) -> Result<u64> {
        let result = dispatch!(self, b => b.clear_never_merge(scope).await);
        self.classify(result)
    }
}

/// Checks a run id: 1 to [`MAX_RUN_ID_CHARS`] characters, no NUL.
fn validate_run_id(run_id: &str) -> Result<()> {
    let reason = if run_id.is_empty() {
        Some("must not be empty".to_owned())
    } else if run_id.chars().count() > MAX_RUN_ID_CHARS {
        Some(format!("is over the limit of {MAX_RUN_ID_CHARS} characters"))
    } else if run_id.contains('\0') {
        Some("must not contain NUL characters".to_owned())
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidContent { what: "run_id", reason }),
        None => Ok(()),
    }
}

/// A validated [`MergePlan`] with what the merge needs computed once.
pub(crate) struct PreparedMerge<'a> {
    pub(super) plan: &'a MergePlan,
    /// The new text's hash, when the text changes.
    pub(super) hash: Option<ContentHash>,
    pub(super) metadata_json: String,
    pub(super) absorbed_json: String,
    /// helpful, harmful, occurrence_count as stored.
    pub(super) counters: [i64; 3],
    pub(super) now: DateTime<Utc>,
}

impl<'a> PreparedMerge<'a> {
    fn new(plan: &'a MergePlan) -> Result<PreparedMerge<'a>> {
        validate_run_id(&plan.run_id)?;
        let survivor = plan.survivor;
        let invalid = |id: MemoryId, reason: &'static str| Error::InvalidMerge { id, into: survivor, reason };
        if plan.absorbed.is_empty() {
            return Err(invalid(survivor, "the plan absorbs no memory"));
        }
        if plan.absorbed.len() >= MAX_MERGE_MEMBERS {
            return Err(invalid(survivor, "the group has more members than MAX_MERGE_MEMBERS (256)"));
        }
        let mut members = HashSet::from([survivor]);
        for &id in &plan.absorbed {
            if id == survivor {
                return Err(invalid(id, "a memory cannot be merged into itself"));
            }
            if !members.insert(id) {
                return Err(invalid(id, "it is listed twice among the absorbed"));
            }
        }
        let mut expected = HashSet::with_capacity(plan.expected.len());
        for memory in &plan.expected {
            if !members.contains(&memory.id) {
                return Err(invalid(memory.id, "the plan gives its expected state but it is not in the group"));
            }
            if !expected.insert(memory.id) {
                return Err(invalid(memory.id, "the plan gives its expected state twice"));
            }
            if memory.scope != plan.scope {
                return Err(invalid(memory.id, "it is not in the plan's scope"));
            }
            if memory.deprecated {
                return Err(invalid(memory.id, "it is deprecated"));
            }
        }
        if let Some(id) = plan.members().find(|id| !expected.contains(id)) {
            return Err(invalid(id, "the plan gives no expected state for it"));
        }
        if let TextSource::Existing { from } = plan.text_source
            && !members.contains(&from)
        {
            return Err(invalid(from, "the text source names it but it is not in the group"));
        }
        if let Some(content) = &plan.content {
            validate_text("content", content, MAX_CONTENT_BYTES)?;
        }
        if let Some(canonical) = &plan.canonical_text {
            validate_text("canonical_text", canonical, MAX_CONTENT_BYTES)?;
        }
        validate_text("reason", &plan.reason, MAX_CONTENT_BYTES)?;
        validate_text("judge", &plan.judge, MAX_JUDGE_BYTES)?;
        validate_text("model", &plan.model, MAX_JUDGE_BYTES)?;
        if let Some(vector) = &plan.vector {
            validate_model(&vector.model)?;
        }
        if !(0.0..=1.0).contains(&plan.confidence) {
            return Err(Error::InvalidContent {
                what: "confidence",
                reason: format!("must be a number in [0, 1], got {}", plan.confidence),
            });
        }
        let counter = |name: &str, value: u64| {
            i64::try_from(value).map_err(|_| Error::InvalidContent {
                what: "counters",
                reason: format!("{name} is {value}, over the limit of {}", i64::MAX),
            })
        };
        let counters = [
            counter("helpful", plan.helpful)?,
            counter("harmful", plan.harmful)?,
            counter("occurrence_count", plan.occurrence_count)?,
        ];
        let absorbed_json = serde_json::Value::from(plan.absorbed.iter().map(|id| id.get()).collect::<Vec<_>>());
        Ok(PreparedMerge {
            plan,
            hash: plan.content.as_deref().map(ContentHash::of),
            metadata_json: metadata_json(&plan.metadata)?,
            absorbed_json: absorbed_json.to_string(),
            counters,
            now: now(),
        })
    }

    /// Checks the members as read under the scope lock (in [`MergePlan::members`] order)
    /// against the plan.
    pub(super) fn check_current(&self, current: &[Option<MemberState>]) -> Result<()> {
        let plan = self.plan;
        for (id, state) in plan.members().zip(current) {
            let conflict = |reason: String| Error::MergeConflict { id, reason };
            let Some(state) = state else { return Err(conflict("it no longer exists".to_owned())) };
            let memory = state.memory()?;
            if memory.scope != plan.scope {
                return Err(conflict(format!("it is now in scope {}, not {}", memory.scope, plan.scope)));
            }
            if memory.deprecated {
                return Err(conflict("it was deprecated since the plan was read".to_owned()));
            }
            let expected = plan.expected.iter().find(|m| m.id == id).ok_or(Error::InvalidMerge {
                id,
                into: plan.survivor,
                reason: "the plan gives no expected state for it",
            })?;
            if let Some(field) = changed_field(expected, &memory) {
                return Err(conflict(format!("its {field} changed since the plan was read")));
            }
        }
        let survivor = current.first().and_then(|s| s.as_ref());
        let new_text = plan.content.as_ref().is_some_and(|text| survivor.is_none_or(|s| s.content != *text));
        match (&plan.vector, survivor.and_then(|s| s.vector.as_ref())) {
            (None, Some(_)) if new_text => Err(Error::InvalidMerge {
                id: plan.survivor,
                into: plan.survivor,
                reason: "the survivor has a vector, so a new text needs a new vector",
            }),
            (Some(new), Some(old)) if new.model != old.model => Err(Error::InvalidMerge {
                id: plan.survivor,
                into: plan.survivor,
                reason: "the new vector is of another model than the survivor's",
            }),
            _ => Ok(()),
        }
    }

    /// The ledger record of this merge.
    pub(super) fn record(&self, id: MergeId, final_text: String) -> MergeRecord {
        let plan = self.plan;
        MergeRecord {
            id,
            run_id: plan.run_id.clone(),
            scope: plan.scope.clone(),
            survivor: plan.survivor,
            absorbed: plan.absorbed.clone(),
            canonical_text: plan.canonical_text.clone(),
            final_text,
            text_source: plan.text_source,
            confidence: plan.confidence,
            reason: plan.reason.clone(),
            judge: plan.judge.clone(),
            model: plan.model.clone(),
            created_at: self.now,
            undone_at: None,
        }
    }
}

/// A `merge_log` row of the ledger, in the shape of `merge_columns!`.
#[derive(sqlx::FromRow)]
pub(crate) struct MergeRow {
    id: i64,
    run_id: String,
    domain: Option<String>,
    namespace: Option<String>,
    survivor: i64,
    absorbed_ids: String,
    canonical_text: Option<String>,
    final_text: Option<String>,
    text_source: Option<String>,
    text_from: Option<i64>,
    confidence: Option<f64>,
    reason: Option<String>,
    judge: Option<String>,
    model: Option<String>,
    created_at: DateTime<Utc>,
    undone_at: Option<DateTime<Utc>>,
}

/// A ledger row's absorbed ids.
pub(super) fn absorbed_ids(merge: MergeId, json: &str) -> Result<Vec<MemoryId>> {
    serde_json::from_str::<Vec<i64>>(json)
        .map(|ids| ids.into_iter().map(MemoryId::new).collect())
        .map_err(|e| Error::Corrupt { table: "merge_log", reason: format!("merge {merge}: bad absorbed_ids: {e}") })
}

impl TryFrom<MergeRow> for MergeRecord {
    type Error = Error;

    fn try_from(row: MergeRow) -> Result<MergeRecord> {
        let id = MergeId::new(row.id);
        let corrupt = |reason: String| Error::Corrupt { table: "merge_log", reason: format!("merge {id}: {reason}") };
        let missing = |column: &str| corrupt(format!("{column} is missing"));
        let domain = row.domain.ok_or_else(|| missing("domain"))?;
        let namespace = row.namespace.ok_or_else(|| missing("namespace"))?;
        let text_source = match (row.text_source.as_deref(), row.text_from) {
            (Some("canonical"), _) => TextSource::Canonical,
            (Some("unchanged"), _) => TextSource::Unchanged,
            (Some("existing"), Some(from)) => TextSource::Existing { from: MemoryId::new(from) },
            (other, from) => return Err(corrupt(format!("bad text_source {other:?} (text_from {from:?})"))),
        };
        Ok(MergeRecord {
            id,
            run_id: row.run_id,
            scope: Scope::new(&domain, &namespace).map_err(|e| corrupt(e.to_string()))?,
            survivor: MemoryId::new(row.survivor),
            absorbed: absorbed_ids(id, &row.absorbed_ids)?,
            canonical_text: row.canonical_text,
            final_text: row.final_text.ok_or_else(|| missing("final_text"))?,
            text_source,
            confidence: row.confidence.ok_or_else(|| missing("confidence"))?,
            reason: row.reason.unwrap_or_default(),
            judge: row.judge.ok_or_else(|| missing("judge"))?,
            model: row.model.ok_or_else(|| missing("model"))?,
            created_at: row.created_at,
            undone_at: row.undone_at,
        })
    }
}
