//! The router and the serving loop with graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Request};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::serve::ListenerExt;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder as ConnectionBuilder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt;
use tower_http::request_id::{MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use crate::state::AppState;
use crate::{Error, auth, fact_extraction, facts, lifecycle, memory, nodes, ops, review, ui};

/// The request-id header, set on every response (the request's own when it is
/// acceptable: see [`MAX_REQUEST_ID_BYTES`]).
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// Longest request id taken from a client. A longer one, one with a byte outside ASCII
/// letters, digits and `-_.:/+=@`, or several `x-request-id` headers, are replaced by a
/// fresh id, so logs never carry what a client chose to put there.
pub const MAX_REQUEST_ID_BYTES: usize = 128;
/// Longest request URI (path and query) served; a longer one gets a JSON 414. Beyond
/// 65,534 bytes hyper refuses the request line itself, before any route sees it.
pub const MAX_URI_BYTES: usize = 8 << 10;

/// The whole HTTP API over `state`.
pub fn router(state: AppState) -> Router {
    router_with(state, Router::new())
}

/// The whole HTTP API over `state`, with the routes of `extra` (such as the MCP endpoint
/// nested at `/mcp`) behind the same bearer-token authentication, which attaches the
/// caller's [`Principal`](crate::Principal) to each request's extensions, and the same
/// metrics, request ids and limits.
pub fn router_with(state: AppState, extra: Router<AppState>) -> Router {
    let api = Router::new()
        .route("/v1/nodes/check-similar", post(nodes::check_similar))
        .route("/v1/nodes", post(nodes::create_node).get(nodes::list_nodes))
        .route("/v1/nodes/{id}", get(nodes::get_node).patch(nodes::update_node).delete(nodes::delete_node))
        .route("/v1/nodes/{id}/edges", get(nodes::node_edges))
        .route("/v1/edges", post(nodes::create_edge))
        .route("/v1/facts", post(facts::create_fact).get(facts::list_facts))
        .route("/v1/facts/extract", post(fact_extraction::extract))
        .route("/v1/facts/{id}", patch(facts::update_fact).delete(facts::delete_fact))
        .route("/v1/memory/profile", get(facts::get_profile).put(facts::put_profile))
        .route("/v1/memory/context", get(facts::context))
        .route("/v1/memory/check", post(memory::check))
        .route("/v1/memory/add", post(memory::add))
        .route("/v1/memory/{id}", patch(lifecycle::edit).delete(lifecycle::forget))
        .route("/v1/memory/{id}/history", get(lifecycle::history))
        .route("/v1/memory/changes/{change}/undo", post(lifecycle::undo))
        .route("/v1/review", get(review::list))
        .route("/v1/review/{id}/decide", post(review::decide))
        .route("/metrics", get(ops::metrics))
        .merge(extra)
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::authenticate));
    let open = Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/v1/openapi.json", get(ops::openapi))
        .merge(ui::routes(state.clone()));
    let request_id = axum::http::HeaderName::from_static(REQUEST_ID_HEADER);
    api.merge(open)
        .fallback(|| async { crate::ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            crate::ApiError::method_not_allowed("this route does not take that method")
        })
        .layer(DefaultBodyLimit::max(state.config().max_body_bytes))
        .layer(middleware::from_fn_with_state(state.clone(), crate::deadline::limit_body_time))
        .route_layer(middleware::from_fn(ops::track))
        .layer(middleware::from_fn(limit_uri))
        .layer(
            tower::ServiceBuilder::new()
                .layer(middleware::map_request(screen_request_id))
                .layer(SetRequestIdLayer::new(request_id.clone(), Counter))
                .layer(TraceLayer::new_for_http().make_span_with(|request: &Request<_>| {
                    let id = request.headers().get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("-");
                    // Method and path only: bodies (memory text) never reach the logs.
                    tracing::info_span!("request", request_id = %id, method = %request.method(), path = %request.uri().path())
                }))
                .layer(PropagateRequestIdLayer::new(request_id)),
        )
        .with_state(state)
}

/// Drops a client's `x-request-id` unless it is one header of 1 to
/// [`MAX_REQUEST_ID_BYTES`] bytes from a safe set, so that a fresh id replaces it.
async fn screen_request_id(mut request: Request<Body>) -> Request<Body> {
    let mut given = request.headers().get_all(REQUEST_ID_HEADER).iter();
    let acceptable = match (given.next(), given.next()) {
        (None, _) => true,
        (Some(id), None) => acceptable_request_id(id.as_bytes()),
        (Some(_), Some(_)) => false,
    };
    if !acceptable {
        request.headers_mut().remove(REQUEST_ID_HEADER);
        tracing::debug!("the client's request id is not acceptable; a fresh one replaces it");
    }
    request
}

/// Whether a client's request id may be kept as given.
fn acceptable_request_id(id: &[u8]) -> bool {
    (1..=MAX_REQUEST_ID_BYTES).contains(&id.len())
        && id.iter().all(|b| b.is_ascii_alphanumeric() || b"-_.:/+=@".contains(b))
}

/// 414 with the JSON error for a URI over [`MAX_URI_BYTES`].
async fn limit_uri(request: Request<Body>, next: Next) -> Response {
    let length = request.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if length > MAX_URI_BYTES {
        return crate::ApiError::uri_too_long(format!(
            "the request URI is {length} bytes, over the limit of {MAX_URI_BYTES} bytes"
        ))
        .into_response();
    }
    next.run(request).await
}

/// Request ids `<process start, hex>-<sequence>`: unique per process and cheap.
#[derive(Clone, Default)]
struct Counter;

impl MakeRequestId for Counter {
    fn make_request_id<B>(&mut self, _request: &Request<B>) -> Option<RequestId> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let start = START.get_or_init(|| {
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            u64::try_from(nanos.as_nanos() & u128::from(u64::MAX)).unwrap_or_default() ^ u64::from(std::process::id())
        });
        let id = format!("{start:x}-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        HeaderValue::from_str(&id).ok().map(RequestId::new)
    }
}

/// Binds `state.config().addr` after validating the configuration (a non-loopback
/// address needs a token).
pub async fn bind(state: &AppState) -> Result<TcpListener, Error> {
    state.config().validate()?;
    let addr = state.config().addr;
    TcpListener::bind(addr).await.map_err(|source| Error::Bind { addr, source })
}

/// Serves on `listener` until `shutdown` completes, then stops accepting, lets in-flight
/// requests finish and closes the store.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let app = router(state.clone());
    serve_app(listener, app, state, shutdown).await
}

/// [`serve`] with `app` (from [`router_with`]) as the routes.
pub async fn serve_app(
    listener: TcpListener,
    app: Router,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let local: Option<SocketAddr> = listener.local_addr().ok();
    tracing::info!(addr = ?local, backend = state.store().backend(), "serving");
    // Without TCP_NODELAY an answer written after its headers (an MCP event stream) waits
    // for the client's delayed ACK: about 40 ms on every call.
    let mut listener = listener.tap_io(|stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
    });
    // hyper's connection builder rather than `axum::serve`, for a header read timeout:
    // a client that opens a request and never finishes its headers is disconnected.
    let mut builder = ConnectionBuilder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(state.config().header_timeout_secs));
    builder.http2().timer(TokioTimer::new());
    let connections = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = axum::serve::Listener::accept(&mut listener) => accepted,
            () = &mut shutdown => break,
        };
        let service = app.clone().map_request(|request: Request<hyper::body::Incoming>| request.map(Body::new));
        let connection =
            builder.serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service));
        let connection = connections.watch(connection.into_owned());
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection closed with an error");
            }
        });
    }
    drop(listener);
    // In-flight requests finish; idle connections close.
    connections.shutdown().await;
    state.store().close().await;
    tracing::info!("stopped");
    Ok(())
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => tracing::info!("SIGINT: shutting down"),
        () = terminate => tracing::info!("SIGTERM: shutting down"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_kept_only_when_short_and_plain() {
        for kept in ["trace-abc-123", "a", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x/y:z+1=@"] {
            assert!(acceptable_request_id(kept.as_bytes()), "{kept}");
        }
        let long = "a".repeat(MAX_REQUEST_ID_BYTES + 1);
        for replaced in ["", "has space", "quote\"", "tab\there", "nul\0", "ünicode", "a{b}", long.as_str()] {
            assert!(!acceptable_request_id(replaced.as_bytes()), "{replaced:?}");
        }
        assert!(acceptable_request_id("a".repeat(MAX_REQUEST_ID_BYTES).as_bytes()));
    }
}
