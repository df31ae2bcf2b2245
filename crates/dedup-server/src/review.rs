//! The review queue over HTTP: `GET /v1/review` lists the pending pairs (or all, with
//! `all=true`) with both texts, and `POST /v1/review/{id}/decide` decides one: `merge`
//! (through the merge ledger, so `merge_undo` and `memdedup undo` restore it), `apart` or
//! `skip`. A token sees and decides only the pairs of its namespaces.

use axum::Extension;
use axum::extract::State;
use dedup_store::{Memory, MergeRecord, Review, ReviewDecision, ReviewFilter, ReviewId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{Body, Path, Query};
use crate::state::AppState;

/// Most entries one listing returns.
const MAX_LISTED: usize = 500;

/// `GET /v1/review` query.
#[derive(Debug, Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ReviewQuery {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Decided and expired entries too (default: pending only).
    pub all: Option<bool>,
    /// At most this many, lowest id first (1 to 500, default 50).
    pub limit: Option<usize>,
}

/// One memory of a pair, with its text.
#[derive(Debug, Serialize)]
pub struct PairMemory {
    id: i64,
    urn: String,
    /// Its text; null when it was deleted.
    text: Option<String>,
}

/// An entry of the queue with both texts.
#[derive(Debug, Serialize)]
pub struct ReviewView {
    #[serde(flatten)]
    review: Review,
    low_memory: PairMemory,
    high_memory: PairMemory,
}

async fn view(state: &AppState, review: Review) -> ApiResult<ReviewView> {
    let memory = |id: dedup_store::MemoryId, m: Option<Memory>| PairMemory {
        id: id.get(),
        urn: review.scope.urn(id),
        text: m.map(|m| m.content),
    };
    let low = memory(review.low, state.store().get(review.low).await?);
    let high = memory(review.high, state.store().get(review.high).await?);
    Ok(ReviewView { review, low_memory: low, high_memory: high })
}

/// The pairs a judge was unsure of, lowest id first, with both texts.
#[utoipa::path(get, path = "/v1/review", tag = "review", params(ReviewQuery),
    responses((status = 200, body = Object), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Query(query): Query<ReviewQuery>,
) -> ApiResult<axum::Json<Vec<ReviewView>>> {
    let limit = query.limit.unwrap_or(50);
    if !(1..=MAX_LISTED).contains(&limit) {
        return Err(ApiError::bad_request(format!("limit is {limit}: it must be 1 to {MAX_LISTED}")));
    }
    if let Some(namespace) = &query.namespace {
        dedup_store::Scope::new(&state.config().domain, namespace).map_err(|e| ApiError::bad_request(e.to_string()))?;
        principal.allow(namespace)?;
    }
    let filter = ReviewFilter {
        domain: Some(state.config().domain.clone()),
        namespace: query.namespace.clone(),
        all: query.all.unwrap_or(false),
        limit: 0,
    };
    let mut out = Vec::new();
    for review in state.store().reviews(&filter).await? {
        if principal.allow(review.scope.namespace_name()).is_err() {
            continue;
        }
        if out.len() == limit {
            break;
        }
        out.push(view(&state, review).await?);
    }
    Ok(axum::Json(out))
}

/// `POST /v1/review/{id}/decide` request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideRequest {
    /// `merge`, `apart` or `skip`.
    pub decision: String,
    /// With `merge`: the memory that stays (default: the older one, of lower id).
    pub survivor: Option<i64>,
}

/// The reply to a decision.
#[derive(Debug, Serialize)]
pub struct Decided {
    review: Review,
    /// The merge, for `merge` (undo it with `merge_undo` or `memdedup undo`).
    merge: Option<MergeRecord>,
}

/// Decides a pending pair. 404 for an unknown entry or one outside the token's
/// namespaces; 409 when it was decided already or a memory changed since (expired).
#[utoipa::path(post, path = "/v1/review/{id}/decide", tag = "review", request_body = DecideRequest,
    params(("id" = i64, Path, description = "A review entry id")),
    responses((status = 200, body = Object), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
pub(crate) async fn decide(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    Body(request): Body<DecideRequest>,
) -> ApiResult<axum::Json<Decided>> {
    let id: ReviewId =
        id.trim().parse().map_err(|_| ApiError::bad_request(format!("`{id}` is not a review entry id")))?;
    let store = state.store();
    // An entry outside the domain or the token's namespaces reads as missing.
    store
        .review(id)
        .await?
        .filter(|r| r.scope.domain() == state.config().domain && principal.allow(r.scope.namespace_name()).is_ok())
        .ok_or_else(|| ApiError::not_found(format!("no review entry with id {id}")))?;
    let (review, merge) = match request.decision.as_str() {
        "merge" => {
            let survivor = request.survivor.map(dedup_store::MemoryId::new);
            let reason = format!("decided in review {id}");
            let (review, record) = store.merge_review_keeping(id, survivor, 1.0, &reason, "review").await?;
            (review, Some(record))
        }
        "apart" => (store.decide_review(id, ReviewDecision::Apart).await?, None),
        "skip" => (store.decide_review(id, ReviewDecision::Skip).await?, None),
        other => {
            return Err(ApiError::bad_request(format!("decision {other:?} is not merge, apart or skip")));
        }
    };
    Ok(axum::Json(Decided { review, merge }))
}
