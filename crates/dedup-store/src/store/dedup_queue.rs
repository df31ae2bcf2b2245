//! The assisted-dedup queue on the `Store` handle (seed 003 §1): which live memories wait
//! for a judge, the vectors it compares, and the guarded writes recording its verdicts.
//! Queries both backends share are stamped out per backend by `dedup_queue_queries!`,
//! like `shared.rs`.
//!
//! The queue lives in the memories themselves (`dedup_verified`, `dedup_attempts`,
//! `dedup_last_error`). Its writes touch neither `updated_at` nor the scope's watermark,
//! and each names the content hash it judged, so a verdict on a text edited since is
//! dropped rather than applied to the new text.

use std::collections::{HashMap, HashSet};

use dedup_core::{ContentHash, Embedding};

use super::{Backend, Store, validate_model};
use crate::{DedupCounts, MAX_DEDUP_ERROR_CHARS, Memory, MemoryId, Result, Scope};

impl Store {
    /// The live memories of `scope` that no assisted dedup pass has verified and that
    /// were tried fewer than `max_attempts` times, in id order; at most `limit` of them
    /// (0: all). Memories that may repeat ([`NewMemory::allow_repeats`](crate::NewMemory::allow_repeats))
    /// are distinct by definition and never queued, except titled ones
    /// ([`NewMemory::embed_title`](crate::NewMemory::embed_title), seed 001's nodes),
    /// which repeat only in their body.
    pub async fn unverified(&self, scope: &Scope, max_attempts: u32, limit: usize) -> Result<Vec<Memory>> {
        let result = dispatch!(self, b => b.dedup_queue(scope, max_attempts, false, limit).await);
        self.classify(result)
    }

    /// The live memories of `scope` still unverified after `max_attempts` tries or more,
    /// in id order: those an assisted dedup pass gave up on.
    pub async fn exhausted(&self, scope: &Scope, max_attempts: u32) -> Result<Vec<Memory>> {
        let result = dispatch!(self, b => b.dedup_queue(scope, max_attempts, true, 0).await);
        self.classify(result)
    }

    /// How many live memories of `scope` are verified and how many wait.
    pub async fn dedup_counts(&self, scope: &Scope) -> Result<DedupCounts> {
        let result = dispatch!(self, b => b.dedup_counts(scope).await);
        self.classify(result)
    }

    /// The stored vectors of `model` of these memories (live or deprecated); memories
    /// without one of that model are absent. Any number of ids; they are read in chunks.
    pub async fn vectors(&self, model: &str, ids: &[MemoryId]) -> Result<HashMap<MemoryId, Embedding>> {
        validate_model(model)?;
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let result = dispatch!(self, b => b.vectors(model, ids).await);
        self.classify(result)
    }

    /// Marks memories verified by an assisted dedup pass (`dedup_verified`, and no last
    /// error), in one transaction. Each entry is a memory and the content hash the caller
    /// judged: a row is only touched while it is live and still has that hash, so a
    /// verdict on a text edited since is dropped. `updated_at` and the scope's watermark
    /// do not change. Returns the ids touched, in input order (repeats once).
    pub async fn mark_verified(&self, rows: &[(MemoryId, ContentHash)]) -> Result<Vec<MemoryId>> {
        let rows = distinct_rows(rows);
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let result = dispatch!(self, b => b.mark_verified(&rows).await);
        self.classify(result)
    }

    /// Records a failed assisted dedup try (seed 003 §1: a judge or parse error) on
    /// memories still unverified: one more attempt and `error` as the last error (cut to
    /// [`MAX_DEDUP_ERROR_CHARS`] characters; NULs replaced). The same content-hash guard
    /// as [`Store::mark_verified`] applies, and a verified row is not touched. Returns the
    /// ids touched, in input order.
    pub async fn record_dedup_failure(&self, rows: &[(MemoryId, ContentHash)], error: &str) -> Result<Vec<MemoryId>> {
        let rows = distinct_rows(rows);
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let error: String =
            error.chars().take(MAX_DEDUP_ERROR_CHARS).map(|c| if c == '\0' { '\u{fffd}' } else { c }).collect();
        let result = dispatch!(self, b => b.record_dedup_failure(&rows, &error).await);
        self.classify(result)
    }
}

/// `rows` without repeated ids (the first entry of an id wins).
fn distinct_rows(rows: &[(MemoryId, ContentHash)]) -> Vec<(MemoryId, ContentHash)> {
    let mut seen = HashSet::with_capacity(rows.len());
    rows.iter().filter(|(id, _)| seen.insert(*id)).cloned().collect()
}

/// Stamps out the dedup-queue queries for `$backend` in a child module
/// `dedup_queue_queries`.
macro_rules! dedup_queue_queries {
    ($backend:ident) => {
        mod dedup_queue_queries {
            use std::collections::HashMap;

            use dedup_core::{ContentHash, Embedding};
            use sqlx::QueryBuilder;

            use super::*;
            use crate::store::{MemoryRecord, decode_vector};
            use crate::{DedupCounts, Error, Memory, MemoryId, Result, Scope};

            /// Ids per `IN (…)` list, well under SQLite's limit on bound variables.
            const IN_CHUNK: usize = 500;

            impl $backend {
                /// Live unverified memories of `scope`: tried fewer than `max_attempts`
                /// times, or (`exhausted`) at least that often; in id order.
                pub(in crate::store) async fn dedup_queue(
                    &self,
                    scope: &Scope,
                    max_attempts: u32,
                    exhausted: bool,
                    limit: usize,
                ) -> Result<Vec<Memory>> {
                    let mut query = QueryBuilder::<Db>::new(concat!(
                        "SELECT ",
                        memory_columns!(),
                        " FROM memories WHERE NOT deprecated AND NOT dedup_verified \
                         AND (unique_content OR embeds_title) AND domain = "
                    ));
                    query.push_bind(scope.domain());
                    query.push(" AND namespace = ").push_bind(scope.namespace_name());
                    query.push(if exhausted { " AND dedup_attempts >= " } else { " AND dedup_attempts < " });
                    query.push_bind(i64::from(max_attempts));
                    query.push(" ORDER BY id");
                    if limit > 0 {
                        query.push(" LIMIT ").push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
                    }
                    let records: Vec<MemoryRecord> = query.build_query_as().fetch_all(&self.pool).await?;
                    records.into_iter().map(Memory::try_from).collect()
                }

                pub(in crate::store) async fn dedup_counts(&self, scope: &Scope) -> Result<DedupCounts> {
                    let (live, verified): (i64, i64) = sqlx::query_as(
                        "SELECT COUNT(*), COUNT(*) FILTER (WHERE dedup_verified) FROM memories \
                         WHERE domain = $1 AND namespace = $2 AND NOT deprecated",
                    )
                    .bind(scope.domain())
                    .bind(scope.namespace_name())
                    .fetch_one(&self.pool)
                    .await?;
                    let count = |value: i64| {
                        u64::try_from(value).map_err(|_| Error::Corrupt {
                            table: "memories",
                            reason: format!("negative count {value}"),
                        })
                    };
                    let (live, verified) = (count(live)?, count(verified)?);
                    Ok(DedupCounts { live, verified, unverified: live.saturating_sub(verified) })
                }

                pub(in crate::store) async fn vectors(
                    &self,
                    model: &str,
                    ids: &[MemoryId],
                ) -> Result<HashMap<MemoryId, Embedding>> {
                    let mut found = HashMap::with_capacity(ids.len());
                    let mut conn = self.pool.acquire().await?;
                    for chunk in ids.chunks(IN_CHUNK) {
                        let mut query = QueryBuilder::<Db>::new(
                            "SELECT memory_id, CAST(dims AS BIGINT) AS dims, vector FROM embeddings WHERE model = ",
                        );
                        query.push_bind(model).push(" AND memory_id IN (");
                        let mut list = query.separated(", ");
                        for id in chunk {
                            list.push_bind(id.get());
                        }
                        query.push(")");
                        let rows: Vec<(i64, i64, Vec<u8>)> = query.build_query_as().fetch_all(&mut *conn).await?;
                        for (id, dims, bytes) in rows {
                            let id = MemoryId::new(id);
                            let key = format_args!("memory {id}");
                            found.insert(id, decode_vector("embeddings", &key, dims, &bytes)?);
                        }
                    }
                    Ok(found)
                }

                pub(in crate::store) async fn mark_verified(
                    &self,
                    rows: &[(MemoryId, ContentHash)],
                ) -> Result<Vec<MemoryId>> {
                    let mut write = self.begin_write().await?;
                    let mut touched = Vec::with_capacity(rows.len());
                    for (id, hash) in rows {
                        let updated: Option<i64> = sqlx::query_scalar(
                            "UPDATE memories SET dedup_verified = TRUE, dedup_last_error = NULL \
                             WHERE id = $1 AND content_hash = $2 AND NOT deprecated RETURNING id",
                        )
                        .bind(id.get())
                        .bind(hash.as_str())
                        .fetch_optional(write.conn())
                        .await?;
                        touched.extend(updated.map(MemoryId::new));
                    }
                    write.commit().await?;
                    Ok(touched)
                }

                pub(in crate::store) async fn record_dedup_failure(
                    &self,
                    rows: &[(MemoryId, ContentHash)],
                    error: &str,
                ) -> Result<Vec<MemoryId>> {
                    let mut write = self.begin_write().await?;
                    let mut touched = Vec::with_capacity(rows.len());
                    for (id, hash) in rows {
                        let updated: Option<i64> = sqlx::query_scalar(
                            "UPDATE memories SET dedup_last_error = $3, dedup_attempts = CASE \
                             WHEN dedup_attempts < 2147483647 THEN dedup_attempts + 1 ELSE dedup_attempts END \
                             WHERE id = $1 AND content_hash = $2 AND NOT deprecated AND NOT dedup_verified \
                             RETURNING id",
                        )
                        .bind(id.get())
                        .bind(hash.as_str())
                        .bind(error)
                        .fetch_optional(write.conn())
                        .await?;
                        touched.extend(updated.map(MemoryId::new));
                    }
                    write.commit().await?;
                    Ok(touched)
                }
            }
        }
    };
}
