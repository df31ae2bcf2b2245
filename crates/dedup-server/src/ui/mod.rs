//! The review page, `/ui/`: the namespaces with their memory and pending-review counts,
//! the review queue (both texts side by side, the words only one has highlighted, a form
//! per pair to merge, keep apart or skip), the merge ledger with an undo per merge and
//! per run, and a memory with its history. Server-rendered HTML ([`maud`]) with a style
//! sheet and no script; the same tokens and namespace limits as the API (a session
//! cookie opened from a token, [`session`]), a CSRF token in every form, and a strict
//! Content-Security-Policy. Paths carry ids only, so the request log never holds a
//! memory's text.

mod pages;
mod session;

use std::sync::Arc;

use axum::extract::{FromRequest, Request};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::state::AppState;

/// Where the page's policy lets things come from: its own style sheet and forms posted to
/// itself, nothing else (no script, no frame, no image from elsewhere).
const CSP: &str =
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
/// The style sheet, served at `/ui/style.css`.
const STYLE: &str = include_str!("style.css");

/// The routes of `/ui/`, outside the bearer-token layer: they take the session cookie.
pub(crate) fn routes(state: AppState) -> Router<AppState> {
    let pages = Router::new()
        .route("/ui/", get(pages::overview))
        .route("/ui/review", get(pages::review))
        .route("/ui/review/{id}/decide", post(pages::decide))
        .route("/ui/merges", get(pages::merges))
        .route("/ui/merges/{id}/undo", post(pages::undo_merge))
        .route("/ui/runs/undo", post(pages::undo_run))
        .route("/ui/memory/{id}", get(pages::memory))
        .route("/ui/changes/{id}/undo", post(pages::undo_change))
        .route("/ui/logout", post(session::logout))
        .route_layer(middleware::from_fn_with_state(state, session::require_session));
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/login", get(session::login_page).post(session::login))
        .route("/ui/style.css", get(style))
        .merge(pages)
        .layer(Extension(Arc::new(session::Sessions::default())))
        .layer(middleware::map_response(secure_headers))
}

async fn style() -> Response {
    ([(CONTENT_TYPE, "text/css; charset=utf-8"), (CACHE_CONTROL, "max-age=300")], STYLE).into_response()
}

/// The headers every page of `/ui/` gets: the policy, no sniffing, no framing, and no
/// caching of pages (they show memory text).
async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // `same-origin`, not `no-referrer`: under `no-referrer` browsers send `Origin: null`
    // with a form post, which the same-origin check must refuse.
    headers.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    if !headers.contains_key(CACHE_CONTROL) {
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// A form with only the CSRF token.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct CsrfForm {
    csrf: String,
}

/// Reads an `application/x-www-form-urlencoded` body; 400 naming the problem otherwise.
pub(crate) async fn form<T: DeserializeOwned>(request: Request, state: &AppState) -> Result<axum::Form<T>, UiError> {
    axum::Form::<T>::from_request(request, state).await.map_err(|rejection| {
        UiError::new(rejection.status(), format!("the form is not valid: {}", rejection.body_text()))
    })
}

/// A failure shown as an HTML page with its status.
#[derive(Debug)]
pub(crate) struct UiError {
    status: StatusCode,
    message: String,
}

impl UiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> UiError {
        UiError { status, message: message.into() }
    }
}

impl From<ApiError> for UiError {
    fn from(error: ApiError) -> UiError {
        UiError::new(error.status(), error.message())
    }
}

impl From<dedup_store::Error> for UiError {
    fn from(error: dedup_store::Error) -> UiError {
        ApiError::from(error).into()
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        (self.status, pages::error_page(self.status, &self.message)).into_response()
    }
}
