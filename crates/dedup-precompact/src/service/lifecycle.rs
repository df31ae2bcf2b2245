//! A memory's lifecycle through the service: edit (refused when the new text duplicates
//! another memory), forget, undo either, and the memory's history (its edits, deletions
//! and merges). Every surface (CLI, MCP, HTTP, the review page) goes through these.

use dedup_core::{ContentHash, PairVerdict};
use dedup_store::{Change, ChangeId, Memory, MemoryId, MergeFilter, MergeRecord, Neighbour, Scope, StoredVector};
use serde::Serialize;

use super::{DeduplicationService, validate_content};
use crate::Result;

/// Most merges of a scope read to find a memory's own.
const MAX_MERGES_READ: usize = 10_000;

/// What an edit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EditStatus {
    /// The text was replaced and the change recorded.
    Edited,
    /// The memory already had this text: nothing changed.
    Unchanged,
    /// Refused: the new text duplicates another memory of the scope (named in
    /// [`EditOutcome::duplicate`]); nothing changed.
    Duplicate,
}

/// The memory an edit's new text duplicates.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EditDuplicate {
    /// Its id.
    pub id: MemoryId,
    /// Its URN.
    pub urn: String,
    /// The cosine of the two texts (1.0 for the same text).
    pub similarity: f32,
    /// The pair judge's P(duplicate), when it gives one.
    pub probability: Option<f32>,
    /// Why, in words.
    pub reasons: Vec<String>,
}

/// The result of [`DeduplicationService::edit`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EditOutcome {
    /// What happened.
    pub status: EditStatus,
    /// The memory as it now is (unchanged unless `status` is `edited`).
    pub memory: Memory,
    /// The change recorded in its history, for an edit.
    pub change: Option<ChangeId>,
    /// The memory the new text duplicates, when refused.
    pub duplicate: Option<EditDuplicate>,
    /// Kinds of credentials redacted from the new text.
    pub redacted: Vec<String>,
    /// Notes about how the edit was checked (no embedder, a judge fallback...).
    pub notes: Vec<String>,
}

/// One event of a memory's history, oldest first in [`MemoryHistory::events`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum HistoryEvent {
    /// An edit, a deletion (`forgotten`) or a restore.
    Change(Change),
    /// A merge this memory took part in, as survivor or absorbed.
    Merge(MergeRecord),
}

impl HistoryEvent {
    /// When it happened.
    pub fn at(&self) -> chrono::DateTime<chrono::Utc> {
        match self {
            HistoryEvent::Change(change) => change.at,
            HistoryEvent::Merge(merge) => merge.created_at,
        }
    }
}

/// A memory and everything recorded about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryHistory {
    /// The memory as it now is (live or not).
    pub memory: Memory,
    /// Its edits, deletions, restores and merges, oldest first.
    pub events: Vec<HistoryEvent>,
}

impl DeduplicationService {
    /// Replaces live memory `id`'s text with `content`, unless the new text duplicates
    /// another live memory of its scope: the exact text, or a memory the configured pair
    /// judge calls a duplicate (the memory itself is left out). The edit and its history
    /// entry are written in one transaction; the vector of the new text is the one the
    /// check computed. `source` says who edits (`cli`, `mcp`, `http`...).
    ///
    /// Fails with [`dedup_store::Error::NotFound`] for an unknown id,
    /// [`dedup_store::Error::NotLive`] for a forgotten or merged memory, and for invalid
    /// text as [`DeduplicationService::add`] does. Credentials are screened as on `add`.
    pub async fn edit(&self, id: MemoryId, content: &str, source: &str) -> Result<EditOutcome> {
        let memory = self.store().get(id).await?.ok_or(dedup_store::Error::NotFound(id))?;
        if memory.deprecated {
            let reason = match memory.merged_into {
                Some(into) => format!("it was merged into memory {into}"),
                None => "it was forgotten or retired".to_owned(),
            };
            return Err(dedup_store::Error::NotLive { id, reason }.into());
        }
        let (content, redacted) = self.screen(content)?;
        validate_content(&content)?;
        let outcome = |status, memory, change, duplicate, notes| EditOutcome {
            status,
            memory,
            change,
            duplicate,
            redacted: redacted.clone(),
            notes,
        };
        if content == memory.content {
            return Ok(outcome(EditStatus::Unchanged, memory, None, None, Vec::new()));
        }
        let scope = memory.scope.clone();
        if let Some(other) = self.store().find_exact(&scope, &ContentHash::of(&content)).await?
            && other != id
        {
            let duplicate = EditDuplicate {
                id: other,
                urn: scope.urn(other),
                similarity: 1.0,
                probability: None,
                reasons: vec![super::EXACT_REASON.to_owned()],
            };
            return Ok(outcome(EditStatus::Duplicate, memory, None, Some(duplicate), Vec::new()));
        }
        let (vector, duplicate, notes) = self.edit_check(id, &content, &scope).await?;
        if let Some(duplicate) = duplicate {
            return Ok(outcome(EditStatus::Duplicate, memory, None, Some(duplicate), notes));
        }
        let (memory, change) = self.store().edit(id, content, vector, source).await?;
        let status = if change.is_some() { EditStatus::Edited } else { EditStatus::Unchanged };
        Ok(outcome(status, memory, change, None, notes))
    }

    /// The semantic part of an edit's check: the new text's vector (when there is an
    /// embedder), the memory it duplicates, and notes.
    async fn edit_check(
        &self,
        id: MemoryId,
        content: &str,
        scope: &Scope,
    ) -> Result<(Option<StoredVector>, Option<EditDuplicate>, Vec<String>)> {
        let mut notes = Vec::new();
        let Some(embedder) = self.embedder() else {
            notes.push(super::NO_EMBEDDER_NOTE.to_owned());
            return Ok((None, None, notes));
        };
        let embedding = embedder.embed_one(content).await?;
        let vector = StoredVector { model: embedder.model_id().to_owned(), embedding };
        let long_enough = content.trim().chars().count() >= self.config.min_semantic_length
            && content.split_whitespace().count() >= self.config.min_semantic_words;
        if !self.config.enabled || !long_enough {
            return Ok((Some(vector), None, notes));
        }
        let k = self.config.pair_judge.candidates() + 1;
        let neighbours: Vec<Neighbour> = self
            .store()
            .search(scope, &vector.model, &vector.embedding, k)
            .await?
            .into_iter()
            .filter(|n| n.id != id)
            .collect();
        let threshold = self.config.threshold_for(scope.namespace_name());
        let decision = match self.judge_neighbours(content, &neighbours, threshold).await {
            Ok(decision) => decision,
            Err(error) => {
                // Fail open, as a check does: the edit goes ahead and says so.
                notes.push(format!("the duplicate check did not run: {error}"));
                return Ok((Some(vector), None, notes));
            }
        };
        if let Some(fallback) = decision.fallback {
            notes.push(fallback);
        }
        let duplicate = decision.duplicate.map(|(other, judgement)| EditDuplicate {
            id: other,
            urn: scope.urn(other),
            similarity: judgement.cosine,
            probability: judgement.probability,
            reasons: judgement.reasons,
        });
        if duplicate.is_none()
            && let Some((other, judgement)) = decision.nearest
            && judgement.verdict == PairVerdict::Uncertain
        {
            notes.push(format!(
                "the new text may duplicate memory {other} ({}): the judge is unsure; both are kept",
                scope.urn(other)
            ));
        }
        Ok((Some(vector), duplicate, notes))
    }

    /// Forgets live memory `id`: it is no longer live, searched or listed, and the
    /// change is recorded so that [`DeduplicationService::undo_change`] brings it back.
    pub async fn forget(&self, id: MemoryId, source: &str) -> Result<ChangeId> {
        Ok(self.store().forget_memory(id, source).await?)
    }

    /// Undoes an edit or a deletion of the history (see [`dedup_store::Store::undo_change`]);
    /// an edit's old text is embedded again first.
    pub async fn undo_change(&self, id: ChangeId, source: &str) -> Result<(Memory, ChangeId)> {
        let change = self.store().change(id).await?.ok_or(dedup_store::Error::ChangeNotFound(id))?;
        let vector = match (&change.action, &change.before, self.embedder()) {
            (dedup_store::ChangeAction::Edited, Some(before), Some(embedder)) => {
                let embedding = embedder.embed_one(before).await?;
                Some(StoredVector { model: embedder.model_id().to_owned(), embedding })
            }
            _ => None,
        };
        Ok(self.store().undo_change(id, vector, source).await?)
    }

    /// Memory `id` with its edits, deletions, restores and merges, oldest first.
    /// Fails with [`dedup_store::Error::NotFound`] for an unknown id.
    pub async fn history(&self, id: MemoryId) -> Result<MemoryHistory> {
        let memory = self.store().get(id).await?.ok_or(dedup_store::Error::NotFound(id))?;
        let mut events: Vec<HistoryEvent> =
            self.store().changes(id).await?.into_iter().map(HistoryEvent::Change).collect();
        let filter = MergeFilter {
            domain: Some(memory.scope.domain().to_owned()),
            namespace: Some(memory.scope.namespace_name().to_owned()),
            include_undone: true,
            ..MergeFilter::default()
        };
        let merges = self.store().merges(&filter).await?;
        events.extend(
            merges
                .into_iter()
                .take(MAX_MERGES_READ)
                .filter(|merge| merge.members().any(|member| member == id))
                .map(HistoryEvent::Merge),
        );
        events.sort_by_key(HistoryEvent::at);
        Ok(MemoryHistory { memory, events })
    }
}
