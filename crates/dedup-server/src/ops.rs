//! Operations routes: health, metrics, the OpenAPI document; and the request metrics
//! middleware.

use std::sync::OnceLock;
use std::time::Instant;

use axum::Extension;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// Requests served, by method, route and status.
pub const HTTP_REQUESTS_TOTAL: &str = "http_requests_total";
/// Request latency in seconds, by method and route.
pub const HTTP_REQUEST_DURATION_SECONDS: &str = "http_request_duration_seconds";
/// Gauge of memories stored while the embedder was down that still have no vector, by
/// domain and namespace; read from the store at each scrape.
pub const MEMORIES_UNEMBEDDED: &str = "memdedup_memories_unembedded";
/// Gauge of heap bytes held by the store's resident vector indexes; read at each scrape,
/// like the index gauges and counters below.
pub const INDEX_BYTES: &str = "memdedup_index_bytes";
/// Gauge of the index memory budget (`[store] index_memory_mb`) in bytes.
pub const INDEX_BUDGET_BYTES: &str = "memdedup_index_budget_bytes";
/// Gauge of resident vector indexes (one per namespace, model and filter in use).
pub const INDEXES_RESIDENT: &str = "memdedup_indexes_resident";
/// Counter of vector indexes dropped to stay within the budget.
pub const INDEX_EVICTIONS_TOTAL: &str = "memdedup_index_evictions_total";
/// Counter of vector indexes loaded whole from the database (first use, or after an
/// eviction).
pub const INDEX_LOADS_TOTAL: &str = "memdedup_index_loads_total";
/// Counter of the milliseconds those loads took, together.
pub const INDEX_LOAD_MS_TOTAL: &str = "memdedup_index_load_ms_total";

/// `GET /healthz` response.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok` when the database answers.
    pub status: &'static str,
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// Memories stored while the embedder was down that still have no vector: semantic
    /// checks miss them until a backfill embeds them (in the background after the next
    /// successful create in their namespace, or `memdedup reembed`).
    pub unembedded: u64,
    /// Whether the embedder can produce an embedding now (the last embedding, at most a
    /// minute old, or a probe, succeeded). False without one: nodes are then stored
    /// unchecked.
    pub embedder: bool,
    /// The embedder's model id, when one is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedder_model: Option<String>,
    /// Why the embedder is not available, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedder_error: Option<String>,
    /// This build's version.
    pub version: &'static str,
}

/// Liveness and readiness: the database answers a query; and whether the embedder can
/// embed (a cached outcome, refreshed by a short probe at most once a minute while it
/// works and every 10 s while it does not).
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, body = Health), (status = 503, body = crate::ErrorBody)))]
pub(crate) async fn healthz(State(state): State<AppState>) -> ApiResult<axum::Json<Health>> {
    let stats = state.store().stats().await.map_err(|e| ApiError::unavailable(format!("database: {e}")))?;
    let unembedded = stats.namespaces.iter().map(|n| n.unembedded).sum();
    let embedder = state.embedder_status().await;
    Ok(axum::Json(Health {
        status: "ok",
        backend: state.store().backend(),
        unembedded,
        embedder: embedder.available,
        embedder_model: embedder.model,
        embedder_error: embedder.error,
        version: env!("CARGO_PKG_VERSION"),
    }))
}

/// Prometheus text exposition of every metric of the process. Its labels name every
/// namespace, so a token limited to some namespaces gets 403.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, content_type = "text/plain", body = String), (status = 403, body = crate::ErrorBody),
              (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn metrics(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
) -> ApiResult<Response> {
    if principal.is_limited() {
        return Err(ApiError::forbidden(
            "the metrics cover every namespace: use a token that is not limited to some namespaces",
        ));
    }
    let handle = state.metrics().ok_or_else(|| ApiError::not_found("metrics are not recorded by this server"))?;
    // Read now, so the gauge is as fresh as the scrape.
    let stats = state.store().stats().await.map_err(|e| ApiError::unavailable(format!("database: {e}")))?;
    for n in &stats.namespaces {
        gauge!(MEMORIES_UNEMBEDDED, "domain" => n.domain.clone(), "namespace" => n.namespace.clone())
            .set(n.unembedded as f64);
    }
    let usage = state.store().index_usage();
    gauge!(INDEX_BYTES).set(usage.resident_bytes as f64);
    gauge!(INDEX_BUDGET_BYTES).set(usage.budget_bytes as f64);
    gauge!(INDEXES_RESIDENT).set(usage.resident_indexes as f64);
    counter!(INDEX_EVICTIONS_TOTAL).absolute(usage.evictions);
    counter!(INDEX_LOADS_TOTAL).absolute(usage.loads);
    counter!(INDEX_LOAD_MS_TOTAL).absolute((usage.load_seconds * 1e3).round() as u64);
    Ok(([(CONTENT_TYPE, "text/plain; version=0.0.4")], handle.render()).into_response())
}

/// This API's OpenAPI 3.1 document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "operations", responses((status = 200, body = Object)))]
pub(crate) async fn openapi() -> axum::Json<utoipa::openapi::OpenApi> {
    axum::Json(crate::ApiDoc::openapi())
}

/// Counts and times every request, labelled by its route template (never the raw path).
pub(crate) async fn track(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route =
        request.extensions().get::<MatchedPath>().map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    counter!(HTTP_REQUESTS_TOTAL, "method" => method.clone(), "route" => route.clone(), "status" => status)
        .increment(1);
    histogram!(HTTP_REQUEST_DURATION_SECONDS, "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}

/// Installs the process-wide Prometheus recorder once and returns its handle; later calls
/// return the same handle. `None` when another recorder was installed first.
pub fn install_prometheus() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let buckets = [0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];
            // Seed 004's check metrics are histograms too (a summary's quantiles decay to 0
            // when idle): milliseconds, and the similarity of semantic matches.
            let check_ms = [0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0];
            let similarity = [0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.88, 0.9, 0.92, 0.94, 0.96, 0.98, 0.99, 1.0];
            let full = |name: &str| metrics_exporter_prometheus::Matcher::Full(name.to_owned());
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(full(HTTP_REQUEST_DURATION_SECONDS), &buckets)
                .ok()?
                .set_buckets_for_metric(full(dedup_precompact::metrics::CHECK_DURATION_MS), &check_ms)
                .ok()?
                .set_buckets_for_metric(full(dedup_precompact::metrics::SIMILARITY_SCORE), &similarity)
                .ok()?
                .install_recorder()
                .ok()?;
            describe_counter!(HTTP_REQUESTS_TOTAL, "HTTP requests served, by method, route and status");
            describe_histogram!(
                HTTP_REQUEST_DURATION_SECONDS,
                metrics::Unit::Seconds,
                "HTTP request latency, by method and route"
            );
            describe_gauge!(
                MEMORIES_UNEMBEDDED,
                metrics::Unit::Count,
                "Memories stored while the embedder was down that still have no vector, by namespace"
            );
            describe_gauge!(
                INDEX_BYTES,
                metrics::Unit::Bytes,
                "Heap bytes held by the resident in-process vector indexes"
            );
            describe_gauge!(INDEX_BUDGET_BYTES, metrics::Unit::Bytes, "The vector index memory budget");
            describe_gauge!(
                INDEXES_RESIDENT,
                metrics::Unit::Count,
                "Resident vector indexes, one per namespace, model and filter in use"
            );
            describe_counter!(
                INDEX_EVICTIONS_TOTAL,
                metrics::Unit::Count,
                "Vector indexes dropped, least recently used first, to stay within the budget"
            );
            describe_counter!(
                INDEX_LOADS_TOTAL,
                metrics::Unit::Count,
                "Vector indexes loaded whole from the database (first use, or after an eviction)"
            );
            describe_counter!(
                INDEX_LOAD_MS_TOTAL,
                metrics::Unit::Milliseconds,
                "Milliseconds spent loading vector indexes whole from the database"
            );
            dedup_precompact::metrics::describe();
            Some(handle)
        })
        .clone()
}
