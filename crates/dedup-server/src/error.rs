//! Errors: [`ApiError`] for responses, [`Error`] for starting the server.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// What went wrong before the server could serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is inconsistent or unsafe (for example a non-loopback address
    /// without a token).
    #[error("invalid server configuration: {0}")]
    Config(String),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The server stopped with an I/O error.
    #[error("server error: {0}")]
    Io(#[from] std::io::Error),
}

/// The body of every error response: `{"error": "...", "code": "..."}`, and for a node
/// that was merged into another, `merged_into` naming the survivor.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What is wrong, for a person.
    #[schema(example = "content, title, and subtype are required")]
    pub error: String,
    /// A stable machine-readable code: `invalid_request`, `unauthorized`, `forbidden`,
    /// `not_found`, `method_not_allowed`, `conflict`, `payload_too_large`, `uri_too_long`,
    /// `unsupported_media_type`, `bad_gateway`, `unavailable`, `not_configured`,
    /// `internal`.
    #[schema(example = "invalid_request")]
    pub code: &'static str,
    /// Only on the 404 for a node that a merge absorbed: the id of the node that absorbed
    /// it (`n_<number>`), when that node is in the server's domain and visible to the
    /// token. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "n_3")]
    pub merged_into: Option<String>,
}

/// An error response: a status and a JSON [`ErrorBody`].
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    merged_into: Option<String>,
}

impl ApiError {
    /// An error of any status with the code this API uses for it (`invalid_request` for
    /// 400, `payload_too_large` for 413, …; `error` for a status without one of its own):
    /// for wrapping another service's plain-text errors.
    pub fn from_status(status: StatusCode, message: impl Into<String>) -> ApiError {
        let code = match status {
            StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => "invalid_request",
            StatusCode::UNAUTHORIZED => "unauthorized",
            StatusCode::FORBIDDEN => "forbidden",
            StatusCode::NOT_FOUND => "not_found",
            StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
            StatusCode::NOT_ACCEPTABLE => "not_acceptable",
            StatusCode::REQUEST_TIMEOUT => "request_timeout",
            StatusCode::CONFLICT => "conflict",
            StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
            StatusCode::URI_TOO_LONG => "uri_too_long",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            StatusCode::SERVICE_UNAVAILABLE => "unavailable",
            StatusCode::INTERNAL_SERVER_ERROR => "internal",
            _ => "error",
        };
        ApiError::new(status, code, message)
    }

    /// 400: the request is malformed or invalid.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// 401: no or an unknown bearer token.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 403: the token may not use this namespace.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 404: no such node or fact.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 405: the route exists, the method does not.
    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", message)
    }

    /// 409: the change collides with an existing record.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 414: the request URI is longer than the server accepts.
    pub fn uri_too_long(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::URI_TOO_LONG, "uri_too_long", message)
    }

    /// 502: an upstream service (the chat model of fact extraction) answered with
    /// something unusable.
    pub fn bad_gateway(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_GATEWAY, "bad_gateway", message)
    }

    /// 503 `not_configured`: the route needs something the server was not configured
    /// with (fact extraction without a chat model).
    pub fn not_configured(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_configured", message)
    }

    /// 503: a backend (database, embedder) is unavailable.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    /// 500: a fault of the server.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into(), merged_into: None }
    }

    /// This error with `merged_into` set in its body.
    pub fn with_merged_into(mut self, survivor: impl Into<String>) -> ApiError {
        self.merged_into = Some(survivor.into());
        self
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = self.status.as_u16(), error = %self.message, "request failed");
        }
        let mut response =
            (self.status, Json(ErrorBody { error: self.message, code: self.code, merged_into: self.merged_into }))
                .into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            // RFC 6750: a 401 names the scheme the client must use.
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"memdedup\""),
            );
        }
        response
    }
}

impl From<dedup_store::Error> for ApiError {
    fn from(error: dedup_store::Error) -> ApiError {
        use dedup_store::Error as E;
        match &error {
            E::InvalidName { .. } | E::InvalidContent { .. } | E::InvalidVector(_) | E::InvalidMerge { .. } => {
                ApiError::bad_request(error.to_string())
            }
            E::NotFound(_) | E::FactNotFound(_) | E::MergeNotFound(_) | E::ChangeNotFound(_) | E::ReviewNotFound(_) => {
                ApiError::not_found(error.to_string())
            }
            E::Conflict { .. }
            | E::NotLive { .. }
            | E::ChangeNotUndoable { .. }
            | E::ReviewClosed { .. }
            | E::DuplicateEdit { .. }
            | E::MergeConflict { .. }
            | E::MergeBlocked { .. }
            | E::UndoRefused { .. } => ApiError::conflict(error.to_string()),
            _ if error.is_unavailable() => ApiError::unavailable(error.to_string()),
            _ => ApiError::internal(error.to_string()),
        }
    }
}

impl From<dedup_llm::Error> for ApiError {
    /// A chat model that stayed unreachable is 503; one that refused the request or
    /// answered with something unusable (not JSON, an invalid fact, a reply cut short) is
    /// 502; a request the server itself built wrong, or a client it configured wrong, is
    /// 500. No variant carries an API key.
    fn from(error: dedup_llm::Error) -> ApiError {
        use dedup_llm::Error as E;
        match &error {
            E::Unavailable { .. } => ApiError::unavailable(error.to_string()),
            E::Config(_) | E::InvalidRequest(_) => ApiError::internal(error.to_string()),
            _ => ApiError::bad_gateway(error.to_string()),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> ApiError {
        if crate::deadline::is_body_deadline(&rejection) {
            return ApiError::new(StatusCode::REQUEST_TIMEOUT, "request_timeout", rejection.body_text());
        }
        let status = rejection.status();
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            _ => "invalid_request",
        };
        let message = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "request body is larger than the limit".to_owned(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                "expected a JSON body with `Content-Type: application/json`".to_owned()
            }
            _ => format!("invalid JSON body: {}", rejection.body_text()),
        };
        // Unprocessable (well-formed JSON of the wrong shape) is reported as 400 too.
        let status = if status == StatusCode::UNPROCESSABLE_ENTITY { StatusCode::BAD_REQUEST } else { status };
        ApiError::new(status, code, message)
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> ApiError {
        ApiError::bad_request(format!("invalid query string: {}", rejection.body_text()))
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> ApiError {
        ApiError::bad_request(format!("invalid path: {}", rejection.body_text()))
    }
}

/// The result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use dedup_store::{MemoryId, MergeId};

    use super::*;

    #[test]
    fn merge_and_undo_errors_are_client_errors() {
        let cases = [
            (dedup_store::Error::MergeConflict { id: MemoryId::new(5), reason: "text changed".into() }, 409),
            (dedup_store::Error::UndoRefused { merge: MergeId::new(2), reason: "undone already".into() }, 409),
            (dedup_store::Error::MergeNotFound(MergeId::new(9)), 404),
        ];
        for (error, status) in cases {
            let text = error.to_string();
            let api = ApiError::from(error);
            assert_eq!(api.status().as_u16(), status, "{text}");
            assert_eq!(api.message(), text);
        }
    }

    #[test]
    fn chat_model_failures_are_gateway_errors() {
        let malformed = dedup_llm::Error::Malformed { endpoint: "http://x/v1".into(), reason: "not JSON".into() };
        assert_eq!(ApiError::from(malformed).status(), StatusCode::BAD_GATEWAY);
        let truncated = dedup_llm::Error::Truncated { model: "m".into(), max_tokens: 16 };
        assert_eq!(ApiError::from(truncated).status(), StatusCode::BAD_GATEWAY);
        let down =
            dedup_llm::Error::Unavailable { endpoint: "http://x/v1".into(), attempts: 3, last_error: "refused".into() };
        assert_eq!(ApiError::from(down).code, "unavailable");
    }

    #[test]
    fn merged_into_is_serialised_only_when_set() {
        let plain = ErrorBody { error: "no node n_5".into(), code: "not_found", merged_into: None };
        assert_eq!(
            serde_json::to_value(&plain).unwrap(),
            serde_json::json!({"error": "no node n_5", "code": "not_found"})
        );
        let merged = ErrorBody { merged_into: Some("n_3".into()), ..plain };
        assert_eq!(serde_json::to_value(&merged).unwrap()["merged_into"], "n_3");
    }
}
