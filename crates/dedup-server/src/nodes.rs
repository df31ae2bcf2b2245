//! Seed 001's nodes API: check-similar with tiers, create with the dedup gate, read,
//! list, update, delete, edges.

use std::time::Instant;

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use dedup_precompact::metrics as dedup_metrics;
use dedup_store::{InsertOutcome, Lifecycle, ListFilter, Memory, MemoryUpdate, NewMemory, StoredVector};
use serde_json::Value;

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{Body, Path, Query};
use crate::state::AppState;

mod support;
mod wire;

use support::*;
pub(crate) use support::{check_text, check_title, scope_in, scope_of};
pub use support::{duplicate_message, node_id, node_text};
pub use wire::*;

/// Compares new content with all live nodes of its subtype in its namespace.
#[utoipa::path(post, path = "/v1/nodes/check-similar", tag = "nodes", request_body = CheckSimilarRequest,
    responses((status = 200, body = CheckSimilarResponse), (status = 400, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub(crate) async fn check_similar(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Body(request): Body<CheckSimilarRequest>,
) -> ApiResult<axum::Json<CheckSimilarResponse>> {
    let (Some(content), Some(title), Some(subtype)) = (
        request.content.filter(|s| !s.trim().is_empty()),
        request.title.filter(|s| !s.trim().is_empty()),
        request.subtype.filter(|s| !s.trim().is_empty()),
    ) else {
        return Err(ApiError::bad_request(CHECK_SIMILAR_REQUIRED));
    };
    let limit = match request.limit {
        None => 5,
        Some(limit) if (1..=MAX_MATCHES as i64).contains(&limit) => limit as usize,
        Some(limit) => return Err(ApiError::bad_request(format!("limit {limit} is not in 1..={MAX_MATCHES}"))),
    };
    let scope = scope_of(&state, request.namespace.as_deref(), &principal)?;
    check_text(&state, "content", &content)?;
    check_title(&state, "title", &title)?;
    let subtype = canonical_subtype(&subtype)?;
    let started = Instant::now();
    let Some((model, embedding)) = state.embed(&node_text(&title, &content)).await else {
        dedup_metrics::check_failed("semantic");
        return Err(ApiError::unavailable("embedding generation failed: no embedder is configured"));
    };
    let embedding = embedding.map_err(|e| {
        dedup_metrics::check_failed("semantic");
        ApiError::unavailable(format!("embedding generation failed: {e}"))
    })?;
    // The local judge may drop gray-band candidates: look at more, keep `limit`.
    let k = if state.pair_judge().local_judge().is_some() { MAX_MATCHES } else { limit };
    let neighbours = search(&state, &scope, &subtype, &model, &embedding, k).await.map_err(|e| {
        dedup_metrics::check_failed("semantic");
        let e = ApiError::from(e);
        if e.status().is_client_error() {
            e
        } else {
            ApiError::unavailable(format!("similarity search failed: {}", e.message()))
        }
    })?;
    let mut matches = describe_matches(&state, &node_text(&title, &content), &neighbours).await?;
    matches.truncate(limit);
    let recommendation = recommend(&matches);
    record_check(&scope, &matches, started);
    let judge = judge_name(&state);
    Ok(axum::Json(CheckSimilarResponse { matches, recommendation, judge }))
}

/// `text` with credentials replaced by `[REDACTED:<kind>]` (nodes are always redacted).
fn redact(text: String) -> String {
    let (redacted, kinds) = dedup_core::redact_secrets(&text);
    if kinds.is_empty() {
        return text;
    }
    tracing::info!(redacted = kinds.len(), "credentials redacted from a node");
    redacted
}

/// Creates a node; for dedup-eligible subtypes the gate runs first.
#[utoipa::path(post, path = "/v1/nodes", tag = "nodes", request_body = CreateNodeRequest,
    responses((status = 201, description = "created", body = CreateNodeResponse),
              (status = 200, description = "a duplicate: not created", body = CreateNodeResponse),
              (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub(crate) async fn create_node(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Body(request): Body<CreateNodeRequest>,
) -> ApiResult<Response> {
    let (Some(node_type), Some(subtype), Some(title), Some(body)) = (
        request.node_type.filter(|s| !s.trim().is_empty()),
        request.subtype.filter(|s| !s.trim().is_empty()),
        request.content_title.filter(|s| !s.trim().is_empty()),
        request.content_body.filter(|s| !s.trim().is_empty()),
    ) else {
        return Err(ApiError::bad_request("type, subtype, content_title and content_body are required"));
    };
    let scope = scope_of(&state, request.namespace.as_deref(), &principal)?;
    check_title(&state, "content_title", &title)?;
    check_text(&state, "content_body", &body)?;
    let subtype = canonical_subtype(&subtype)?;
    // Credentials never reach the store (docs/SECRETS.md).
    let (title, body) = (redact(title), redact(body));
    let mut metadata = request.extra;
    metadata.insert(TYPE_KEY.to_owned(), Value::String(node_type));
    let mut memory =
        NewMemory::new(scope.clone(), body).with_kind(subtype.clone()).with_title(title.clone()).embed_title();
    memory = memory.with_metadata(metadata);

    let eligible = state.config().nodes.is_dedup_eligible(&subtype);
    // Nodes are judged by the similarity of title and body within their subtype only: an
    // equal body under another title or subtype is not an exact duplicate. An exact
    // repeat scores 1.0 in the gate, which runs again under the namespace's lock.
    memory = memory.allow_repeats();
    let started = Instant::now();
    // Embed once: the vector that is checked is the vector stored.
    let mut skipped = None;
    let embedding = match state.embed(&node_text(&title, &memory.content)).await {
        None => {
            skipped = Some("no embedder is configured".to_owned());
            None
        }
        Some((model, Ok(embedding))) => Some((model, embedding)),
        Some((_, Err(e))) => {
            skipped = Some(format!("embedding generation failed: {e}"));
            None
        }
    };
    let embedding_failed = embedding.is_none();
    let mut matches = Vec::new();
    let judge = state.pair_judge().clone();
    let new_text = node_text(&title, &memory.content);
    let duplicate_threshold = state.config().nodes.duplicate_threshold;
    // The local judge's verdict on the closest node it kept apart: the store's check
    // under the lock starts just above it.
    let mut lock_threshold = judge.floor(duplicate_threshold);
    let mut judged_duplicate = None;
    if let (true, Some((model, embedding))) = (eligible, &embedding) {
        match search(&state, &scope, &subtype, model, embedding, 5).await {
            Ok(neighbours) => {
                matches = describe_matches(&state, &new_text, &neighbours).await?;
                if judge.local_judge().is_some() {
                    judged_duplicate = matches.iter().find(|m| m.action == Action::Duplicate).and_then(|m| {
                        let n = neighbours.iter().find(|n| node_id(n.id) == m.node_id)?;
                        Some((n.id, n.score, m.reasons.clone()))
                    });
                    if let Some(top) = neighbours.first().filter(|_| judged_duplicate.is_none()) {
                        lock_threshold = lock_threshold.max(top.score.next_up());
                    }
                }
            }
            Err(e) if !e.is_unavailable() => {
                skipped = Some(format!("similarity search failed: {e}"));
            }
            Err(e) => return Err(e.into()),
        }
    }
    if eligible && skipped.is_some() {
        dedup_metrics::check_failed("semantic");
        tracing::warn!(reason = skipped.as_deref().unwrap_or_default(), "dedup check skipped, creating normally");
    }
    // A search that failed for this vector (say, other dimensions) would fail the insert
    // too: store the node without it.
    let gate_ok = skipped.is_none();
    let vector = embedding.filter(|_| gate_ok || !eligible).map(|(model, embedding)| StoredVector { model, embedding });
    let mut threshold = (eligible && gate_ok).then_some(lock_threshold);
    // No vector because the embedder is missing or failed: a backfill adds it later.
    let embedder_down = embedding_failed;
    let memory = if embedder_down { memory.vector_pending() } else { memory };
    let embedded = vector.is_some();
    let mut duplicate_reasons = Vec::new();
    let outcome = match judged_duplicate {
        Some((id, score, reasons)) => {
            duplicate_reasons = reasons;
            InsertOutcome::SemanticDuplicate { id, score }
        }
        None => {
            let mut retries = 0;
            loop {
                let outcome = state
                    .store()
                    .insert_checked_filtered(memory.clone(), vector.clone(), threshold, &filter(&state, &subtype))
                    .await?;
                let InsertOutcome::SemanticDuplicate { id, score } = outcome else { break outcome };
                if judge.local_judge().is_none() {
                    break outcome;
                }
                // A node the judge has not seen raced in: judge it like the search's.
                if let Some(existing) = state.store().get(id).await? {
                    let existing_text = node_text(existing.title.as_deref().unwrap_or_default(), &existing.content);
                    let judgement = judge.judge_pair(&new_text, &existing_text, score, duplicate_threshold);
                    if judgement.is_duplicate() {
                        duplicate_reasons = judgement.reasons;
                        break outcome;
                    }
                }
                retries += 1;
                threshold = (retries < LOCK_RETRIES).then(|| score.next_up());
            }
        }
    };
    if embedded && matches!(outcome, InsertOutcome::Inserted(_)) {
        backfill_in_background(&state, &scope);
    }

    let dedup = |recommendation, matches, linked| DedupReport {
        status: if !eligible {
            "not_eligible"
        } else if gate_ok {
            "checked"
        } else {
            "skipped"
        },
        reason: skipped.clone().filter(|_| eligible),
        recommendation: (eligible && gate_ok).then_some(recommendation),
        matches,
        linked,
        judge: judge_name(&state),
    };
    match outcome {
        InsertOutcome::Inserted(id) => {
            let mut linked = Vec::new();
            let connect: Vec<&SimilarMatch> = matches.iter().filter(|m| m.action == Action::Connect).collect();
            for target in connect {
                let target_id = parse_node_id(&target.node_id)?;
                match state.store().add_edge(id, target_id, "relates_to").await {
                    Ok(_) => linked.push(target.node_id.clone()),
                    // The target was deleted meanwhile: nothing to link.
                    Err(dedup_store::Error::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            if eligible && gate_ok {
                record_check(&scope, &matches, started);
            }
            if !eligible {
                // A subtype outside `dedup_subtypes` is distinct by definition: assisted
                // dedup does not queue it.
                if let Some(stored) = state.store().get(id).await? {
                    state.store().mark_verified(&[(id, stored.content_hash)]).await?;
                }
            }
            let node = load_node(&state, id).await?;
            let recommendation = recommend(&matches);
            let response = CreateNodeResponse {
                created: true,
                node,
                duplicate_of: None,
                message: None,
                dedup: dedup(recommendation, matches, linked),
            };
            Ok((StatusCode::CREATED, axum::Json(response)).into_response())
        }
        InsertOutcome::ExactDuplicate(id) | InsertOutcome::SemanticDuplicate { id, .. } => {
            let score = match outcome {
                InsertOutcome::SemanticDuplicate { score, .. } => score,
                _ => 1.0,
            };
            let existing = state.store().get(id).await?.ok_or_else(|| ApiError::internal("duplicate vanished"))?;
            let duplicate = SimilarMatch {
                node_id: node_id(id),
                title: existing.title.clone().unwrap_or_default(),
                similarity: round4(score),
                action: Action::Duplicate,
                lifecycle: existing.lifecycle.as_str().to_owned(),
                reasons: match (judge.local_judge(), duplicate_reasons.is_empty(), &outcome) {
                    (None, _, _) => Vec::new(),
                    (Some(_), false, _) => duplicate_reasons,
                    (Some(_), true, InsertOutcome::ExactDuplicate(_)) => vec!["the same title and body".to_owned()],
                    (Some(_), true, _) => {
                        let existing_text = node_text(existing.title.as_deref().unwrap_or_default(), &existing.content);
                        judge.judge_pair(&new_text, &existing_text, score, duplicate_threshold).reasons
                    }
                },
            };
            state.store().note_occurrence(id).await?;
            let reason = if matches!(outcome, InsertOutcome::ExactDuplicate(_)) { "exact" } else { "semantic" };
            state.store().record_skip(&scope, reason).await?;
            dedup_metrics::skipped(scope.namespace_name(), reason);
            dedup_metrics::similarity(scope.namespace_name(), score);
            dedup_metrics::check_completed(scope.namespace_name(), true);
            dedup_metrics::check_duration("total", started.elapsed().as_secs_f64() * 1e3);
            tracing::info!(node = %node_id(id), reason, score, "duplicate node not created");
            let message = duplicate_message(&duplicate);
            if !matches.iter().any(|m| m.node_id == duplicate.node_id) {
                matches.insert(0, duplicate.clone());
            }
            let node = load_node(&state, id).await?;
            let response = CreateNodeResponse {
                created: false,
                node,
                duplicate_of: Some(duplicate),
                message: Some(message),
                dedup: dedup(Recommendation::DuplicateFound, matches, Vec::new()),
            };
            Ok((StatusCode::OK, axum::Json(response)).into_response())
        }
    }
}

/// One node. A node that a merge absorbed is 404 with `merged_into` naming the node
/// that absorbed it (when that one is visible): `{"error": "node n_5 was merged into
/// n_3", "code": "not_found", "merged_into": "n_3"}`.
#[utoipa::path(get, path = "/v1/nodes/{id}", tag = "nodes", params(("id" = String, Path, description = "n_<number>")),
    responses((status = 200, body = NodeView),
              (status = 404, body = ErrorBody, description = "no such node; `merged_into` is set when a merge absorbed it")))]
pub(crate) async fn get_node(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<NodeView>> {
    let memory = find_node(&state, &principal, &id).await?;
    Ok(axum::Json(node_view(memory)))
}

/// Nodes, filtered and paged.
#[utoipa::path(get, path = "/v1/nodes", tag = "nodes", params(ListNodesQuery),
    responses((status = 200, body = NodeList), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub(crate) async fn list_nodes(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Query(query): Query<ListNodesQuery>,
) -> ApiResult<axum::Json<NodeList>> {
    if principal.is_limited() && query.namespace.is_none() {
        return Err(ApiError::forbidden("this token is limited to some namespaces: pass ?namespace="));
    }
    if let Some(namespace) = &query.namespace {
        scope_of(&state, Some(namespace), &principal)?;
    }
    let lifecycle =
        query.lifecycle.as_deref().map(str::parse::<Lifecycle>).transpose().map_err(ApiError::bad_request)?;
    let limit = match query.limit {
        None => DEFAULT_PAGE,
        Some(limit) if (1..=MAX_PAGE).contains(&limit) => limit,
        Some(limit) => return Err(ApiError::bad_request(format!("limit {limit} is not in 1..={MAX_PAGE}"))),
    };
    let after = query.after.as_deref().map(parse_node_id).transpose()?;
    let kind = query.subtype.as_deref().map(canonical_subtype).transpose()?;
    let filter = ListFilter {
        domain: Some(state.config().domain.clone()),
        namespace: query.namespace,
        kind,
        lifecycle,
        include_deprecated: false,
        after,
        limit: limit + 1,
        ..ListFilter::default()
    };
    let mut memories = state.store().list(&filter).await?;
    let more = memories.len() > limit;
    memories.truncate(limit);
    let next_after = more.then(|| memories.last().map(|m| node_id(m.id))).flatten();
    Ok(axum::Json(NodeList { data: memories.into_iter().map(node_view).collect(), next_after }))
}

/// Changes a node: a new title or body re-embeds it; a lifecycle change can reactivate a
/// DORMANT duplicate. For dedup-eligible subtypes, a new title or body that would
/// duplicate another live node of the subtype in the namespace is refused with 409 and
/// nothing changes.
#[utoipa::path(patch, path = "/v1/nodes/{id}", tag = "nodes", params(("id" = String, Path, description = "n_<number>")),
    request_body = UpdateNodeRequest,
    responses((status = 200, body = NodeView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, description = "the edit would duplicate another node, named in the error", body = ErrorBody)))]
pub(crate) async fn update_node(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    Body(request): Body<UpdateNodeRequest>,
) -> ApiResult<axum::Json<NodeView>> {
    if request.content_title.is_none()
        && request.content_body.is_none()
        && request.state_lifecycle.is_none()
        && request.metadata.is_none()
    {
        return Err(ApiError::bad_request(
            "nothing to update: give content_title, content_body, state_lifecycle or metadata",
        ));
    }
    let current = find_node(&state, &principal, &id).await?;
    let mut request = request;
    request.content_title = request.content_title.map(redact);
    request.content_body = request.content_body.map(redact);
    for (what, text) in [("content_title", &request.content_title), ("content_body", &request.content_body)] {
        if let Some(text) = text {
            if text.trim().is_empty() {
                return Err(ApiError::bad_request(format!("{what} must not be empty")));
            }
            if what == "content_title" {
                check_title(&state, what, text)?;
            } else {
                check_text(&state, what, text)?;
            }
        }
    }
    let lifecycle =
        request.state_lifecycle.as_deref().map(str::parse::<Lifecycle>).transpose().map_err(ApiError::bad_request)?;
    let metadata = request.metadata.map(|changes| {
        let mut metadata = current.metadata.clone();
        for (key, value) in changes {
            if key == TYPE_KEY {
                continue;
            }
            if value.is_null() {
                metadata.remove(&key);
            } else {
                metadata.insert(key, value);
            }
        }
        metadata
    });
    let retext = request.content_title.is_some() || request.content_body.is_some();
    let title = request.content_title.as_deref().or(current.title.as_deref()).unwrap_or_default();
    let body = request.content_body.as_deref().unwrap_or(&current.content);
    let mut vector = None;
    if retext && let Some((model, result)) = state.embed(&node_text(title, body)).await {
        match result {
            Ok(embedding) => vector = Some(StoredVector { model, embedding }),
            Err(e) => tracing::warn!(error = %e, "re-embedding failed; the node keeps no vector until updated"),
        }
    }
    // The check and the write under one lock: two edits of this process cannot both pass
    // the check with the same text.
    let _edit = if retext { Some(state.node_edits().lock().await) } else { None };
    if retext {
        vector = refuse_duplicate_edit(&state, &current, vector).await?;
    }
    let update = MemoryUpdate {
        // Always pass the text when it changes, so a failed re-embedding drops the stale vector.
        content: retext.then(|| body.to_owned()),
        title: request.content_title.clone().map(Some),
        lifecycle,
        metadata,
        // The store repeats the exact check under the scope's lock, for edits racing in
        // other processes on the same database.
        unique_in_kind: retext && state.config().nodes.is_dedup_eligible(&current.kind),
    };
    match state.store().update(current.id, update, vector).await {
        Ok(memory) => Ok(axum::Json(node_view(memory))),
        Err(dedup_store::Error::DuplicateEdit { existing, .. }) => {
            let twin = state.store().get(existing).await?.ok_or_else(|| ApiError::internal("duplicate vanished"))?;
            Err(duplicate_edit(&current, &twin, 1.0))
        }
        Err(error) => Err(error.into()),
    }
}

/// For a dedup-eligible node, 409 naming the other node when the edited title and body
/// would be at or above the duplicate threshold with a live node of the same subtype and
/// namespace by the new vector. (An equal title and body is refused by the store itself,
/// under the scope's lock: `MemoryUpdate::unique_in_kind`.) Returns the vector to store
/// (none when the semantic check could not compare it, as `POST` does).
async fn refuse_duplicate_edit(
    state: &AppState,
    node: &Memory,
    vector: Option<StoredVector>,
) -> ApiResult<Option<StoredVector>> {
    if !state.config().nodes.is_dedup_eligible(&node.kind) {
        return Ok(vector);
    }
    let Some(stored) = vector else { return Ok(None) };
    let duplicate = state.config().nodes.duplicate_threshold;
    match search(state, &node.scope, &node.kind, &stored.model, &stored.embedding, 2).await {
        Ok(neighbours) => {
            let best = neighbours.into_iter().find(|n| n.id != node.id && n.score >= duplicate);
            if let Some(best) = best
                && let Some(twin) = state.store().get(best.id).await?
            {
                return Err(duplicate_edit(node, &twin, best.score));
            }
            Ok(Some(stored))
        }
        Err(e) if e.is_unavailable() => Err(e.into()),
        Err(e) => {
            dedup_metrics::check_failed("semantic");
            tracing::warn!(error = %e, "similarity check of an edit skipped; the node keeps no vector until updated");
            Ok(None)
        }
    }
}

/// The 409 of an edit that would duplicate `twin`.
fn duplicate_edit(node: &Memory, twin: &Memory, score: f32) -> ApiError {
    // Truncation, as the seed's int(similarity * 100).
    #[allow(clippy::cast_possible_truncation)]
    let percent = (round4(score) * 100.0).floor() as i64;
    ApiError::conflict(format!(
        "Duplicate: {} would duplicate \"{}\" ({}, {}, {percent}% similar). Not changed",
        node_id(node.id),
        twin.title.as_deref().unwrap_or("Untitled"),
        node_id(twin.id),
        twin.lifecycle.as_str(),
    ))
}

/// Deletes a node, its vector and its edges.
#[utoipa::path(delete, path = "/v1/nodes/{id}", tag = "nodes", params(("id" = String, Path, description = "n_<number>")),
    responses((status = 204, description = "deleted"), (status = 404, body = ErrorBody)))]
pub(crate) async fn delete_node(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let node = find_node(&state, &principal, &id).await?;
    if state.store().delete(node.id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("no node {id}")))
    }
}

/// Links two nodes.
#[utoipa::path(post, path = "/v1/edges", tag = "nodes", request_body = CreateEdgeRequest,
    responses((status = 201, body = CreateEdgeResponse), (status = 200, description = "existed", body = CreateEdgeResponse),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn create_edge(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Body(request): Body<CreateEdgeRequest>,
) -> ApiResult<Response> {
    let (Some(source), Some(target)) = (request.source_id, request.target_id) else {
        return Err(ApiError::bad_request("source_id and target_id are required"));
    };
    let edge_type = request.edge_type.unwrap_or_else(|| "relates_to".to_owned());
    let source = find_node(&state, &principal, &source).await?;
    let target = find_node(&state, &principal, &target).await?;
    if source.id == target.id {
        return Err(ApiError::bad_request("an edge needs two different nodes"));
    }
    let created = state.store().add_edge(source.id, target.id, &edge_type).await?;
    let edge = state
        .store()
        .edges_of(source.id)
        .await?
        .into_iter()
        .find(|e| e.source == source.id && e.target == target.id && e.kind == edge_type)
        .ok_or_else(|| ApiError::internal("edge vanished after insert"))?;
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, axum::Json(CreateEdgeResponse { created, edge: edge_view(edge) })).into_response())
}

/// The edges of a node.
#[utoipa::path(get, path = "/v1/nodes/{id}/edges", tag = "nodes", params(("id" = String, Path, description = "n_<number>")),
    responses((status = 200, body = EdgeList), (status = 404, body = ErrorBody)))]
pub(crate) async fn node_edges(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<EdgeList>> {
    let node = find_node(&state, &principal, &id).await?;
    let edges = state.store().edges_of(node.id).await?;
    Ok(axum::Json(EdgeList { data: edges.into_iter().map(edge_view).collect() }))
}

#[cfg(test)]
mod tests {
    use dedup_store::MemoryId;

    use super::*;

    #[test]
    fn node_text_joins_title_and_body() {
        assert_eq!(node_text("Never trade weekends", "Low volume"), "Never trade weekends. Low volume");
        assert_eq!(node_text("Why?", "Because"), "Why? Because");
        assert_eq!(node_text("  ", "Body only"), "Body only");
    }

    #[test]
    fn duplicate_message_matches_the_seed() {
        let mut duplicate = SimilarMatch {
            node_id: "n_7".to_owned(),
            title: "Avoid weekend trading".to_owned(),
            similarity: 0.9712,
            action: Action::Duplicate,
            lifecycle: "ACTIVE".to_owned(),
            reasons: Vec::new(),
        };
        assert_eq!(
            duplicate_message(&duplicate),
            "Duplicate: already stored as \"Avoid weekend trading\" (n_7). Not created. (97% similar)"
        );
        duplicate.lifecycle = "DORMANT".to_owned();
        let message = duplicate_message(&duplicate);
        assert!(message.contains("(n_7) [DORMANT]. Use PATCH /v1/nodes/n_7"), "{message}");
    }

    #[test]
    fn node_ids_parse_with_or_without_prefix() {
        assert_eq!(parse_node_id("n_42").unwrap(), MemoryId::new(42));
        assert_eq!(parse_node_id("42").unwrap(), MemoryId::new(42));
        for bad in ["n_", "n_x", "-3", "0", "n_abc123"] {
            assert_eq!(parse_node_id(bad).unwrap_err().status(), StatusCode::BAD_REQUEST, "{bad}");
        }
    }

    #[test]
    fn rounding_and_recommendation() {
        assert_eq!(round4(0.971_249), 0.9712);
        assert_eq!(recommend(&[]), Recommendation::Unique);
    }
}
