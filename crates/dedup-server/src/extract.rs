//! Extractors whose rejections are JSON [`ApiError`]s.

use axum::extract::{FromRequest, FromRequestParts};

use crate::error::ApiError;

/// A JSON body; malformed JSON, a wrong shape, a missing content type or a body over the
/// limit become 400, 415 or 413 with a JSON error.
#[derive(Debug, FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct Body<T>(pub T);

/// A query string; a malformed one becomes 400.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct Query<T>(pub T);

/// Path parameters; malformed ones become 400.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct Path<T>(pub T);
