//! What keeps a store whole across processes: its identity (which keys caches shared
//! between stores), recent captures kept in the database (seed 004's recent-capture check
//! for processes started minutes apart), and the backfill of vectors for memories stored
//! while the embedder was down. Queries both backends share are stamped out per backend
//! by `upkeep_queries!`, like `shared.rs`.

use std::time::Duration;

use dedup_core::ContentHash;

use super::{Backend, Store};
use crate::{MemoryId, Result, Scope, StoredVector};

/// A capture found by [`Store::recent_capture`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecentCapture {
    /// The memory that was captured.
    pub memory_id: MemoryId,
    /// How long ago it was recorded (by this host's clock; never negative); always less
    /// than the window asked for.
    pub age: Duration,
}

/// Microseconds since the epoch by this host's clock.
pub(super) fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// A window in microseconds, at least 1.
pub(super) fn window_micros(window: Duration) -> i64 {
    i64::try_from(window.as_micros()).unwrap_or(i64::MAX).max(1)
}

impl Store {
    /// The store's identity: 32 hex digits drawn at random when the database was created,
    /// the same for every handle and process on that database and different for every
    /// other database. Caches shared between stores (a Redis recent-capture cache) key
    /// their entries by it.
    pub fn store_id(&self) -> &str {
        &self.store_id
    }

    /// The capture of `hash` in `scope` recorded less than `window` ago, if any. Like seed
    /// 004's in-process cache, a capture outlives its memory: it names the memory even if
    /// that was deleted since.
    pub async fn recent_capture(
        &self,
        scope: &Scope,
        hash: &ContentHash,
        window: Duration,
    ) -> Result<Option<RecentCapture>> {
        let result = dispatch!(self, b => b.recent_capture(scope, hash).await);
        let Some((id, captured_at)) = self.classify(result)? else { return Ok(None) };
        let age_micros = now_micros().saturating_sub(captured_at).max(0);
        if age_micros >= window_micros(window) {
            return Ok(None);
        }
        let age = Duration::from_micros(u64::try_from(age_micros).unwrap_or(0));
        Ok(Some(RecentCapture { memory_id: id, age }))
    }

    /// Records that `hash` was just captured in `scope` as memory `id` (replacing an older
    /// capture of the same hash there), then, in the same transaction, forgets captures
    /// recorded `window` ago or earlier and, beyond `capacity` (0 is taken as 1), the
    /// oldest ones. `id` is recorded as given (it may name a memory another writer
    /// stored, or one deleted since).
    pub async fn record_recent_capture(
        &self,
        scope: &Scope,
        hash: &ContentHash,
        id: MemoryId,
        window: Duration,
        capacity: usize,
    ) -> Result<()> {
        let capacity = i64::try_from(capacity.max(1)).unwrap_or(i64::MAX);
        let now = now_micros();
        let expired_at = now.saturating_sub(window_micros(window));
        let result = dispatch!(self, b => b.record_recent_capture(scope, hash, id, now, expired_at, capacity).await);
        self.classify(result)
    }

    /// The number of captures recorded less than `window` ago, in every scope.
    pub async fn recent_capture_count(&self, window: Duration) -> Result<u64> {
        let since = now_micros().saturating_sub(window_micros(window));
        let result = dispatch!(self, b => b.recent_capture_count(since).await);
        self.classify(result)
    }

    /// Stores `vector` as the vector of memory `id`, only if the memory is still live,
    /// still has no vector and its content hash is still `hash`: a backfill that raced an
    /// edit or a delete writes nothing and returns false.
    ///
    /// Fails with [`Error::InvalidVector`](crate::Error::InvalidVector) when the scope's
    /// other vectors of the same model have other dimensions.
    pub async fn attach_vector(&self, id: MemoryId, hash: &ContentHash, vector: &StoredVector) -> Result<bool> {
        super::validate_model(&vector.model)?;
        let result = dispatch!(self, b => b.attach_vector(id, hash, vector).await);
        let attached = self.classify(result)?;
        if attached {
            // Indexes of the scope read the new vector on their next refresh.
            tracing::debug!(%id, model = %vector.model, "vector attached");
        }
        Ok(attached)
    }
}

/// Stamps out the upkeep queries for `$backend` in a child module `upkeep_queries`.
macro_rules! upkeep_queries {
    ($backend:ident) => {
        mod upkeep_queries {
            use dedup_core::ContentHash;

            use super::queries::{bump_version, check_model_dims, insert_vector_row, scope_of};
            use super::*;
            use crate::{Error, MemoryId, Result, Scope, StoredVector};

            impl $backend {
                pub(in crate::store) async fn store_id(&self) -> Result<String> {
                    let id: Option<String> =
                        sqlx::query_scalar("SELECT store_id FROM store_identity WHERE singleton = 1")
                            .fetch_optional(&self.pool)
                            .await?;
                    id.ok_or_else(|| Error::Corrupt {
                        table: "store_identity",
                        reason: "the row holding the store's id is missing".to_owned(),
                    })
                }

                pub(in crate::store) async fn recent_capture(
                    &self,
                    scope: &Scope,
                    hash: &ContentHash,
                ) -> Result<Option<(MemoryId, i64)>> {
                    let row: Option<(i64, i64)> = sqlx::query_as(
                        "SELECT memory_id, captured_at_us FROM recent_captures \
                         WHERE domain = $1 AND namespace = $2 AND content_hash = $3",
                    )
                    .bind(scope.domain())
                    .bind(scope.namespace_name())
                    .bind(hash.as_str())
                    .fetch_optional(&self.pool)
                    .await?;
                    Ok(row.map(|(id, at)| (MemoryId::new(id), at)))
                }

                pub(in crate::store) async fn record_recent_capture(
                    &self,
                    scope: &Scope,
                    hash: &ContentHash,
                    id: MemoryId,
                    now: i64,
                    expired_at: i64,
                    capacity: i64,
                ) -> Result<()> {
                    let mut write = self.begin_write().await?;
                    sqlx::query(
                        "INSERT INTO recent_captures (domain, namespace, content_hash, memory_id, captured_at_us) \
                         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (domain, namespace, content_hash) \
                         DO UPDATE SET memory_id = excluded.memory_id, captured_at_us = excluded.captured_at_us",
                    )
                    .bind(scope.domain())
                    .bind(scope.namespace_name())
                    .bind(hash.as_str())
                    .bind(id.get())
                    .bind(now)
                    .execute(write.conn())
                    .await?;
                    sqlx::query("DELETE FROM recent_captures WHERE captured_at_us <= $1")
                        .bind(expired_at)
                        .execute(write.conn())
                        .await?;
                    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM recent_captures")
                        .fetch_one(write.conn())
                        .await?;
                    if count > capacity {
                        sqlx::query(
                            "DELETE FROM recent_captures WHERE (domain, namespace, content_hash) IN \
                             (SELECT domain, namespace, content_hash FROM recent_captures \
                              ORDER BY captured_at_us, domain, namespace, content_hash LIMIT $1)",
                        )
                        .bind(count - capacity)
                        .execute(write.conn())
                        .await?;
                    }
                    write.commit().await
                }

                pub(in crate::store) async fn recent_capture_count(&self, since: i64) -> Result<u64> {
                    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM recent_captures WHERE captured_at_us > $1")
                        .bind(since)
                        .fetch_one(&self.pool)
                        .await?;
                    u64::try_from(count).map_err(|_| Error::Corrupt {
                        table: "recent_captures",
                        reason: format!("negative count {count}"),
                    })
                }

                pub(in crate::store) async fn attach_vector(
                    &self,
                    id: MemoryId,
                    hash: &ContentHash,
                    vector: &StoredVector,
                ) -> Result<bool> {
                    let mut write = self.begin_write().await?;
                    let Some((scope, _)) = scope_of(write.conn(), id).await? else { return Ok(false) };
                    lock_scope(write.conn(), &scope).await?;
                    // Read again under the lock: still live, unchanged and without a vector?
                    let current: Option<String> = sqlx::query_scalar(
                        "SELECT content_hash FROM memories WHERE id = $1 AND NOT deprecated \
                         AND NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.memory_id = memories.id)",
                    )
                    .bind(id.get())
                    .fetch_optional(write.conn())
                    .await?;
                    if current.as_deref() != Some(hash.as_str()) {
                        return Ok(false);
                    }
                    check_model_dims(write.conn(), &scope, vector, Some(id)).await?;
                    let version = bump_version(write.conn(), &scope).await?;
                    sqlx::query("UPDATE memories SET change_seq = $2, vector_pending = FALSE WHERE id = $1")
                        .bind(id.get())
                        .bind(version)
                        .execute(write.conn())
                        .await?;
                    insert_vector_row(write.conn(), id, vector).await?;
                    write.commit().await?;
                    Ok(true)
                }
            }
        }
    };
}
