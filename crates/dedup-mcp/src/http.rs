//! `/mcp` as an axum router: the SDK's streamable HTTP service behind the HTTP behaviour
//! the rest of the server has. Malformed JSON is 400 and a body over the limit 413, both
//! with the server's JSON error body (the SDK answers them in plain text, malformed JSON
//! even as 415); any other plain-text error of the SDK gets the JSON body too; and ending
//! a session answers 204 (the SDK's 202 reads as a failure to MCP clients).

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use dedup_server::ApiError;
use tokio_util::sync::CancellationToken;

use crate::context::McpContext;
use crate::server::http_service;

/// Most bytes of a plain-text error of the SDK kept in the JSON error.
const MAX_ERROR_TEXT_BYTES: usize = 4 << 10;

/// The route `/mcp`: [`http_service`] (same arguments) behind the fixes above, to merge
/// into the server's routes (so its bearer-token check covers it). Request bodies over
/// `max_body_bytes` are refused with 413 before the SDK sees them.
pub fn http_router<S>(
    context: Arc<McpContext>,
    shutdown: CancellationToken,
    any_host: bool,
    max_body_bytes: usize,
) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let service = http_service(context, shutdown, any_host, max_body_bytes);
    Router::new()
        .route_service("/mcp", service)
        .layer(middleware::from_fn(move |request: Request, next: Next| json_errors(request, next, max_body_bytes)))
}

async fn json_errors(request: Request, next: Next, max_body_bytes: usize) -> Response {
    let method = request.method().clone();
    let request = if method == Method::POST {
        match checked_json(request, max_body_bytes).await {
            Ok(request) => request,
            Err(error) => return error.into_response(),
        }
    } else {
        request
    };
    let response = next.run(request).await;
    if method == Method::DELETE && response.status() == StatusCode::ACCEPTED {
        return StatusCode::NO_CONTENT.into_response();
    }
    as_json_error(response).await
}

/// The request with its body read (at most `max_body_bytes`) and checked to be JSON.
async fn checked_json(request: Request, max_body_bytes: usize) -> Result<Request, ApiError> {
    let (parts, body) = request.into_parts();
    let json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json")));
    if !json {
        return Err(ApiError::from_status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "expected a JSON body with `Content-Type: application/json`",
        ));
    }
    let bytes = to_bytes(body, max_body_bytes).await.map_err(|error| {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
        while let Some(e) = source {
            if let Some(deadline) = e.downcast_ref::<dedup_server::BodyDeadline>() {
                return ApiError::from_status(StatusCode::REQUEST_TIMEOUT, deadline.to_string());
            }
            if e.is::<http_body_util::LengthLimitError>() {
                return ApiError::from_status(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the request body is over the limit of {max_body_bytes} bytes (max_body_bytes)"),
                );
            }
            source = e.source();
        }
        ApiError::bad_request(format!("cannot read the request body: {error}"))
    })?;
    if let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
        return Err(ApiError::bad_request(format!("invalid JSON body: {error}")));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// `response` with the server's JSON error body when it is an error in another format.
async fn as_json_error(response: Response) -> Response {
    let status = response.status();
    let is_json =
        response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = match to_bytes(body, MAX_ERROR_TEXT_BYTES).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).chars().filter(|c| !c.is_control()).collect::<String>(),
        Err(_) => String::new(),
    };
    let message = if text.trim().is_empty() { status.canonical_reason().unwrap_or("error").to_owned() } else { text };
    let mut json = ApiError::from_status(status, message).into_response();
    // Keep what the SDK says about the session or the allowed methods.
    for name in [header::ALLOW, header::WWW_AUTHENTICATE] {
        if let Some(value) = parts.headers.get(&name) {
            json.headers_mut().insert(name, value.clone());
        }
    }
    json
}
