//! A memory's lifecycle over HTTP: `PATCH /v1/memory/{id}` (edit, refused with 409 when the
//! new text duplicates another memory), `DELETE /v1/memory/{id}` (forget),
//! `GET /v1/memory/{id}/history` and `POST /v1/memory/changes/{id}/undo`. They answer what
//! the MCP tools `memory_update`, `memory_delete`, `memory_history` and `memory_undo` do.

use axum::Extension;
use axum::extract::State;
use dedup_precompact::{EditOutcome, EditStatus, MemoryHistory};
use dedup_store::{ChangeId, Memory, parse_memory_ref};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{Body, Path};
use crate::memory::{check_content, failed, service};
use crate::state::AppState;

/// Who the history says made a change over HTTP.
const SOURCE: &str = "http";

/// `PATCH /v1/memory/{id}` request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryEditRequest {
    /// The new text.
    #[schema(example = "Rotate the API keys every 30 days")]
    pub content: String,
}

/// The memory `raw` (an id or a URN) names, if the caller may see it: one outside the
/// server's domain or the token's namespaces reads as missing, in the same words.
pub(crate) async fn visible_memory(state: &AppState, principal: &Principal, raw: &str) -> ApiResult<Memory> {
    let (id, urn_scope) = parse_memory_ref(raw.trim()).map_err(ApiError::bad_request)?;
    let not_found = || ApiError::not_found(format!("no memory with id {id}"));
    let memory = state
        .store()
        .get(id)
        .await?
        .filter(|m| m.scope.domain() == state.config().domain && principal.allow(m.scope.namespace_name()).is_ok())
        .ok_or_else(not_found)?;
    if urn_scope.is_some_and(|scope| scope != memory.scope) {
        return Err(not_found());
    }
    Ok(memory)
}

/// Replaces a live memory's text. 200 with the outcome (`status` `edited` or
/// `unchanged`, the memory, the `change` to undo); 409 when the new text duplicates
/// another memory of the namespace (the message names it) or the memory is not live.
#[utoipa::path(patch, path = "/v1/memory/{id}", tag = "memory", request_body = MemoryEditRequest,
    params(("id" = String, Path, description = "The memory's id or memdedup:// URN")),
    responses((status = 200, body = Object), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
pub(crate) async fn edit(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    Body(request): Body<MemoryEditRequest>,
) -> ApiResult<axum::Json<EditOutcome>> {
    check_content(&state, &request.content)?;
    let memory = visible_memory(&state, &principal, &id).await?;
    let service = service(&state)?;
    let outcome =
        service.edit(memory.id, &request.content, SOURCE).await.map_err(|e| failed("editing the memory", e))?;
    if let (EditStatus::Duplicate, Some(duplicate)) = (outcome.status, &outcome.duplicate) {
        return Err(ApiError::conflict(format!(
            "the new text duplicates memory {} ({}, cosine {:.2}){}; memory {} is unchanged",
            duplicate.id,
            duplicate.urn,
            duplicate.similarity,
            duplicate.reasons.first().map(|r| format!(": {r}")).unwrap_or_default(),
            memory.id
        )));
    }
    Ok(axum::Json(outcome))
}

/// The reply to `DELETE /v1/memory/{id}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ForgetReply {
    /// The memory forgotten.
    pub urn: String,
    /// The change that `POST /v1/memory/changes/{change}/undo` takes to bring it back.
    #[schema(value_type = i64)]
    pub change: ChangeId,
}

/// Forgets a live memory: no longer live, searched or listed; undone with the returned
/// change. 409 when it is not live (forgotten or merged already).
#[utoipa::path(delete, path = "/v1/memory/{id}", tag = "memory",
    params(("id" = String, Path, description = "The memory's id or memdedup:// URN")),
    responses((status = 200, body = ForgetReply), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(crate) async fn forget(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<ForgetReply>> {
    let memory = visible_memory(&state, &principal, &id).await?;
    let service = service(&state)?;
    let change = service.forget(memory.id, SOURCE).await.map_err(|e| failed("forgetting the memory", e))?;
    Ok(axum::Json(ForgetReply { urn: memory.urn(), change }))
}

/// A memory with its edits, deletions, restores and merges, oldest first.
#[utoipa::path(get, path = "/v1/memory/{id}/history", tag = "memory",
    params(("id" = String, Path, description = "The memory's id or memdedup:// URN")),
    responses((status = 200, body = Object), (status = 404, body = ErrorBody)))]
pub(crate) async fn history(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<MemoryHistory>> {
    let memory = visible_memory(&state, &principal, &id).await?;
    let service = service(&state)?;
    Ok(axum::Json(service.history(memory.id).await.map_err(|e| failed("reading the history", e))?))
}

/// The reply to `POST /v1/memory/changes/{change}/undo`.
#[derive(Debug, Serialize)]
pub struct UndoReply {
    /// The change undone.
    pub undone: ChangeId,
    /// The undo, recorded as a change of its own.
    pub change: ChangeId,
    /// The memory as it now is.
    pub memory: Memory,
}

/// Undoes an edit or a forget: 200 with the memory as it now is; 404 for an unknown
/// change (or one of a namespace the token may not use); 409 when the memory changed since.
#[utoipa::path(post, path = "/v1/memory/changes/{change}/undo", tag = "memory",
    params(("change" = i64, Path, description = "A change id from an edit, a forget or the history")),
    responses((status = 200, body = Object), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(crate) async fn undo(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(change): Path<String>,
) -> ApiResult<axum::Json<UndoReply>> {
    let id: ChangeId =
        change.trim().parse().map_err(|_| ApiError::bad_request(format!("`{change}` is not a change id")))?;
    let not_found = || ApiError::not_found(format!("no change with id {id} in the memory history"));
    let record = state
        .store()
        .change(id)
        .await?
        .filter(|c| c.scope.domain() == state.config().domain && principal.allow(c.scope.namespace_name()).is_ok())
        .ok_or_else(not_found)?;
    let service = service(&state)?;
    let (memory, undo) =
        service.undo_change(record.id, SOURCE).await.map_err(|e| failed(&format!("undoing change {id}"), e))?;
    Ok(axum::Json(UndoReply { undone: id, change: undo, memory }))
}
