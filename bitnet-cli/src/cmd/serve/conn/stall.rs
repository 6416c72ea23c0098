//! A request body that fails when the client stops sending it: no new bytes for
//! `--read-timeout` seconds. Without it a client that announces `Content-Length: 100` and
//! sends one byte holds its handler, its connection and a shutdown forever.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use super::super::error::ApiError;

#[derive(Debug)]
pub struct StallGuarded {
    inner: Incoming,
    limit: Duration,
    sleep: Pin<Box<Sleep>>,
}

impl StallGuarded {
    pub fn new(inner: Incoming, limit: Duration) -> StallGuarded {
        StallGuarded {
            inner,
            limit,
            sleep: Box::pin(tokio::time::sleep(limit)),
        }
    }
}

/// The body stopped arriving.
#[derive(Debug)]
pub struct BodyStalled(pub Duration);

impl std::fmt::Display for BodyStalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body stopped arriving: no byte in {} s (--read-timeout)",
            self.0.as_secs()
        )
    }
}

impl std::error::Error for BodyStalled {}

impl Body for StallGuarded {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let next = Instant::now() + self.limit;
                self.sleep.as_mut().reset(next);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => match self.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyStalled(self.limit))))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// 408 for a body that stopped arriving (the connection closes after it: the rest of the
/// body is never read).
pub fn error(stall: &BodyStalled) -> ApiError {
    ApiError {
        status: StatusCode::REQUEST_TIMEOUT,
        message: stall.to_string(),
        kind: "invalid_request_error",
        param: None,
        code: Some("request_timeout"),
        retry_after: None,
        extra: None,
    }
}

/// The stall behind a failed body read, if that is what failed.
pub fn stalled(e: &BytesRejection) -> Option<&BodyStalled> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(b) = s.downcast_ref::<BodyStalled>() {
            return Some(b);
        }
        source = s.source();
    }
    None
}
