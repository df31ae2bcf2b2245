//! The queries both backends share, written once and stamped out per backend.
//!
//! Both backends accept `$N` placeholders and the same SQL except where JSON is bound;
//! what differs (opening, the scope lock, how a write transaction begins) each backend
//! module defines itself under the same names: `Db`, `Conn`, `WriteTx` (with `conn` and
//! `commit`), `begin_write` and `lock_scope`.

/// The `memories` columns, in the shape of `MemoryRecord`.
macro_rules! memory_columns {
    () => {
        "id, domain, namespace, kind, title, content, content_hash, lifecycle, helpful, harmful, \
         occurrence_count, dedup_verified, CAST(dedup_attempts AS BIGINT) AS dedup_attempts, dedup_last_error, \
         deprecated, merged_into, CAST(metadata AS TEXT) AS metadata, unique_content, embeds_title, vector_pending, created_at, updated_at"
    };
}

/// Stamps out the shared queries for `$backend` in a child module `queries`. `$json` is
/// what follows a bound parameter to make it a JSON column value (`""` or `"::jsonb"`).
macro_rules! shared_queries {
    ($backend:ident, json_param = $json:literal) => {
        mod queries {
            use std::collections::BTreeMap;
            use std::sync::Arc;

            use dedup_core::ContentHash;
            use sqlx::QueryBuilder;

            use super::*;
            use crate::store::changes::{ChangeNote, ChangeRow};
            use crate::store::{
                FreshIndex, IndexHandle, IndexKey, IndexLoads, IndexState, IndexedInsert, MemoryRecord, PreparedMemory,
                PreparedUpdate, VectorRecord, dims_i32, now, top_k,
            };
            use crate::{
                ChangeAction, ChangeId, Edge, Error, InsertOutcome, ListFilter, Memory, MemoryId, NamespaceStats, Result, Scope, StoredVector,
            };

            /// Rows per multi-row insert.
            const INSERT_CHUNK: usize = 100;

            impl $backend {
                pub(in crate::store) async fn find_exact(
                    &self,
                    scope: &Scope,
                    hash: &ContentHash,
                ) -> Result<Option<MemoryId>> {
                    let mut conn = self.pool.acquire().await?;
                    find_exact_on(&mut conn, scope, hash).await
                }

                /// A read guard on the index of (`scope`, `model`), brought up to date
                /// with the scope's watermark first.
                ///
                /// Lock order: a pool connection, then the index lock (never the other way
                /// round), so a refresh can never wait for a connection held by a writer
                /// that waits for the index.
                pub(in crate::store) async fn fresh_index(
                    &self,
                    handle: IndexHandle,
                    key: &IndexKey,
                    loads: &IndexLoads,
                ) -> Result<FreshIndex> {
                    let mut conn = self.pool.acquire().await?;
                    let version = scope_version(&mut conn, &key.scope).await?;
                    let state = Arc::clone(&handle).read_owned().await;
                    if state.is_current(version.0) {
                        return Ok(state);
                    }
                    drop(state);
                    let mut state = handle.write_owned().await;
                    refresh(&mut conn, &mut state, key, version, loads).await?;
                    Ok(state.downgrade())
                }

                pub(in crate::store) async fn insert_checked(
                    &self,
                    prepared: &PreparedMemory,
                    vector: Option<&StoredVector>,
                    threshold: Option<f32>,
                    indexed: Option<IndexedInsert>,
                ) -> Result<InsertOutcome> {
                    let scope = &prepared.memory.scope;
                    // Catch up outside the write lock, so that the locked transaction only
                    // reads what changed meanwhile.
                    if let Some(indexed) = &indexed {
                        let fresh = self.fresh_index(Arc::clone(&indexed.handle), &indexed.key, &indexed.loads).await?;
                        fresh.check_dims(&indexed.comparable)?;
                    }

                    let mut write = self.begin_write().await?;
                    lock_scope(write.conn(), scope).await?;
                    if let Some(vector) = vector {
                        check_model_dims(write.conn(), scope, vector, None).await?;
                    }
                    if prepared.memory.unique_content {
                        if let Some(id) = find_exact_on(write.conn(), scope, &prepared.hash).await? {
                            return Ok(InsertOutcome::ExactDuplicate(id));
                        }
                    }
                    if let Some(indexed) = &indexed {
                        let version = scope_version(write.conn(), scope).await?;
                        let mut state = Arc::clone(&indexed.handle).write_owned().await;
                        refresh(write.conn(), &mut state, &indexed.key, version, &indexed.loads).await?;
                        state.check_dims(&indexed.comparable)?;
                        if let Some(threshold) = threshold {
                            let (state, best) = top_k(state, &indexed.comparable, 1, Some(threshold)).await?;
                            drop(state);
                            if let Some(best) = best.first() {
                                return Ok(InsertOutcome::SemanticDuplicate { id: best.id, score: best.score });
                            }
                        }
                    }

                    let version = bump_version(write.conn(), scope).await?;
                    let memory = &prepared.memory;
                    let inserted: Option<i64> = sqlx::query_scalar(concat!(
                        "INSERT INTO memories (domain, namespace, kind, title, content, content_hash, metadata, \
                         created_at, updated_at, change_seq, unique_content, embeds_title, vector_pending) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7",
                        $json,
                        ", $8, $8, $9, $10, $11, $12) ON CONFLICT (domain, namespace, content_hash) \
                         WHERE NOT deprecated AND unique_content DO NOTHING RETURNING id"
                    ))
                    .bind(scope.domain())
                    .bind(scope.namespace_name())
                    .bind(&memory.kind)
                    .bind(memory.title.as_deref())
                    .bind(&memory.content)
                    .bind(prepared.hash.as_str())
                    .bind(&prepared.metadata_json)
                    .bind(prepared.now)
                    .bind(version)
                    .bind(memory.unique_content)
                    .bind(memory.embeds_title)
                    .bind(memory.vector_pending && vector.is_none())
                    .fetch_optional(write.conn())
                    .await?;
                    let Some(id) = inserted.map(MemoryId::new) else {
                        // Only a writer that skipped the scope lock can get here; the row
                        // it stored wins.
                        drop(write);
                        return match self.find_exact(scope, &prepared.hash).await? {
                            Some(id) => Ok(InsertOutcome::ExactDuplicate(id)),
                            None => Err(Error::Corrupt {
                                table: "memories",
                                reason: format!(
                                    "insert of {} conflicted with a live row that cannot be found",
                                    prepared.hash.fingerprint()
                                ),
                            }),
                        };
                    };
                    if let Some(vector) = vector {
                        insert_vector_row(write.conn(), id, vector).await?;
                    }
                    write.commit().await?;

                    if let Some(indexed) = &indexed {
                        let same_kind = indexed.key.filter.kind.as_ref().is_none_or(|kind| kind == &memory.kind);
                        let embedding = same_kind.then_some(&indexed.comparable);
                        indexed.handle.write().await.apply_insert(id, embedding, version)?;
                    }
                    Ok(InsertOutcome::Inserted(id))
                }

                /// Deprecates `id`; the scope and its new version, or `None` if it was
                /// deprecated already.
                pub(in crate::store) async fn deprecate(
                    &self,
                    id: MemoryId,
                    merged_into: Option<MemoryId>,
                ) -> Result<Option<(Scope, i64)>> {
                    let mut write = self.begin_write().await?;
                    let (scope, _) = scope_of(write.conn(), id).await?.ok_or(Error::NotFound(id))?;
                    lock_scope(write.conn(), &scope).await?;
                    // Read again under the lock: another writer may have deprecated it.
                    let (_, deprecated) = scope_of(write.conn(), id).await?.ok_or(Error::NotFound(id))?;
                    if deprecated {
                        return Ok(None);
                    }
                    if let Some(into) = merged_into {
                        let (into_scope, _) = scope_of(write.conn(), into).await?.ok_or(Error::NotFound(into))?;
                        if into_scope != scope {
                            return Err(Error::InvalidMerge {
                                id,
                                into,
                                reason: "the memories are in different scopes",
                            });
                        }
                    }
                    let version = bump_version(write.conn(), &scope).await?;
                    sqlx::query(
                        "UPDATE memories SET deprecated = TRUE, merged_into = $2, updated_at = $3, change_seq = $4 \
                         WHERE id = $1",
                    )
                    .bind(id.get())
                    .bind(merged_into.map(MemoryId::get))
                    .bind(now())
                    .bind(version)
                    .execute(write.conn())
                    .await?;
                    write.commit().await?;
                    Ok(Some((scope, version)))
                }

                /// Applies a prepared update under the scope lock; the memory as stored.
                /// With a change note, a new text is recorded in the memory's history (and
                /// a live memory is required); an undo's note marks the change it undoes.
                pub(in crate::store) async fn update(
                    &self,
                    id: MemoryId,
                    prepared: &PreparedUpdate,
                ) -> Result<(Memory, Option<ChangeId>)> {
                    let mut write = self.begin_write().await?;
                    let (scope, _) = scope_of(write.conn(), id).await?.ok_or(Error::NotFound(id))?;
                    lock_scope(write.conn(), &scope).await?;
                    let current = select_memory(write.conn(), id).await?.ok_or(Error::NotFound(id))?;
                    if let Some(note) = &prepared.note {
                        if current.deprecated {
                            return Err(Error::NotLive { id, reason: not_live_reason(&current) });
                        }
                        if let (Some(undoes), Some(expect)) = (note.undoes, &note.expect_hash) {
                            if current.content_hash != *expect {
                                return Err(Error::ChangeNotUndoable {
                                    id: undoes,
                                    reason: format!("memory {id}'s text changed since"),
                                });
                            }
                        }
                    }
                    if let Some(vector) = &prepared.vector {
                        check_model_dims(write.conn(), &scope, vector, Some(id)).await?;
                    }
                    if let Some(hash) = &prepared.hash {
                        if current.unique_content && !current.deprecated {
                            if let Some(other) = find_exact_on(write.conn(), &scope, hash).await? {
                                if other != id {
                                    return Err(Error::Conflict {
                                        reason: format!(
                                            "memory {id}'s new text equals live memory {other}'s in {scope}"
                                        ),
                                    });
                                }
                            }
                        }
                    }
                    let update = &prepared.update;
                    let retitled = update.title.as_ref().is_some_and(|title| *title != current.title);
                    if update.unique_in_kind && !current.deprecated && (prepared.hash.is_some() || retitled) {
                        let hash = prepared.hash.as_ref().unwrap_or(&current.content_hash);
                        let title = update.title.clone().unwrap_or_else(|| current.title.clone());
                        let title_hash = ContentHash::of(title.as_deref().unwrap_or_default());
                        let same_text: Vec<(i64, Option<String>)> = sqlx::query_as(
                            "SELECT id, title FROM memories WHERE domain = $1 AND namespace = $2 AND kind = $3 \
                             AND content_hash = $4 AND NOT deprecated AND id <> $5 ORDER BY id",
                        )
                        .bind(scope.domain())
                        .bind(scope.namespace_name())
                        .bind(&current.kind)
                        .bind(hash.as_str())
                        .bind(id.get())
                        .fetch_all(write.conn())
                        .await?;
                        let twin = same_text
                            .into_iter()
                            .find(|(_, other)| ContentHash::of(other.as_deref().unwrap_or_default()) == title_hash);
                        if let Some((other, _)) = twin {
                            return Err(Error::DuplicateEdit { id, existing: MemoryId::new(other) });
                        }
                    }
                    let mut query = QueryBuilder::<Db>::new("UPDATE memories SET updated_at = ");
                    query.push_bind(prepared.now);
                    if let (Some(content), Some(hash)) = (&update.content, &prepared.hash) {
                        query.push(", content = ").push_bind(content.as_str());
                        query.push(", content_hash = ").push_bind(hash.as_str());
                        // An edited text has not been judged: back into the dedup queue.
                        if *content != current.content {
                            query.push(", dedup_verified = FALSE, dedup_last_error = NULL");
                        }
                    }
                    if let Some(title) = &update.title {
                        query.push(", title = ").push_bind(title.as_deref());
                    }
                    if let Some(lifecycle) = update.lifecycle {
                        query.push(", lifecycle = ").push_bind(lifecycle.as_str());
                    }
                    if let Some(metadata) = &prepared.metadata_json {
                        query.push(", metadata = ").push_bind(metadata.as_str()).push($json);
                    }
                    if prepared.changes_vector() {
                        let version = bump_version(write.conn(), &scope).await?;
                        query.push(", change_seq = ").push_bind(version);
                        if prepared.vector.is_some() {
                            query.push(", vector_pending = FALSE");
                        }
                    }
                    query.push(" WHERE id = ").push_bind(id.get());
                    query.build().execute(write.conn()).await?;
                    if prepared.changes_vector() {
                        sqlx::query("DELETE FROM embeddings WHERE memory_id = $1")
                            .bind(id.get())
                            .execute(write.conn())
                            .await?;
                        if let Some(vector) = &prepared.vector {
                            insert_vector_row(write.conn(), id, vector).await?;
                        }
                    }
                    let change = match (&prepared.note, &update.content) {
                        (Some(note), Some(content)) if *content != current.content => {
                            let edit = ChangeRow {
                                memory: id,
                                scope: &scope,
                                action: ChangeAction::Edited,
                                before: Some(&current.content),
                                after: Some(content),
                            };
                            Some(record_change(write.conn(), &edit, note, prepared.now).await?)
                        }
                        _ => None,
                    };
                    let memory = select_memory(write.conn(), id).await?.ok_or(Error::NotFound(id))?;
                    write.commit().await?;
                    Ok((memory, change))
                }

                /// Deletes `id` under its scope's lock; the scope and the version written,
                /// or `None` when there was no such memory.
                pub(in crate::store) async fn delete(&self, id: MemoryId) -> Result<Option<(Scope, i64)>> {
                    let mut write = self.begin_write().await?;
                    let Some((scope, _)) = scope_of(write.conn(), id).await? else { return Ok(None) };
                    lock_scope(write.conn(), &scope).await?;
                    if scope_of(write.conn(), id).await?.is_none() {
                        return Ok(None);
                    }
                    let merges: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM merge_log WHERE survivor = $1")
                        .bind(id.get())
                        .fetch_one(write.conn())
                        .await?;
                    if merges > 0 {
                        return Err(Error::Conflict {
                            reason: format!("memory {id} survived {merges} merge(s) in the merge log; deprecate it"),
                        });
                    }
                    for statement in [
                        "DELETE FROM review_queue WHERE low = $1 OR high = $1",
                        "DELETE FROM edges WHERE source = $1 OR target = $1",
                        "UPDATE memories SET merged_into = NULL WHERE merged_into = $1",
                        "DELETE FROM embeddings WHERE memory_id = $1",
                        "DELETE FROM memories WHERE id = $1",
                    ] {
                        sqlx::query(statement).bind(id.get()).execute(write.conn()).await?;
                    }
                    let version = bump_version(write.conn(), &scope).await?;
                    sqlx::query("UPDATE scope_state SET reset_version = $3 WHERE domain = $1 AND namespace = $2")
                        .bind(scope.domain())
                        .bind(scope.namespace_name())
                        .bind(version)
                        .execute(write.conn())
                        .await?;
                    write.commit().await?;
                    Ok(Some((scope, version)))
                }

                pub(in crate::store) async fn edges_of(&self, id: MemoryId) -> Result<Vec<Edge>> {
                    let rows: Vec<(i64, i64, String, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(
                        "SELECT source, target, kind, created_at FROM edges WHERE source = $1 OR target = $1 \
                         ORDER BY created_at, source, target, kind",
                    )
                    .bind(id.get())
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .into_iter()
                        .map(|(source, target, kind, created_at)| Edge {
                            source: MemoryId::new(source),
                            target: MemoryId::new(target),
                            kind,
                            created_at,
                        })
                        .collect())
                }

                pub(in crate::store) async fn get(&self, id: MemoryId) -> Result<Option<Memory>> {
                    let mut conn = self.pool.acquire().await?;
                    select_memory(&mut conn, id).await
                }

                pub(in crate::store) async fn list(&self, filter: &ListFilter) -> Result<Vec<Memory>> {
                    let mut query =
                        QueryBuilder::<Db>::new(concat!("SELECT ", memory_columns!(), " FROM memories WHERE TRUE"));
                    if let Some(domain) = &filter.domain {
                        query.push(" AND domain = ").push_bind(domain.as_str());
                    }
                    if let Some(namespace) = &filter.namespace {
                        query.push(" AND namespace = ").push_bind(namespace.as_str());
                    }
                    if let Some(kind) = &filter.kind {
                        query.push(" AND kind = ").push_bind(kind.as_str());
                    }
                    if let Some(lifecycle) = filter.lifecycle {
                        query.push(" AND lifecycle = ").push_bind(lifecycle.as_str());
                    }
                    if !filter.include_deprecated || filter.without_vector {
                        query.push(" AND NOT deprecated");
                    }
                    if filter.vector_pending {
                        query.push(" AND vector_pending AND NOT deprecated");
                    }
                    if filter.without_vector {
                        query.push(" AND NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.memory_id = memories.id)");
                    }
                    if let Some(after) = filter.after {
                        query.push(" AND id > ").push_bind(after.get());
                    }
                    query.push(" ORDER BY id");
                    if filter.limit > 0 {
                        query.push(" LIMIT ").push_bind(i64::try_from(filter.limit).unwrap_or(i64::MAX));
                    }
                    let records: Vec<MemoryRecord> = query.build_query_as().fetch_all(&self.pool).await?;
                    records.into_iter().map(Memory::try_from).collect()
                }

                pub(in crate::store) async fn note_occurrence(&self, id: MemoryId) -> Result<()> {
                    let mut write = self.begin_write().await?;
                    let updated = sqlx::query(
                        "UPDATE memories SET occurrence_count = occurrence_count + 1, updated_at = $2 WHERE id = $1",
                    )
                    .bind(id.get())
                    .bind(now())
                    .execute(write.conn())
                    .await?;
                    if updated.rows_affected() == 0 {
                        return Err(Error::NotFound(id));
                    }
                    write.commit().await
                }

                pub(in crate::store) async fn record_skip(&self, scope: &Scope, reason: &str) -> Result<()> {
                    let mut write = self.begin_write().await?;
                    sqlx::query(
                        "INSERT INTO dedup_skips (domain, namespace, reason, count) VALUES ($1, $2, $3, 1) \
                         ON CONFLICT (domain, namespace, reason) DO UPDATE SET count = dedup_skips.count + 1",
                    )
                    .bind(scope.domain())
                    .bind(scope.namespace_name())
                    .bind(reason)
                    .execute(write.conn())
                    .await?;
                    write.commit().await
                }

                /// Per-scope counts in (domain, namespace) order, and the cache size.
                pub(in crate::store) async fn stats(&self) -> Result<(Vec<NamespaceStats>, u64)> {
                    let counts: Vec<(String, String, i64, i64, i64)> = sqlx::query_as(
                        "SELECT domain, namespace, COUNT(*) FILTER (WHERE NOT deprecated), \
                         COUNT(*) FILTER (WHERE deprecated), \
                         COUNT(*) FILTER (WHERE NOT deprecated AND vector_pending) \
                         FROM memories GROUP BY domain, namespace",
                    )
                    .fetch_all(&self.pool)
                    .await?;
                    let skips: Vec<(String, String, String, i64)> =
                        sqlx::query_as("SELECT domain, namespace, reason, count FROM dedup_skips")
                            .fetch_all(&self.pool)
                            .await?;
                    let cached: i64 =
                        sqlx::query_scalar("SELECT COUNT(*) FROM embedding_cache").fetch_one(&self.pool).await?;

                    let count = |table: &'static str, value: i64| {
                        u64::try_from(value)
                            .map_err(|_| Error::Corrupt { table, reason: format!("negative count {value}") })
                    };
                    let mut scopes: BTreeMap<(String, String), NamespaceStats> = BTreeMap::new();
                    for (domain, namespace, live, deprecated, unembedded) in counts {
                        let stats = scope_entry(&mut scopes, domain, namespace);
                        stats.live = count("memories", live)?;
                        stats.deprecated = count("memories", deprecated)?;
                        stats.unembedded = count("memories", unembedded)?;
                    }
                    for (domain, namespace, reason, skipped) in skips {
                        scope_entry(&mut scopes, domain, namespace)
                            .skipped
                            .insert(reason, count("dedup_skips", skipped)?);
                    }
                    Ok((scopes.into_values().collect(), count("embedding_cache", cached)?))
                }

                pub(in crate::store) async fn cache_embeddings(
                    &self,
                    model: &str,
                    entries: &[(ContentHash, dedup_core::Embedding)],
                ) -> Result<()> {
                    let rows = entries
                        .iter()
                        .map(|(hash, embedding)| Ok((hash.as_str(), dims_i32(embedding)?, embedding.to_le_bytes())))
                        .collect::<Result<Vec<_>>>()?;
                    let created_at = now();
                    let mut write = self.begin_write().await?;
                    for chunk in rows.chunks(INSERT_CHUNK) {
                        let mut query = QueryBuilder::<Db>::new(
                            "INSERT INTO embedding_cache (model, text_hash, dims, vector, created_at) ",
                        );
                        query.push_values(chunk, |mut row, (hash, dims, bytes)| {
                            row.push_bind(model)
                                .push_bind(*hash)
                                .push_bind(*dims)
                                .push_bind(bytes.as_slice())
                                .push_bind(created_at);
                        });
                        query.push(" ON CONFLICT (model, text_hash) DO NOTHING");
                        query.build().execute(write.conn()).await?;
                    }
                    write.commit().await
                }

                pub(in crate::store) async fn add_edge(
                    &self,
                    source: MemoryId,
                    target: MemoryId,
                    kind: &str,
                ) -> Result<bool> {
                    let mut write = self.begin_write().await?;
                    let existing: Vec<i64> = sqlx::query_scalar("SELECT id FROM memories WHERE id = $1 OR id = $2")
                        .bind(source.get())
                        .bind(target.get())
                        .fetch_all(write.conn())
                        .await?;
                    for id in [source, target] {
                        if !existing.contains(&id.get()) {
                            return Err(Error::NotFound(id));
                        }
                    }
                    let added = sqlx::query(
                        "INSERT INTO edges (source, target, kind, created_at) VALUES ($1, $2, $3, $4) \
                         ON CONFLICT (source, target, kind) DO NOTHING",
                    )
                    .bind(source.get())
                    .bind(target.get())
                    .bind(kind)
                    .bind(now())
                    .execute(write.conn())
                    .await?;
                    write.commit().await?;
                    Ok(added.rows_affected() == 1)
                }
            }

            fn scope_entry(
                scopes: &mut BTreeMap<(String, String), NamespaceStats>,
                domain: String,
                namespace: String,
            ) -> &mut NamespaceStats {
                scopes.entry((domain.clone(), namespace.clone())).or_insert_with(|| NamespaceStats {
                    domain,
                    namespace,
                    live: 0,
                    deprecated: 0,
                    unembedded: 0,
                    skipped: BTreeMap::new(),
                })
            }

            /// Fails with `InvalidVector` when the live memories of `scope` (other than
            /// `except`) hold vectors of `vector`'s model with other dimensions.
            pub(super) async fn check_model_dims(
                conn: &mut Conn,
                scope: &Scope,
                vector: &StoredVector,
                except: Option<MemoryId>,
            ) -> Result<()> {
                let dims: Option<i64> = sqlx::query_scalar(
                    "SELECT CAST(e.dims AS BIGINT) FROM embeddings e JOIN memories m ON m.id = e.memory_id \
                     WHERE m.domain = $1 AND m.namespace = $2 AND e.model = $3 AND NOT m.deprecated AND m.id <> $4 \
                     LIMIT 1",
                )
                .bind(scope.domain())
                .bind(scope.namespace_name())
                .bind(&vector.model)
                .bind(except.map_or(0, MemoryId::get))
                .fetch_optional(&mut *conn)
                .await?;
                match dims.and_then(|d| usize::try_from(d).ok()) {
                    Some(expected) if expected != vector.embedding.dims() => {
                        Err(Error::InvalidVector(dedup_core::Error::DimensionMismatch {
                            expected,
                            actual: vector.embedding.dims(),
                        }))
                    }
                    _ => Ok(()),
                }
            }

            pub(super) async fn select_memory(conn: &mut Conn, id: MemoryId) -> Result<Option<Memory>> {
                let record: Option<MemoryRecord> =
                    sqlx::query_as(concat!("SELECT ", memory_columns!(), " FROM memories WHERE id = $1"))
                        .bind(id.get())
                        .fetch_optional(&mut *conn)
                        .await?;
                record.map(Memory::try_from).transpose()
            }

            pub(super) async fn find_exact_on(
                conn: &mut Conn,
                scope: &Scope,
                hash: &ContentHash,
            ) -> Result<Option<MemoryId>> {
                let id: Option<i64> = sqlx::query_scalar(
                    "SELECT id FROM memories WHERE domain = $1 AND namespace = $2 AND content_hash = $3 \
                     AND NOT deprecated AND unique_content",
                )
                .bind(scope.domain())
                .bind(scope.namespace_name())
                .bind(hash.as_str())
                .fetch_optional(&mut *conn)
                .await?;
                Ok(id.map(MemoryId::new))
            }

            /// The scope's change watermark and the version of its last delete: (0, 0)
            /// before its first write.
            async fn scope_version(conn: &mut Conn, scope: &Scope) -> Result<(i64, i64)> {
                let version: Option<(i64, i64)> = sqlx::query_as(
                    "SELECT version, reset_version FROM scope_state WHERE domain = $1 AND namespace = $2",
                )
                .bind(scope.domain())
                .bind(scope.namespace_name())
                .fetch_optional(&mut *conn)
                .await?;
                Ok(version.unwrap_or((0, 0)))
            }

            /// Bumps the scope's watermark; call under the scope lock. Returns the new
            /// version, which the written rows get as their `change_seq`.
            /// Stores `vector` as memory `id`'s (which has none).
            pub(super) async fn insert_vector_row(conn: &mut Conn, id: MemoryId, vector: &StoredVector) -> Result<()> {
                sqlx::query("INSERT INTO embeddings (memory_id, model, dims, vector) VALUES ($1, $2, $3, $4)")
                    .bind(id.get())
                    .bind(&vector.model)
                    .bind(dims_i32(&vector.embedding)?)
                    .bind(vector.embedding.to_le_bytes())
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            }

            pub(super) async fn bump_version(conn: &mut Conn, scope: &Scope) -> Result<i64> {
                let version: i64 = sqlx::query_scalar(
                    "INSERT INTO scope_state (domain, namespace, version) VALUES ($1, $2, 1) \
                     ON CONFLICT (domain, namespace) DO UPDATE SET version = scope_state.version + 1 \
                     RETURNING version",
                )
                .bind(scope.domain())
                .bind(scope.namespace_name())
                .fetch_one(&mut *conn)
                .await?;
                Ok(version)
            }

            /// Writes one entry of a memory's history; with `note.undoes`, marks that
            /// change undone by this one (failing when it was undone already).
            pub(super) async fn record_change(
                conn: &mut Conn,
                row: &ChangeRow<'_>,
                note: &ChangeNote,
                at: chrono::DateTime<chrono::Utc>,
            ) -> Result<ChangeId> {
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO memory_changes (memory_id, domain, namespace, action, before_text, after_text, \
                     source, undoes, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
                )
                .bind(row.memory.get())
                .bind(row.scope.domain())
                .bind(row.scope.namespace_name())
                .bind(row.action.as_str())
                .bind(row.before)
                .bind(row.after)
                .bind(&note.source)
                .bind(note.undoes.map(ChangeId::get))
                .bind(at)
                .fetch_one(&mut *conn)
                .await?;
                if let Some(undoes) = note.undoes {
                    let marked = sqlx::query(
                        "UPDATE memory_changes SET undone_by = $2 WHERE id = $1 AND undone_by IS NULL",
                    )
                    .bind(undoes.get())
                    .bind(id)
                    .execute(&mut *conn)
                    .await?;
                    if marked.rows_affected() != 1 {
                        return Err(Error::ChangeNotUndoable { id: undoes, reason: "it was undone already".into() });
                    }
                }
                Ok(ChangeId::new(id))
            }

            /// Why a deprecated memory is not live, in words.
            pub(super) fn not_live_reason(memory: &Memory) -> String {
                match memory.merged_into {
                    Some(into) => format!("it was merged into memory {into}"),
                    None => "it was forgotten or retired".to_owned(),
                }
            }

            /// The scope of a memory and whether it is deprecated.
            pub(super) async fn scope_of(conn: &mut Conn, id: MemoryId) -> Result<Option<(Scope, bool)>> {
                let row: Option<(String, String, bool)> =
                    sqlx::query_as("SELECT domain, namespace, deprecated FROM memories WHERE id = $1")
                        .bind(id.get())
                        .fetch_optional(&mut *conn)
                        .await?;
                row.map(|(domain, namespace, deprecated)| {
                    Scope::new(&domain, &namespace)
                        .map(|scope| (scope, deprecated))
                        .map_err(|e| Error::Corrupt { table: "memories", reason: format!("id {id}: {e}") })
                })
                .transpose()
            }

            /// Brings `state` up to `version`, read just before (with the version of the
            /// scope's last delete): a full load of the live rows the first time or after a
            /// delete it has not seen, else the rows changed since the version it reflects.
            /// A first load is counted in `loads`.
            async fn refresh(
                conn: &mut Conn,
                state: &mut IndexState,
                key: &IndexKey,
                (version, reset): (i64, i64),
                loads: &IndexLoads,
            ) -> Result<()> {
                if state.is_current(version) {
                    return Ok(());
                }
                let started = state.version.is_none().then(std::time::Instant::now);
                let since = state.version.filter(|&since| since >= reset);
                let mut query = QueryBuilder::<Db>::new(
                    "SELECT m.id, m.deprecated, CAST(e.dims AS BIGINT) AS dims, e.vector FROM memories m ",
                );
                query.push(if since.is_some() { "LEFT JOIN" } else { "JOIN" });
                query.push(" embeddings e ON e.memory_id = m.id AND e.model = ").push_bind(key.model.as_str());
                query.push(" WHERE m.domain = ").push_bind(key.scope.domain());
                query.push(" AND m.namespace = ").push_bind(key.scope.namespace_name());
                if let Some(kind) = &key.filter.kind {
                    query.push(" AND m.kind = ").push_bind(kind.as_str());
                }
                match since {
                    Some(since) => {
                        query.push(" AND m.change_seq > ").push_bind(since);
                    }
                    None => {
                        query.push(" AND NOT m.deprecated");
                    }
                }
                let rows: Vec<VectorRecord> = query.build_query_as().fetch_all(&mut *conn).await?;
                state.apply(rows, since.is_none(), version, &key.filter)?;
                if let Some(started) = started {
                    loads.record(started.elapsed());
                }
                Ok(())
            }
        }
    };
}
