//! Read deadlines for slow clients: a request body must arrive whole within the
//! configured time ([`DeadlineBody`]), and a connection's headers within theirs (set on
//! the HTTP/1 connection builder in `server.rs`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::AppState;

/// The error a request body yields once the server's `body_timeout_secs` passed before
/// it arrived whole; the JSON extractor's rejection carries it, and it becomes 408.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyDeadline {
    /// The time the body had.
    pub secs: u64,
}

impl fmt::Display for BodyDeadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the request body did not arrive within {} s", self.secs)
    }
}

impl std::error::Error for BodyDeadline {}

/// A request body that fails with [`BodyDeadline`] when it is not read to its end by a
/// fixed instant, however the bytes trickle in (a per-frame idle timeout would let a
/// client sending a byte now and then hold the request forever).
struct DeadlineBody {
    inner: Body,
    sleep: Pin<Box<Sleep>>,
    secs: u64,
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(BodyDeadline { secs: self.secs })))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Gives every request body the server's `body_timeout_secs`, counted from now.
pub(crate) async fn limit_body_time(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let secs = state.config().body_timeout_secs;
    let deadline = Instant::now() + Duration::from_secs(secs);
    let request = request.map(|inner| {
        if http_body::Body::is_end_stream(&inner) {
            inner
        } else {
            Body::new(DeadlineBody { inner, sleep: Box::pin(tokio::time::sleep_until(deadline)), secs })
        }
    });
    next.run(request).await
}

/// Whether `error` or one of its sources is a [`BodyDeadline`].
pub(crate) fn is_body_deadline(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.is::<BodyDeadline>() {
            return true;
        }
        next = error.source();
    }
    false
}
