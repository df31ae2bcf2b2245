//! `POST /v1/memory/check` and `POST /v1/memory/add`: the checker chain (exact, semantic,
//! recent capture) over plain HTTP, one request per call. They answer what the MCP tools
//! `memory_check` and `memory_add` answer, and are what the CLI's client mode asks.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use dedup_precompact::{AddOutcome, DeduplicationService};
use dedup_store::{NewMemory, Scope, Store};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::Body;
use crate::nodes::scope_in;
use crate::state::AppState;

/// `POST /v1/memory/check` request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryCheckRequest {
    /// The text of the memory about to be stored.
    #[schema(example = "Rotate the API keys every month")]
    pub content: String,
    /// The namespace compared with (default `default`).
    pub namespace: Option<String>,
    /// The domain (default: the server's `domain`).
    pub domain: Option<String>,
}

/// `POST /v1/memory/add` request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryAddRequest {
    /// The memory: one self-contained statement.
    #[schema(example = "Rotate the API keys every month")]
    pub content: String,
    /// The namespace it is stored in (default `default`).
    pub namespace: Option<String>,
    /// The domain (default: the server's `domain`).
    pub domain: Option<String>,
    /// What kind of memory it is (default `memory`): 1 to 64 of `A-Z a-z 0-9 _ - . :`.
    pub kind: Option<String>,
    /// A short title.
    pub title: Option<String>,
}

/// A verdict with the scope it was reached in and its one-line explanation: the
/// [`DuplicateCheckResult`] or [`AddOutcome`] fields, then `scope` and `explanation`.
#[derive(Serialize)]
struct Explained<'a, T> {
    #[serde(flatten)]
    value: &'a T,
    scope: &'a Scope,
    explanation: String,
}

/// Checks whether `content` duplicates a memory of the namespace, without storing it.
/// The body holds the check's fields (`is_duplicate`, `reason`, `matched_urn`,
/// `similarity_score`, `threshold`, `verdict`, `judge`, `reasons`, `nearest`, `degraded`,
/// …) plus `scope` and `explanation`, as the MCP tool `memory_check` gives them.
#[utoipa::path(post, path = "/v1/memory/check", tag = "memory", request_body = MemoryCheckRequest,
    responses((status = 200, body = Object), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 503, body = ErrorBody)))]
pub(crate) async fn check(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Body(request): Body<MemoryCheckRequest>,
) -> ApiResult<Response> {
    let scope = scope_in(&state, request.domain.as_deref(), request.namespace.as_deref(), &principal)?;
    check_content(&state, &request.content)?;
    let service = service(&state)?;
    let result =
        service.check_duplicate(&request.content, &scope).await.map_err(|e| failed("the duplicate check", e))?;
    let explanation = result.explanation_noting_failures(&scope);
    Ok(axum::Json(Explained { value: &result, scope: &scope, explanation }).into_response())
}

/// Checks a memory and stores it unless it duplicates one of its namespace: 201 when it
/// was stored, 200 when it was not (`stored` is null and `check` says what it duplicates).
/// The body holds the outcome's fields (`stored`, `urn`, `check`, `embedded`) plus
/// `scope` and `explanation`, as the MCP tool `memory_add` gives them.
#[utoipa::path(post, path = "/v1/memory/add", tag = "memory", request_body = MemoryAddRequest,
    responses((status = 201, body = Object), (status = 200, body = Object), (status = 400, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub(crate) async fn add(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Body(request): Body<MemoryAddRequest>,
) -> ApiResult<Response> {
    let scope = scope_in(&state, request.domain.as_deref(), request.namespace.as_deref(), &principal)?;
    check_content(&state, &request.content)?;
    let mut memory = NewMemory::new(scope.clone(), request.content);
    if let Some(kind) = request.kind {
        memory = memory.with_kind(kind);
    }
    if let Some(title) = request.title {
        memory = memory.with_title(title);
    }
    // Everything the store would refuse (a bad kind, a long title) is refused before anything runs.
    Store::validate_memory(&memory)?;
    let service = service(&state)?;
    let outcome: AddOutcome = service.add(memory).await.map_err(|e| failed("adding the memory", e))?;
    let status = if outcome.stored.is_some() { StatusCode::CREATED } else { StatusCode::OK };
    let explanation = outcome.explanation(&scope);
    Ok((status, axum::Json(Explained { value: &outcome, scope: &scope, explanation })).into_response())
}

/// 400 for blank content; the configured text limit and NUL as for nodes.
pub(crate) fn check_content(state: &AppState, content: &str) -> ApiResult<()> {
    if content.trim().is_empty() {
        return Err(ApiError::bad_request("content is empty"));
    }
    crate::nodes::check_text(state, "content", content)
}

pub(crate) fn service(state: &AppState) -> ApiResult<&DeduplicationService> {
    state.memory_service().ok_or_else(|| {
        ApiError::not_configured("this server was started without the memory checker chain (memdedup serve has it)")
    })
}

/// A failure of the chain: the store's own classification for a store error (400 for
/// input it refuses, 503 when it is unavailable), 400 for a text refused for its
/// credentials, 503 when the embedder or the
/// recent-capture cache is unavailable, 500 otherwise.
pub(crate) fn failed(doing: &str, error: dedup_precompact::Error) -> ApiError {
    use dedup_precompact::Error as E;
    match error {
        E::Store(error) => {
            let error = ApiError::from(error);
            if error.status().is_client_error() {
                error
            } else if error.status() == StatusCode::SERVICE_UNAVAILABLE {
                ApiError::unavailable(format!("{doing} failed: {}", error.message()))
            } else {
                ApiError::internal(format!("{doing} failed: {}", error.message()))
            }
        }
        error @ E::SecretRefused { .. } => ApiError::bad_request(format!("{doing} refused: {error}")),
        error if error.is_unavailable() => ApiError::unavailable(format!("{doing} failed: {error}")),
        error => ApiError::internal(format!("{doing} failed: {error}")),
    }
}
