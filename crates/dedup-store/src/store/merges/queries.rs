//! The merge-ledger queries both backends share, stamped out per backend by
//! `merge_queries!` (the SQL differs only in how a JSON parameter is cast).

/// The `merge_log` columns of a ledger row, in the shape of `MergeRow`.
macro_rules! merge_columns {
    () => {
        "id, run_id, domain, namespace, survivor, CAST(absorbed_ids AS TEXT) AS absorbed_ids, canonical_text, \
         final_text, text_source, text_from, confidence, reason, judge, model, created_at, undone_at"
    };
}

/// Stamps out the merge-ledger queries for `$backend` in a child module `merge_queries`.
/// `$json` is what follows a bound parameter to make it a JSON column value (`""` or
/// `"::jsonb"`).
macro_rules! merge_queries {
    ($backend:ident, json_param = $json:literal) => {
        mod merge_queries {
            use std::collections::{BTreeSet, HashSet};

            use dedup_core::ContentHash;
            use sqlx::QueryBuilder;

            use super::queries::{bump_version, check_model_dims, find_exact_on, insert_vector_row, select_memory};
            use super::*;
            use crate::store::merges::{
                EdgeState, LedgerState, MemberState, MergeRow, PreparedMerge, VectorState, absorbed_ids, pairs_of,
            };
            use crate::store::now;
            use crate::{Error, MemoryId, MergeFilter, MergeId, MergeRecord, Result, Scope, UndoReport};

            impl $backend {
                pub(in crate::store) async fn apply_merge(&self, prepared: &PreparedMerge<'_>) -> Result<MergeRecord> {
                    let plan = prepared.plan;
                    let scope = &plan.scope;
                    let ids: Vec<MemoryId> = plan.members().collect();
                    let mut write = self.begin_write().await?;
                    lock_scope(write.conn(), scope).await?;
                    let current = read_members(write.conn(), &ids).await?;
                    prepared.check_current(&current)?;
                    let before = LedgerState {
                        members: current.into_iter().flatten().collect(),
                        edges: read_edges(write.conn(), &ids).await?,
                    };
                    refuse_blocked_pairs(write.conn(), plan.survivor, scope, &ids).await?;

                    let version = bump_version(write.conn(), scope).await?;
                    for id in &plan.absorbed {
                        sqlx::query(
                            "UPDATE memories SET deprecated = TRUE, merged_into = $2, dedup_verified = TRUE, \
                             dedup_last_error = NULL, updated_at = $3, change_seq = $4 WHERE id = $1",
                        )
                        .bind(id.get())
                        .bind(plan.survivor.get())
                        .bind(prepared.now)
                        .bind(version)
                        .execute(write.conn())
                        .await?;
                    }
                    // With the absorbed memories retired, only another live memory can
                    // hold the new text.
                    if let Some(hash) = &prepared.hash
                        && before.members[0].unique_content
                        && let Some(other) = find_exact_on(write.conn(), scope, hash).await?
                        && other != plan.survivor
                    {
                        return Err(Error::Conflict {
                            reason: format!(
                                "memory {}'s merged text equals live memory {other}'s in {scope}",
                                plan.survivor
                            ),
                        });
                    }
                    if let Some(vector) = &plan.vector {
                        check_model_dims(write.conn(), scope, vector, Some(plan.survivor)).await?;
                    }
                    let mut query = QueryBuilder::<Db>::new("UPDATE memories SET metadata = ");
                    query.push_bind(prepared.metadata_json.as_str()).push($json);
                    query.push(", helpful = ").push_bind(prepared.counters[0]);
                    query.push(", harmful = ").push_bind(prepared.counters[1]);
                    query.push(", occurrence_count = ").push_bind(prepared.counters[2]);
                    query.push(", dedup_verified = FALSE, dedup_last_error = NULL, updated_at = ");
                    query.push_bind(prepared.now);
                    query.push(", change_seq = ").push_bind(version);
                    if let (Some(content), Some(hash)) = (&plan.content, &prepared.hash) {
                        query.push(", content = ").push_bind(content.as_str());
                        query.push(", content_hash = ").push_bind(hash.as_str());
                    }
                    if plan.vector.is_some() {
                        query.push(", vector_pending = FALSE");
                    }
                    query.push(" WHERE id = ").push_bind(plan.survivor.get());
                    query.build().execute(write.conn()).await?;
                    if let Some(vector) = &plan.vector {
                        sqlx::query("DELETE FROM embeddings WHERE memory_id = $1")
                            .bind(plan.survivor.get())
                            .execute(write.conn())
                            .await?;
                        insert_vector_row(write.conn(), plan.survivor, vector).await?;
                    }
                    move_edges(write.conn(), plan.survivor, &plan.absorbed, &before.edges).await?;

                    let after_members = read_members(write.conn(), &ids).await?;
                    let after = LedgerState {
                        members: after_members.into_iter().flatten().collect(),
                        edges: read_edges(write.conn(), &ids).await?,
                    };
                    let final_text = after.members[0].content.clone();
                    let (text_source, text_from) = match plan.text_source {
                        crate::TextSource::Existing { from } => ("existing", Some(from.get())),
                        other => (other.as_str(), None),
                    };
                    let id: i64 = sqlx::query_scalar(concat!(
                        "INSERT INTO merge_log (run_id, survivor, absorbed_ids, canonical_text, confidence, reason, \
                         created_at, domain, namespace, final_text, text_source, text_from, judge, model, \
                         before_state, after_state) VALUES ($1, $2, $3",
                        $json,
                        ", $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15",
                        $json,
                        ", $16",
                        $json,
                        ") RETURNING id"
                    ))
                    .bind(&plan.run_id)
                    .bind(plan.survivor.get())
                    .bind(&prepared.absorbed_json)
                    .bind(plan.canonical_text.as_deref())
                    .bind(plan.confidence)
                    .bind(&plan.reason)
                    .bind(prepared.now)
                    .bind(scope.domain())
                    .bind(scope.namespace_name())
                    .bind(&final_text)
                    .bind(text_source)
                    .bind(text_from)
                    .bind(&plan.judge)
                    .bind(&plan.model)
                    .bind(before.to_json()?)
                    .bind(after.to_json()?)
                    .fetch_one(write.conn())
                    .await?;
                    write.commit().await?;
                    Ok(prepared.record(MergeId::new(id), final_text))
                }

                pub(in crate::store) async fn merges(&self, filter: &MergeFilter) -> Result<Vec<MergeRecord>> {
                    let mut query = QueryBuilder::<Db>::new(concat!(
                        "SELECT ",
                        merge_columns!(),
                        " FROM merge_log WHERE before_state IS NOT NULL"
                    ));
                    if let Some(domain) = &filter.domain {
                        query.push(" AND domain = ").push_bind(domain.as_str());
                    }
                    if let Some(namespace) = &filter.namespace {
                        query.push(" AND namespace = ").push_bind(namespace.as_str());
                    }
                    if let Some(run_id) = &filter.run_id {
                        query.push(" AND run_id = ").push_bind(run_id.as_str());
                    }
                    if !filter.include_undone {
                        query.push(" AND undone_at IS NULL");
                    }
                    query.push(" ORDER BY id");
                    let rows: Vec<MergeRow> = query.build_query_as().fetch_all(&self.pool).await?;
                    rows.into_iter().map(MergeRecord::try_from).collect()
                }

                pub(in crate::store) async fn merge(&self, id: MergeId) -> Result<Option<MergeRecord>> {
                    let row: Option<MergeRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        merge_columns!(),
                        " FROM merge_log WHERE id = $1 AND before_state IS NOT NULL"
                    ))
                    .bind(id.get())
                    .fetch_optional(&self.pool)
                    .await?;
                    row.map(MergeRecord::try_from).transpose()
                }

                pub(in crate::store) async fn undo_merge(&self, id: MergeId, block: bool) -> Result<UndoReport> {
                    let mut write = self.begin_write().await?;
                    // A merge's scope never changes: read it before taking the lock.
                    let scope: Option<(Option<String>, Option<String>)> =
                        sqlx::query_as("SELECT domain, namespace FROM merge_log WHERE id = $1")
                            .bind(id.get())
                            .fetch_optional(write.conn())
                            .await?;
                    let scope = match scope.ok_or(Error::MergeNotFound(id))? {
                        (Some(domain), Some(namespace)) => ledger_scope(id, &domain, &namespace)?,
                        _ => return Err(no_snapshot(id)),
                    };
                    lock_scope(write.conn(), &scope).await?;
                    let report = undo_one(write.conn(), id, block).await?;
                    write.commit().await?;
                    Ok(report)
                }

                pub(in crate::store) async fn undo_run(&self, run_id: &str, block: bool) -> Result<Vec<UndoReport>> {
                    let mut write = self.begin_write().await?;
                    let mut locked = BTreeSet::new();
                    loop {
                        let pending: Vec<(i64, String, String)> = sqlx::query_as(
                            "SELECT id, domain, namespace FROM merge_log WHERE run_id = $1 AND undone_at IS NULL \
                             AND before_state IS NOT NULL ORDER BY id DESC",
                        )
                        .bind(run_id)
                        .fetch_all(write.conn())
                        .await?;
                        let mut scopes = BTreeSet::new();
                        for (id, domain, namespace) in &pending {
                            scopes.insert(ledger_scope(MergeId::new(*id), domain, namespace)?);
                        }
                        let unlocked: Vec<Scope> = scopes.difference(&locked).cloned().collect();
                        if unlocked.is_empty() {
                            let mut reports = Vec::with_capacity(pending.len());
                            for (id, _, _) in pending {
                                reports.push(undo_one(write.conn(), MergeId::new(id), block).await?);
                            }
                            write.commit().await?;
                            return Ok(reports);
                        }
                        // In (domain, namespace) order, so two undos cannot wait for each
                        // other; then read the run again under the locks.
                        for scope in unlocked {
                            lock_scope(write.conn(), &scope).await?;
                            locked.insert(scope);
                        }
                    }
                }

                pub(in crate::store) async fn never_merge_pairs(
                    &self,
                    scope: &Scope,
                ) -> Result<HashSet<(MemoryId, MemoryId)>> {
                    let rows: Vec<(i64, i64)> = sqlx::query_as(
                        "SELECT low, high FROM never_merge WHERE domain = $1 AND namespace = $2 \
                             UNION SELECT low, high FROM review_queue \
                             WHERE domain = $1 AND namespace = $2 AND status = 'apart'",
                    )
                    .bind(scope.domain())
                    .bind(scope.namespace_name())
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows.into_iter().map(|(low, high)| (MemoryId::new(low), MemoryId::new(high))).collect())
                }

                pub(in crate::store) async fn clear_never_merge(&self, scope: &Scope) -> Result<u64> {
                    let mut write = self.begin_write().await?;
                    let done = sqlx::query("DELETE FROM never_merge WHERE domain = $1 AND namespace = $2")
                        .bind(scope.domain())
                        .bind(scope.namespace_name())
                        .execute(write.conn())
                        .await?;
                    write.commit().await?;
                    Ok(done.rows_affected())
                }
            }

            /// The scope a ledger row names.
            fn ledger_scope(id: MergeId, domain: &str, namespace: &str) -> Result<Scope> {
                Scope::new(domain, namespace)
                    .map_err(|e| Error::Corrupt { table: "merge_log", reason: format!("merge {id}: {e}") })
            }

            fn no_snapshot(merge: MergeId) -> Error {
                Error::UndoRefused {
                    merge,
                    reason: "it was logged before the merge ledger and has no snapshot to restore".to_owned(),
                }
            }

            /// Each of `ids` as it is now (row and vector row), `None` when missing.
            async fn read_members(conn: &mut Conn, ids: &[MemoryId]) -> Result<Vec<Option<MemberState>>> {
                let mut members = Vec::with_capacity(ids.len());
                for &id in ids {
                    let Some(memory) = select_memory(&mut *conn, id).await? else {
                        members.push(None);
                        continue;
                    };
                    let vector: Option<VectorState> = sqlx::query_as(
                        "SELECT model, CAST(dims AS BIGINT) AS dims, vector FROM embeddings WHERE memory_id = $1",
                    )
                    .bind(id.get())
                    .fetch_optional(&mut *conn)
                    .await?;
                    members.push(Some(MemberState::new(memory, vector)));
                }
                Ok(members)
            }

            /// Every edge touching one of `ids`.
            async fn read_edges(conn: &mut Conn, ids: &[MemoryId]) -> Result<BTreeSet<EdgeState>> {
                let mut query = QueryBuilder::<Db>::new("SELECT source, target, kind, created_at FROM edges WHERE ");
                for (i, column) in ["source", "target"].into_iter().enumerate() {
                    query.push(if i == 0 { "" } else { " OR " }).push(column).push(" IN (");
                    let mut list = query.separated(", ");
                    for id in ids {
                        list.push_bind(id.get());
                    }
                    query.push(")");
                }
                let rows: Vec<EdgeState> = query.build_query_as().fetch_all(&mut *conn).await?;
                Ok(rows.into_iter().collect())
            }

            /// Fails when an undo marked two of `ids` never to merge.
            async fn refuse_blocked_pairs(
                conn: &mut Conn,
                survivor: MemoryId,
                scope: &Scope,
                ids: &[MemoryId],
            ) -> Result<()> {
                let mut query = QueryBuilder::<Db>::new("SELECT low, high FROM never_merge WHERE domain = ");
                query.push_bind(scope.domain()).push(" AND namespace = ").push_bind(scope.namespace_name());
                for column in ["low", "high"] {
                    query.push(" AND ").push(column).push(" IN (");
                    let mut list = query.separated(", ");
                    for id in ids {
                        list.push_bind(id.get());
                    }
                    query.push(")");
                }
                query.push(" ORDER BY low, high LIMIT 1");
                let blocked: Option<(i64, i64)> = query.build_query_as().fetch_optional(&mut *conn).await?;
                match blocked {
                    Some((low, high)) => {
                        let (id, into) = if high == survivor.get() { (low, high) } else { (high, low) };
                        Err(Error::MergeBlocked { id: MemoryId::new(id), into: MemoryId::new(into) })
                    }
                    None => Ok(()),
                }
            }

            /// Moves the edges of the absorbed memories (among `edges`, every edge
            /// touching the group) to the survivor, keeping kind and creation time;
            /// self-loops and edges the survivor already has are dropped.
            async fn move_edges(
                conn: &mut Conn,
                survivor: MemoryId,
                absorbed: &[MemoryId],
                edges: &BTreeSet<EdgeState>,
            ) -> Result<()> {
                let absorbed: HashSet<i64> = absorbed.iter().map(|id| id.get()).collect();
                let mut moved: Vec<&EdgeState> =
                    edges.iter().filter(|e| absorbed.contains(&e.source) || absorbed.contains(&e.target)).collect();
                if moved.is_empty() {
                    return Ok(());
                }
                for edge in &moved {
                    sqlx::query("DELETE FROM edges WHERE source = $1 AND target = $2 AND kind = $3")
                        .bind(edge.source)
                        .bind(edge.target)
                        .bind(&edge.kind)
                        .execute(&mut *conn)
                        .await?;
                }
                // The oldest of edges that become one is kept.
                moved.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.cmp(b)));
                let map = |id: i64| if absorbed.contains(&id) { survivor.get() } else { id };
                for edge in moved {
                    let (source, target) = (map(edge.source), map(edge.target));
                    if source == target {
                        continue;
                    }
                    sqlx::query(
                        "INSERT INTO edges (source, target, kind, created_at) VALUES ($1, $2, $3, $4) \
                         ON CONFLICT (source, target, kind) DO NOTHING",
                    )
                    .bind(source)
                    .bind(target)
                    .bind(&edge.kind)
                    .bind(edge.created_at)
                    .execute(&mut *conn)
                    .await?;
                }
                Ok(())
            }

            /// Undoes merge `id` inside a write transaction holding its scope's lock.
            async fn undo_one(conn: &mut Conn, id: MergeId, block: bool) -> Result<UndoReport> {
                let row: Option<(
                    Option<String>,
                    Option<String>,
                    String,
                    Option<String>,
                    Option<String>,
                    Option<chrono::DateTime<chrono::Utc>>,
                )> = sqlx::query_as(
                    "SELECT domain, namespace, CAST(absorbed_ids AS TEXT), CAST(before_state AS TEXT), \
                     CAST(after_state AS TEXT), undone_at FROM merge_log WHERE id = $1",
                )
                .bind(id.get())
                .fetch_optional(&mut *conn)
                .await?;
                let (domain, namespace, absorbed, before, after, undone_at) = row.ok_or(Error::MergeNotFound(id))?;
                let (Some(domain), Some(namespace), Some(before), Some(after)) = (domain, namespace, before, after)
                else {
                    return Err(no_snapshot(id));
                };
                let refuse = |reason: String| Error::UndoRefused { merge: id, reason };
                if let Some(at) = undone_at {
                    return Err(refuse(format!("it was undone already, at {at}")));
                }
                let scope = ledger_scope(id, &domain, &namespace)?;
                let absorbed = absorbed_ids(id, &absorbed)?;
                let before = LedgerState::from_json(id, &before)?;
                let after = LedgerState::from_json(id, &after)?;
                let ids = after.ids();
                if before.ids() != ids || ids.get(1..) != Some(absorbed.as_slice()) {
                    return Err(Error::Corrupt {
                        table: "merge_log",
                        reason: format!("merge {id}: the member states do not name the merge's members"),
                    });
                }

                // A later merge that is still applied and touches a member goes first.
                let later: Vec<(i64, i64, String)> = sqlx::query_as(
                    "SELECT id, survivor, CAST(absorbed_ids AS TEXT) FROM merge_log WHERE domain = $1 \
                     AND namespace = $2 AND id > $3 AND undone_at IS NULL AND before_state IS NOT NULL \
                     ORDER BY id DESC",
                )
                .bind(scope.domain())
                .bind(scope.namespace_name())
                .bind(id.get())
                .fetch_all(&mut *conn)
                .await?;
                for (later_id, survivor, later_absorbed) in later {
                    let later_id = MergeId::new(later_id);
                    let mut touched = absorbed_ids(later_id, &later_absorbed)?;
                    touched.push(MemoryId::new(survivor));
                    if let Some(member) = touched.iter().find(|m| ids.contains(m)) {
                        return Err(refuse(format!(
                            "memory {member} was changed by merge {later_id} since: undo merge {later_id} first"
                        )));
                    }
                }

                let current = read_members(&mut *conn, &ids).await?;
                let edges = read_edges(&mut *conn, &ids).await?;
                if let Some(reason) = after.difference(id, &current, &edges)? {
                    return Err(refuse(reason));
                }
                for member in before.members.iter().filter(|m| m.holds_unique_text()) {
                    let hash = ContentHash::from_hex(&member.content_hash).ok_or_else(|| Error::Corrupt {
                        table: "merge_log",
                        reason: format!("merge {id}: memory {}'s content_hash is not 64 hex digits", member.id),
                    })?;
                    if let Some(other) = find_exact_on(&mut *conn, &scope, &hash).await?
                        && !ids.contains(&other)
                    {
                        return Err(refuse(format!(
                            "memory {}'s text is now held by live memory {other} of {scope}",
                            member.id
                        )));
                    }
                }

                // Restore: the survivor first, so that the absorbed memories' texts are
                // free when they become live again.
                let version = bump_version(&mut *conn, &scope).await?;
                for member in &before.members {
                    restore_member(&mut *conn, member, version).await?;
                }
                for column in ["source", "target"] {
                    let mut query = QueryBuilder::<Db>::new("DELETE FROM edges WHERE ");
                    query.push(column).push(" IN (");
                    let mut list = query.separated(", ");
                    for member in &ids {
                        list.push_bind(member.get());
                    }
                    query.push(")");
                    query.build().execute(&mut *conn).await?;
                }
                for edge in &before.edges {
                    sqlx::query("INSERT INTO edges (source, target, kind, created_at) VALUES ($1, $2, $3, $4)")
                        .bind(edge.source)
                        .bind(edge.target)
                        .bind(&edge.kind)
                        .bind(edge.created_at)
                        .execute(&mut *conn)
                        .await?;
                }
                let undone_at = now();
                sqlx::query("UPDATE merge_log SET undone_at = $2 WHERE id = $1")
                    .bind(id.get())
                    .bind(undone_at)
                    .execute(&mut *conn)
                    .await?;
                let blocked_pairs = if block { pairs_of(&ids) } else { Vec::new() };
                for (low, high) in &blocked_pairs {
                    sqlx::query(
                        "INSERT INTO never_merge (domain, namespace, low, high, merge_id, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (domain, namespace, low, high) DO NOTHING",
                    )
                    .bind(scope.domain())
                    .bind(scope.namespace_name())
                    .bind(low.get())
                    .bind(high.get())
                    .bind(id.get())
                    .bind(undone_at)
                    .execute(&mut *conn)
                    .await?;
                }
                Ok(UndoReport { merge: id, survivor: ids[0], restored: absorbed, blocked_pairs })
            }

            /// Writes `state` back: every column, `change_seq` set to `version` so that
            /// index refreshes read the row, and its vector row exactly.
            async fn restore_member(conn: &mut Conn, state: &MemberState, version: i64) -> Result<()> {
                let corrupt = |what: &str| Error::Corrupt {
                    table: "merge_log",
                    reason: format!("memory {}'s recorded {what} is out of range", state.id),
                };
                let counter = |value: u64, what: &str| i64::try_from(value).map_err(|_| corrupt(what));
                let metadata = serde_json::Value::Object(state.metadata.clone()).to_string();
                sqlx::query(concat!(
                    "UPDATE memories SET kind = $2, title = $3, content = $4, content_hash = $5, lifecycle = $6, \
                     helpful = $7, harmful = $8, occurrence_count = $9, dedup_verified = $10, \
                     dedup_attempts = $11, dedup_last_error = $12, deprecated = $13, merged_into = $14, \
                     metadata = $15",
                    $json,
                    ", unique_content = $16, embeds_title = $17, vector_pending = $18, created_at = $19, \
                     updated_at = $20, change_seq = $21 WHERE id = $1"
                ))
                .bind(state.id)
                .bind(&state.kind)
                .bind(state.title.as_deref())
                .bind(&state.content)
                .bind(&state.content_hash)
                .bind(&state.lifecycle)
                .bind(counter(state.helpful, "helpful")?)
                .bind(counter(state.harmful, "harmful")?)
                .bind(counter(state.occurrence_count, "occurrence_count")?)
                .bind(state.dedup_verified)
                .bind(i32::try_from(state.dedup_attempts).map_err(|_| corrupt("dedup_attempts"))?)
                .bind(state.dedup_last_error.as_deref())
                .bind(state.deprecated)
                .bind(state.merged_into)
                .bind(metadata)
                .bind(state.unique_content)
                .bind(state.embeds_title)
                .bind(state.vector_pending)
                .bind(state.created_at)
                .bind(state.updated_at)
                .bind(version)
                .execute(&mut *conn)
                .await?;
                sqlx::query("DELETE FROM embeddings WHERE memory_id = $1").bind(state.id).execute(&mut *conn).await?;
                if let Some(vector) = &state.vector {
                    sqlx::query("INSERT INTO embeddings (memory_id, model, dims, vector) VALUES ($1, $2, $3, $4)")
                        .bind(state.id)
                        .bind(&vector.model)
                        .bind(i32::try_from(vector.dims).map_err(|_| corrupt("vector dims"))?)
                        .bind(vector.vector.as_slice())
                        .execute(&mut *conn)
                        .await?;
                }
                Ok(())
            }
        }
    };
}
