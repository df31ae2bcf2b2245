//! A memory's history on the `Store` handle: edits and deletions made by a person or an
//! agent, each recorded in the same transaction as the change, and undone from the
//! record. Queries both backends share are stamped out per backend by `change_queries!`.
//!
//! Forgetting a memory deprecates it (it stops being live, searched and listed) and keeps
//! the row, so that undoing the change makes it live again; deleting for good is
//! [`Store::delete`]. An edit is undone by editing the text back, which needs the old
//! text's vector: the caller embeds it, as for any edit.

use dedup_core::ContentHash;

use super::{Backend, PreparedUpdate, Store};
use crate::{
    Change, ChangeAction, ChangeId, Error, MAX_CHANGE_SOURCE_BYTES, Memory, MemoryId, MemoryUpdate, Result, Scope,
    StoredVector,
};

/// Most history entries one listing returns.
pub const MAX_CHANGES_LISTED: usize = 1000;

/// Who makes a change recorded in the history, and what it undoes.
#[derive(Debug, Clone)]
pub(crate) struct ChangeNote {
    pub(crate) source: String,
    pub(crate) undoes: Option<ChangeId>,
    /// For an undone edit: the hash the memory's text must still have.
    pub(crate) expect_hash: Option<ContentHash>,
}

impl ChangeNote {
    fn new(source: &str) -> Result<ChangeNote> {
        if source.is_empty() || source.len() > MAX_CHANGE_SOURCE_BYTES || source.chars().any(char::is_control) {
            return Err(Error::InvalidContent {
                what: "source",
                reason: format!("must be 1 to {MAX_CHANGE_SOURCE_BYTES} bytes without control characters"),
            });
        }
        Ok(ChangeNote { source: source.to_owned(), undoes: None, expect_hash: None })
    }
}

/// One history entry to write.
pub(crate) struct ChangeRow<'a> {
    pub(crate) memory: MemoryId,
    pub(crate) scope: &'a Scope,
    pub(crate) action: ChangeAction,
    pub(crate) before: Option<&'a str>,
    pub(crate) after: Option<&'a str>,
}

impl Store {
    /// Replaces a live memory's text with `content` and records the edit in its history,
    /// in one transaction; the memory as stored and the change's id (`None` when the text
    /// was already `content`: nothing is recorded). `vector` is the new text's, as for
    /// [`Store::update`]; `source` says who edits (`cli`, `mcp`, `http`...).
    ///
    /// Fails with [`Error::NotFound`] for an unknown id, [`Error::NotLive`] for a
    /// forgotten or merged memory, [`Error::Conflict`] when the text equals another live
    /// memory's of the scope, and as [`Store::update`] does; nothing changes then.
    pub async fn edit(
        &self,
        id: MemoryId,
        content: String,
        vector: Option<StoredVector>,
        source: &str,
    ) -> Result<(Memory, Option<ChangeId>)> {
        let note = ChangeNote::new(source)?;
        let update = MemoryUpdate { content: Some(content), ..MemoryUpdate::default() };
        let mut prepared = PreparedUpdate::new(update, vector)?;
        prepared.note = Some(note);
        let result = dispatch!(self, b => b.update(id, &prepared).await);
        let edited = self.classify(result)?;
        tracing::debug!(%id, change = ?edited.1.map(ChangeId::get), "edited");
        Ok(edited)
    }

    /// Forgets a live memory: it stops being live (no longer searched, listed or blocking
    /// an equal text) but its row is kept, and the change is recorded in its history, in
    /// one transaction, so that [`Store::undo_change`] brings it back. Its pending review
    /// entries expire.
    ///
    /// Fails with [`Error::NotFound`] for an unknown id and [`Error::NotLive`] for a
    /// memory forgotten or merged already; nothing changes then.
    pub async fn forget_memory(&self, id: MemoryId, source: &str) -> Result<ChangeId> {
        let note = ChangeNote::new(source)?;
        let result = dispatch!(self, b => b.forget_memory(id, &note, super::now()).await);
        let (scope, version, change) = self.classify(result)?;
        self.forget(&scope, id, version).await;
        tracing::debug!(%id, %scope, %change, "forgotten");
        Ok(change)
    }

    /// Undoes a change of the history: a forgotten memory is made live again, an edit is
    /// reverted to the text before it (`vector` is that text's; without one the memory
    /// waits for a vector like any stored without). The undo is recorded as a change of
    /// its own, returned with the memory as it now is.
    ///
    /// Fails with [`Error::ChangeNotFound`] for an unknown id and
    /// [`Error::ChangeNotUndoable`] when the change was undone already, is itself a
    /// restore, or the memory changed since (edited again, merged, forgotten, deleted);
    /// [`Error::Conflict`] when the text to bring back is now held by another live
    /// memory. Nothing changes then.
    pub async fn undo_change(
        &self,
        id: ChangeId,
        vector: Option<StoredVector>,
        source: &str,
    ) -> Result<(Memory, ChangeId)> {
        let mut note = ChangeNote::new(source)?;
        let change = self.change(id).await?.ok_or(Error::ChangeNotFound(id))?;
        if let Some(by) = change.undone_by {
            return Err(Error::ChangeNotUndoable { id, reason: format!("change {by} undid it already") });
        }
        note.undoes = Some(id);
        match change.action {
            ChangeAction::Edited => {
                let (Some(before), Some(after)) = (change.before, change.after) else {
                    return Err(Error::Corrupt {
                        table: "memory_changes",
                        reason: format!("id {id}: an edit without texts"),
                    });
                };
                note.expect_hash = Some(ContentHash::of(&after));
                let update = MemoryUpdate { content: Some(before), ..MemoryUpdate::default() };
                let mut prepared = PreparedUpdate::new(update, vector)?;
                prepared.note = Some(note);
                let result = dispatch!(self, b => b.update(change.memory, &prepared).await);
                match self.classify(result) {
                    Ok((memory, Some(undo))) => Ok((memory, undo)),
                    Ok((_, None)) => Err(Error::ChangeNotUndoable {
                        id,
                        reason: format!("memory {} already has the text from before it", change.memory),
                    }),
                    Err(Error::NotLive { id: memory, reason }) => {
                        Err(Error::ChangeNotUndoable { id, reason: format!("memory {memory} is not live: {reason}") })
                    }
                    Err(Error::NotFound(memory)) => {
                        Err(Error::ChangeNotUndoable { id, reason: format!("memory {memory} was deleted") })
                    }
                    Err(error) => Err(error),
                }
            }
            ChangeAction::Forgotten => {
                let result = dispatch!(self, b => b.restore_forgotten(&change, &note, super::now()).await);
                let (memory, undo) = self.classify(result)?;
                tracing::debug!(memory = %memory.id, change = %id, "restored");
                Ok((memory, undo))
            }
            ChangeAction::Restored => Err(Error::ChangeNotUndoable {
                id,
                reason: "it is a restore; forget the memory again instead".to_owned(),
            }),
        }
    }

    /// The history of memory `id`: its edits, deletions and restores, oldest first (at
    /// most [`MAX_CHANGES_LISTED`], the latest). Empty for a memory never changed or
    /// unknown; merges are in [`Store::merges`].
    pub async fn changes(&self, id: MemoryId) -> Result<Vec<Change>> {
        let result = dispatch!(self, b => b.changes_of(id).await);
        self.classify(result)
    }

    /// The history entry with this id, if any.
    pub async fn change(&self, id: ChangeId) -> Result<Option<Change>> {
        let result = dispatch!(self, b => b.change(id).await);
        self.classify(result)
    }
}

/// Stamps out the history queries for `$backend` in a child module `change_queries`.
macro_rules! change_queries {
    ($backend:ident) => {
        mod change_queries {
            use chrono::{DateTime, Utc};

            use super::queries::{bump_version, not_live_reason, record_change, scope_of, select_memory};
            use super::*;
            use crate::store::changes::{ChangeNote, ChangeRow, MAX_CHANGES_LISTED};
            use crate::{Change, ChangeAction, ChangeId, Error, Memory, MemoryId, Result, Scope};

            const COLUMNS: &str = "id, memory_id, domain, namespace, action, before_text, after_text, source, \
                 undoes, undone_by, created_at FROM memory_changes";

            #[derive(sqlx::FromRow)]
            struct ChangeRecord {
                id: i64,
                memory_id: i64,
                domain: String,
                namespace: String,
                action: String,
                before_text: Option<String>,
                after_text: Option<String>,
                source: String,
                undoes: Option<i64>,
                undone_by: Option<i64>,
                created_at: DateTime<Utc>,
            }

            impl TryFrom<ChangeRecord> for Change {
                type Error = Error;

                fn try_from(row: ChangeRecord) -> Result<Change> {
                    let id = row.id;
                    let corrupt = |reason: String| Error::Corrupt {
                        table: "memory_changes",
                        reason: format!("id {id}: {reason}"),
                    };
                    Ok(Change {
                        id: ChangeId::new(id),
                        memory: MemoryId::new(row.memory_id),
                        scope: Scope::new(&row.domain, &row.namespace).map_err(|e| corrupt(e.to_string()))?,
                        action: row.action.parse::<ChangeAction>().map_err(corrupt)?,
                        before: row.before_text,
                        after: row.after_text,
                        source: row.source,
                        undoes: row.undoes.map(ChangeId::new),
                        undone_by: row.undone_by.map(ChangeId::new),
                        at: row.created_at,
                    })
                }
            }

            impl $backend {
                /// Deprecates a live memory and records it forgotten; its scope, the
                /// version written and the change's id.
                pub(in crate::store) async fn forget_memory(
                    &self,
                    id: MemoryId,
                    note: &ChangeNote,
                    now: DateTime<Utc>,
                ) -> Result<(Scope, i64, ChangeId)> {
                    let mut write = self.begin_write().await?;
                    let (scope, _) = scope_of(write.conn(), id).await?.ok_or(Error::NotFound(id))?;
                    lock_scope(write.conn(), &scope).await?;
                    let memory = select_memory(write.conn(), id).await?.ok_or(Error::NotFound(id))?;
                    if memory.deprecated {
                        return Err(Error::NotLive { id, reason: not_live_reason(&memory) });
                    }
                    let version = bump_version(write.conn(), &scope).await?;
                    sqlx::query(
                        "UPDATE memories SET deprecated = TRUE, merged_into = NULL, updated_at = $2, change_seq = $3 \
                         WHERE id = $1",
                    )
                    .bind(id.get())
                    .bind(now)
                    .bind(version)
                    .execute(write.conn())
                    .await?;
                    let row = ChangeRow {
                        memory: id,
                        scope: &scope,
                        action: ChangeAction::Forgotten,
                        before: Some(&memory.content),
                        after: None,
                    };
                    let change = record_change(write.conn(), &row, note, now).await?;
                    write.commit().await?;
                    Ok((scope, version, change))
                }

                /// Makes the memory `forgotten` retired live again, if it is still as
                /// that change left it, and records the restore.
                pub(in crate::store) async fn restore_forgotten(
                    &self,
                    forgotten: &Change,
                    note: &ChangeNote,
                    now: DateTime<Utc>,
                ) -> Result<(Memory, ChangeId)> {
                    let change = forgotten.id;
                    let id = forgotten.memory;
                    let not_undoable = |reason: String| Error::ChangeNotUndoable { id: change, reason };
                    let mut write = self.begin_write().await?;
                    let Some((scope, _)) = scope_of(write.conn(), id).await? else {
                        return Err(not_undoable(format!("memory {id} was deleted")));
                    };
                    lock_scope(write.conn(), &scope).await?;
                    let memory = select_memory(write.conn(), id).await?.ok_or(Error::NotFound(id))?;
                    if !memory.deprecated || memory.merged_into.is_some() {
                        return Err(not_undoable(format!("memory {id} changed since: it is live or merged")));
                    }
                    // A later change of this memory (another forget after a restore) wins.
                    let later: Option<i64> = sqlx::query_scalar(
                        "SELECT id FROM memory_changes WHERE memory_id = $1 AND id > $2 ORDER BY id LIMIT 1",
                    )
                    .bind(id.get())
                    .bind(change.get())
                    .fetch_optional(write.conn())
                    .await?;
                    if let Some(later) = later {
                        return Err(not_undoable(format!("change {later} of memory {id} came after it")));
                    }
                    if memory.unique_content {
                        let other: Option<i64> = sqlx::query_scalar(
                            "SELECT id FROM memories WHERE domain = $1 AND namespace = $2 AND content_hash = $3 \
                             AND NOT deprecated",
                        )
                        .bind(scope.domain())
                        .bind(scope.namespace_name())
                        .bind(memory.content_hash.as_str())
                        .fetch_optional(write.conn())
                        .await?;
                        if let Some(other) = other {
                            return Err(Error::Conflict {
                                reason: format!("memory {id}'s text is now held by live memory {other} in {scope}"),
                            });
                        }
                    }
                    let version = bump_version(write.conn(), &scope).await?;
                    sqlx::query(
                        "UPDATE memories SET deprecated = FALSE, updated_at = $2, change_seq = $3 WHERE id = $1",
                    )
                    .bind(id.get())
                    .bind(now)
                    .bind(version)
                    .execute(write.conn())
                    .await?;
                    let row = ChangeRow {
                        memory: id,
                        scope: &scope,
                        action: ChangeAction::Restored,
                        before: None,
                        after: Some(&memory.content),
                    };
                    let undo = record_change(write.conn(), &row, note, now).await?;
                    let memory = select_memory(write.conn(), id).await?.ok_or(Error::NotFound(id))?;
                    write.commit().await?;
                    Ok((memory, undo))
                }

                pub(in crate::store) async fn changes_of(&self, id: MemoryId) -> Result<Vec<Change>> {
                    let limit = i64::try_from(MAX_CHANGES_LISTED).unwrap_or(i64::MAX);
                    let rows: Vec<ChangeRecord> = sqlx::query_as(&format!(
                        "SELECT * FROM (SELECT {COLUMNS} WHERE memory_id = $1 ORDER BY id DESC LIMIT $2) latest \
                         ORDER BY id"
                    ))
                    .bind(id.get())
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                    rows.into_iter().map(Change::try_from).collect()
                }

                pub(in crate::store) async fn change(&self, id: ChangeId) -> Result<Option<Change>> {
                    let row: Option<ChangeRecord> = sqlx::query_as(&format!("SELECT {COLUMNS} WHERE id = $1"))
                        .bind(id.get())
                        .fetch_optional(&self.pool)
                        .await?;
                    row.map(Change::try_from).transpose()
                }
            }
        }
    };
}
