//! Seed 002's fact memory over HTTP: facts, the profile summaries, the prompt context
//! (fact extraction is in `fact_extraction.rs`).

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use dedup_core::{FactCategory, FactPolicy, MemoryProfile};
use dedup_store::{Fact, FactOutcome, FactUpdate, NewFact, Scope};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{Body, Path, Query};
use crate::nodes::{check_text, scope_of};
use crate::state::AppState;

/// Largest `max_tokens` of the context.
const MAX_CONTEXT_TOKENS: usize = 1_000_000;

/// A fact as the API shows it (seed 002's member names).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FactJson {
    /// `fact_` and 8 hex digits.
    #[schema(example = "fact_1a2b3c4d")]
    pub id: String,
    /// The text.
    pub content: String,
    /// preference, knowledge, context, behavior, goal or correction.
    #[schema(example = "preference")]
    pub category: String,
    /// In [0, 1].
    pub confidence: f64,
    /// Where it came from, if recorded.
    pub source: Option<String>,
    /// Its namespace.
    pub namespace: String,
    /// When it was stored (ISO-8601 UTC); never changes.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

impl From<Fact> for FactJson {
    fn from(fact: Fact) -> FactJson {
        FactJson {
            id: fact.id,
            content: fact.content,
            category: fact.category.as_str().to_owned(),
            confidence: fact.confidence,
            source: fact.source,
            namespace: fact.scope.namespace_name().to_owned(),
            created_at: fact.created_at,
            updated_at: fact.updated_at,
        }
    }
}

/// `POST /v1/facts` request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateFactRequest {
    /// The text.
    #[schema(example = "Prefers concise answers")]
    pub content: String,
    /// One of the six categories.
    #[schema(example = "preference")]
    pub category: String,
    /// In [0, 1]; below the threshold (default 0.5) the fact is skipped.
    #[schema(example = 0.9)]
    pub confidence: f64,
    /// Where it came from.
    pub source: Option<String>,
    /// The namespace (default `default`).
    pub namespace: Option<String>,
}

/// `POST /v1/facts` response: 201 with the fact, or 200 when skipped.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CreateFactResponse {
    /// `added`, `duplicate` or `low_confidence`.
    #[schema(example = "added")]
    pub outcome: &'static str,
    /// The fact added, or the existing fact it duplicates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fact: Option<FactJson>,
    /// Facts evicted to stay within `max_facts`.
    pub evicted: Vec<FactJson>,
    /// Why it was skipped, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `GET /v1/facts` and the profile/context routes: which namespace.
#[derive(Debug, Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct NamespaceQuery {
    /// The namespace (default `default`).
    pub namespace: Option<String>,
}

/// `GET /v1/facts` response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FactList {
    /// Highest confidence first.
    pub facts: Vec<FactJson>,
}

/// `PATCH /v1/facts/{id}` request: only the given fields change.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateFactRequest {
    /// New text.
    pub content: Option<String>,
    /// New category.
    pub category: Option<String>,
    /// New confidence in [0, 1].
    pub confidence: Option<f64>,
}

/// `GET /v1/memory/context` query.
#[derive(Debug, Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ContextQuery {
    /// The namespace (default `default`).
    pub namespace: Option<String>,
    /// Token budget (default 2000), counted with the cl100k_base BPE.
    pub max_tokens: Option<usize>,
}

/// `GET /v1/memory/context` response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ContextResponse {
    /// The text to inject into a system prompt.
    pub context: String,
    /// Its cost in tokens.
    pub tokens: usize,
    /// The budget it was fitted to.
    pub max_tokens: usize,
}

/// Adds a fact: skipped below the confidence threshold or as a casefolded duplicate; the
/// lowest-confidence fact is evicted when the namespace is full.
#[utoipa::path(post, path = "/v1/facts", tag = "facts", request_body = CreateFactRequest,
    responses((status = 201, body = CreateFactResponse), (status = 200, description = "skipped", body = CreateFactResponse),
              (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub(crate) async fn create_fact(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Body(request): Body<CreateFactRequest>,
) -> ApiResult<Response> {
    let scope = scope_of(&state, request.namespace.as_deref(), &principal)?;
    check_text(&state, "content", &request.content)?;
    let category = parse_category(&request.category)?;
    let mut fact = NewFact::new(scope, request.content, category, request.confidence);
    if let Some(source) = request.source {
        fact = fact.with_source(source);
    }
    let outcome = state.store().add_fact(fact, &policy(&state)?).await?;
    let (status, response) = match outcome {
        FactOutcome::Added { fact, evicted } => (
            StatusCode::CREATED,
            CreateFactResponse {
                outcome: "added",
                fact: Some(fact.into()),
                evicted: evicted.into_iter().map(FactJson::from).collect(),
                message: None,
            },
        ),
        FactOutcome::Duplicate { existing } => (
            StatusCode::OK,
            CreateFactResponse {
                outcome: "duplicate",
                message: Some(format!("skipped: the same fact is stored as {}", existing.id)),
                fact: Some(existing.into()),
                evicted: Vec::new(),
            },
        ),
        FactOutcome::Outranked { confidence, lowest_kept, max_facts } => (
            StatusCode::OK,
            CreateFactResponse {
                outcome: "outranked",
                fact: None,
                evicted: Vec::new(),
                message: Some(format!(
                    "skipped: the namespace holds {max_facts} facts, and keeping this one (confidence \
                     {confidence}) would evict one of confidence {lowest_kept}"
                )),
            },
        ),
        FactOutcome::LowConfidence { confidence, threshold } => (
            StatusCode::OK,
            CreateFactResponse {
                outcome: "low_confidence",
                fact: None,
                evicted: Vec::new(),
                message: Some(format!("skipped: confidence {confidence} is below the threshold {threshold}")),
            },
        ),
        #[allow(unreachable_patterns)]
        _ => return Err(ApiError::internal("unknown fact outcome")),
    };
    Ok((status, axum::Json(response)).into_response())
}

/// The facts of a namespace, highest confidence first.
#[utoipa::path(get, path = "/v1/facts", tag = "facts", params(NamespaceQuery),
    responses((status = 200, body = FactList), (status = 403, body = ErrorBody)))]
pub(crate) async fn list_facts(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Query(query): Query<NamespaceQuery>,
) -> ApiResult<axum::Json<FactList>> {
    let scope = scope_of(&state, query.namespace.as_deref(), &principal)?;
    let facts = state.store().list_facts(&scope).await?;
    Ok(axum::Json(FactList { facts: facts.into_iter().map(FactJson::from).collect() }))
}

/// Changes only the given fields of a fact; `createdAt` never changes.
#[utoipa::path(patch, path = "/v1/facts/{id}", tag = "facts", params(("id" = String, Path, description = "fact_<8 hex>")),
    request_body = UpdateFactRequest,
    responses((status = 200, body = FactJson), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
pub(crate) async fn update_fact(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    Body(request): Body<UpdateFactRequest>,
) -> ApiResult<axum::Json<FactJson>> {
    find_fact(&state, &principal, &id).await?;
    if let Some(content) = &request.content {
        check_text(&state, "content", content)?;
    }
    let update = FactUpdate {
        content: request.content,
        category: request.category.as_deref().map(parse_category).transpose()?,
        confidence: request.confidence,
    };
    if update.is_empty() {
        return Err(ApiError::bad_request("nothing to update: give content, category or confidence"));
    }
    let fact = state.store().update_fact(&id, update).await?;
    Ok(axum::Json(fact.into()))
}

/// Deletes a fact.
#[utoipa::path(delete, path = "/v1/facts/{id}", tag = "facts", params(("id" = String, Path, description = "fact_<8 hex>")),
    responses((status = 204, description = "deleted"), (status = 404, body = ErrorBody)))]
pub(crate) async fn delete_fact(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    find_fact(&state, &principal, &id).await?;
    state.store().delete_fact(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The user context and history summaries of a namespace.
#[utoipa::path(get, path = "/v1/memory/profile", tag = "facts", params(NamespaceQuery),
    responses((status = 200, body = Object), (status = 403, body = ErrorBody)))]
pub(crate) async fn get_profile(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Query(query): Query<NamespaceQuery>,
) -> ApiResult<axum::Json<MemoryProfile>> {
    let scope = scope_of(&state, query.namespace.as_deref(), &principal)?;
    Ok(axum::Json(state.store().profile(&scope).await?))
}

/// Replaces the user context and history summaries of a namespace. A member the profile
/// does not have is refused with 400 naming it, as in every other body.
#[utoipa::path(put, path = "/v1/memory/profile", tag = "facts", params(NamespaceQuery),
    request_body(content = Object, description = "{user: {workContext, personalContext, topOfMind}, history: {recentMonths, earlierContext, longTermBackground}}, each {summary, updatedAt}"),
    responses((status = 200, body = Object), (status = 400, body = ErrorBody)))]
pub(crate) async fn put_profile(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Query(query): Query<NamespaceQuery>,
    Body(profile): Body<Value>,
) -> ApiResult<axum::Json<MemoryProfile>> {
    let profile = parse_profile(profile)?;
    let scope = scope_of(&state, query.namespace.as_deref(), &principal)?;
    state.store().put_profile(&scope, &profile).await?;
    Ok(axum::Json(state.store().profile(&scope).await?))
}

/// The injection text: "User Context:", "History:" and "Facts:" within a token budget.
#[utoipa::path(get, path = "/v1/memory/context", tag = "facts", params(ContextQuery),
    responses((status = 200, body = ContextResponse), (status = 400, body = ErrorBody)))]
pub(crate) async fn context(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Query(query): Query<ContextQuery>,
) -> ApiResult<axum::Json<ContextResponse>> {
    let scope = scope_of(&state, query.namespace.as_deref(), &principal)?;
    let max_tokens = query.max_tokens.unwrap_or(dedup_core::DEFAULT_MAX_TOKENS);
    if max_tokens == 0 || max_tokens > MAX_CONTEXT_TOKENS {
        return Err(ApiError::bad_request(format!("max_tokens {max_tokens} is not in 1..={MAX_CONTEXT_TOKENS}")));
    }
    let (context, tokens) = build_context(&state, &scope, max_tokens).await?;
    Ok(axum::Json(ContextResponse { context, tokens, max_tokens }))
}

async fn build_context(state: &AppState, scope: &Scope, max_tokens: usize) -> ApiResult<(String, usize)> {
    let profile = state.store().profile(scope).await?;
    let facts = state.store().list_facts(scope).await?;
    let views: Vec<_> = facts.iter().map(Fact::view).collect();
    let counter = dedup_core::default_token_counter();
    let context = dedup_core::format_context(&profile, &views, max_tokens, counter);
    let tokens = counter.count(&context);
    Ok((context, tokens))
}

async fn find_fact(state: &AppState, principal: &Principal, id: &str) -> ApiResult<Fact> {
    let fact = state.store().get_fact(id).await?.filter(|f| f.scope.domain() == state.config().domain);
    let fact = fact.ok_or_else(|| ApiError::not_found(format!("no fact with id {id:?}")))?;
    principal.allow(fact.scope.namespace_name()).map_err(|_| ApiError::not_found(format!("no fact with id {id:?}")))?;
    Ok(fact)
}

/// A profile body, read strictly ([`MemoryProfile::from_replacement`]): a wrong shape or
/// an unknown member is a 400 and changes nothing.
fn parse_profile(body: Value) -> ApiResult<MemoryProfile> {
    MemoryProfile::from_replacement(&body).map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

fn parse_category(category: &str) -> ApiResult<FactCategory> {
    category.parse::<FactCategory>().map_err(|e| ApiError::bad_request(e.to_string()))
}

fn policy(state: &AppState) -> ApiResult<FactPolicy> {
    let facts = &state.config().facts;
    FactPolicy::new(facts.min_confidence, facts.max_facts).map_err(|e| ApiError::internal(e.to_string()))
}
