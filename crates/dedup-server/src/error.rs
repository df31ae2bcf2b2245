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

/// The body of every error response: `{"error": "...", "code": "..."}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What is wrong, for a person.
    #[schema(example = "content, title, and subtype are required")]
    pub error: String,
    /// A stable machine-readable code: `invalid_request`, `unauthorized`, `forbidden`,
    /// `not_found`, `method_not_allowed`, `conflict`, `payload_too_large`, `uri_too_long`,
    /// `unsupported_media_type`, `unavailable`, `internal`.
    #[schema(example = "invalid_request")]
    pub code: &'static str,
}

/// An error response: a status and a JSON [`ErrorBody`].
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    /// 400: the request is malformed or invalid.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::BAD_REQUEST, code: "invalid_request", message: message.into() }
    }

    /// 401: no or an unknown bearer token.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::UNAUTHORIZED, code: "unauthorized", message: message.into() }
    }

    /// 403: the token may not use this namespace.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::FORBIDDEN, code: "forbidden", message: message.into() }
    }

    /// 404: no such node or fact.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::NOT_FOUND, code: "not_found", message: message.into() }
    }

    /// 405: the route exists, the method does not.
    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::METHOD_NOT_ALLOWED, code: "method_not_allowed", message: message.into() }
    }

    /// 409: the change collides with an existing record.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::CONFLICT, code: "conflict", message: message.into() }
    }

    /// 414: the request URI is longer than the server accepts.
    pub fn uri_too_long(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::URI_TOO_LONG, code: "uri_too_long", message: message.into() }
    }

    /// 503: a backend (database, embedder) is unavailable.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::SERVICE_UNAVAILABLE, code: "unavailable", message: message.into() }
    }

    /// 500: a fault of the server.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::INTERNAL_SERVER_ERROR, code: "internal", message: message.into() }
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
        (self.status, Json(ErrorBody { error: self.message, code: self.code })).into_response()
    }
}

impl From<dedup_store::Error> for ApiError {
    fn from(error: dedup_store::Error) -> ApiError {
        use dedup_store::Error as E;
        match &error {
            E::InvalidName { .. } | E::InvalidContent { .. } | E::InvalidVector(_) | E::InvalidMerge { .. } => {
                ApiError::bad_request(error.to_string())
            }
            E::NotFound(_) | E::FactNotFound(_) => ApiError::not_found(error.to_string()),
            E::Conflict { .. } | E::DuplicateEdit { .. } => ApiError::conflict(error.to_string()),
            _ if error.is_unavailable() => ApiError::unavailable(error.to_string()),
            _ => ApiError::internal(error.to_string()),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> ApiError {
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
        ApiError { status, code, message }
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
