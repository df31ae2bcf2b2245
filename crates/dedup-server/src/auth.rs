//! Bearer-token authentication and per-token namespace limits.

use std::collections::BTreeSet;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// Who is calling: the namespaces their token may use (all when `None`).
#[derive(Debug, Clone, Default)]
pub struct Principal {
    namespaces: Option<BTreeSet<String>>,
}

impl Principal {
    /// May this caller use `namespace`? 403 if not.
    pub fn allow(&self, namespace: &str) -> ApiResult<()> {
        match &self.namespaces {
            Some(allowed) if !allowed.contains(namespace) => Err(ApiError::forbidden(format!(
                "this token may not use namespace {namespace:?} (allowed: {})",
                allowed.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
            ))),
            _ => Ok(()),
        }
    }

    /// Whether the token is limited to some namespaces.
    pub fn is_limited(&self) -> bool {
        self.namespaces.is_some()
    }
}

/// Checks `Authorization: Bearer <token>` when tokens are configured, and attaches the
/// caller's [`Principal`] to the request.
pub(crate) async fn authenticate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let principal = if state.config().tokens.is_empty() {
        Principal::default()
    } else {
        let presented = request
            .headers()
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")))
            .map(str::trim);
        let Some(presented) = presented else {
            return ApiError::unauthorized("missing `Authorization: Bearer <token>` header").into_response();
        };
        match principal_for(&state, presented) {
            Some(principal) => principal,
            None => return ApiError::unauthorized("unknown bearer token").into_response(),
        }
    };
    request.extensions_mut().insert(principal);
    next.run(request).await
}

/// The caller a configured token names, if `presented` is one. Compares with every token,
/// in time independent of where they differ.
pub(crate) fn principal_for(state: &AppState, presented: &str) -> Option<Principal> {
    let found = state.config().tokens.iter().fold(None, |found, token| {
        let equal = constant_time_eq(token.token.as_bytes(), presented.as_bytes());
        found.or(equal.then_some(token))
    });
    found.map(|token| Principal { namespaces: token.namespaces.clone() })
}

/// Byte equality whose time depends only on the lengths.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limited_principal_names_the_allowed_namespaces() {
        let principal = Principal { namespaces: Some(["agents".to_owned()].into()) };
        assert!(principal.allow("agents").is_ok());
        let error = principal.allow("other").unwrap_err();
        assert_eq!(error.status(), axum::http::StatusCode::FORBIDDEN);
        assert!(error.message().contains("\"other\"") && error.message().contains("agents"));
        assert!(Principal::default().allow("anything").is_ok());
    }

    #[test]
    fn constant_time_eq_compares_bytes() {
        assert!(constant_time_eq(b"secret-1", b"secret-1"));
        assert!(!constant_time_eq(b"secret-1", b"secret-2"));
        assert!(!constant_time_eq(b"secret", b"secret-1"));
    }
}
