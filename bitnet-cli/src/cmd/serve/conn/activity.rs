//! What one connection is doing, as its timeouts and the connection cap need to know:
//! waiting for a request's header, serving a request, or idle between requests. The socket
//! wrapper sees bytes arrive, the service sees a request start, and the response body's drop
//! marks its end; the connection's task waits on the deadline of the current phase.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// A request's header is expected or arriving: a new connection, or bytes after idle.
    Head,
    /// A request is being served (its body read, its answer computed and sent).
    Busy,
    /// Between two requests of a keep-alive connection.
    Idle,
}

/// Why a connection's task closed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// No complete request header within `--read-timeout`.
    Header,
    /// Idle longer than `--idle-timeout`.
    Idle,
}

#[derive(Debug)]
pub struct Activity {
    pub id: u64,
    pub peer: SocketAddr,
    phase: Mutex<(Phase, Instant)>,
    changed: Notify,
    evicted: Notify,
}

impl Activity {
    pub fn new(id: u64, peer: SocketAddr) -> Activity {
        Activity {
            id,
            peer,
            phase: Mutex::new((Phase::Head, Instant::now())),
            changed: Notify::new(),
            evicted: Notify::new(),
        }
    }

    /// The phase and when it began.
    pub fn phase(&self) -> (Phase, Instant) {
        *self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, to: Phase, only_from: Option<Phase>) {
        let mut p = self.phase.lock().unwrap_or_else(|p| p.into_inner());
        if only_from.is_none_or(|from| p.0 == from) && p.0 != to {
            *p = (to, Instant::now());
            // One waiter (the connection's task); a stored permit covers a change that
            // lands before it waits.
            self.changed.notify_one();
        }
    }

    fn bytes_arrived(&self) {
        self.set(Phase::Head, Some(Phase::Idle));
    }

    pub fn request_started(&self) {
        self.set(Phase::Busy, None);
    }

    fn request_ended(&self) {
        self.set(Phase::Idle, None);
    }

    /// Resolves when the current phase outlives its limit (never while busy).
    pub async fn expired(&self, read_timeout: Duration, idle_timeout: Duration) -> Expiry {
        loop {
            let (phase, since) = self.phase();
            let (limit, why) = match phase {
                Phase::Busy => {
                    self.changed.notified().await;
                    continue;
                }
                Phase::Head => (read_timeout, Expiry::Header),
                Phase::Idle => (idle_timeout, Expiry::Idle),
            };
            tokio::select! {
                () = tokio::time::sleep_until(since + limit) => {
                    if self.phase() == (phase, since) {
                        return why;
                    }
                }
                () = self.changed.notified() => {}
            }
        }
    }

    /// Asks the connection's task to close (the cap needs its place).
    pub fn evict(&self) {
        self.evicted.notify_one();
    }

    pub async fn evicted(&self) {
        self.evicted.notified().await;
    }
}

/// The socket, telling the connection's [`Activity`] when bytes arrive.
#[derive(Debug)]
pub struct Watched {
    tcp: TcpStream,
    activity: std::sync::Arc<Activity>,
}

impl Watched {
    pub fn new(tcp: TcpStream, activity: std::sync::Arc<Activity>) -> Watched {
        Watched { tcp, activity }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_arrived();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

/// A response body that ends its request's busy phase when hyper drops it: after the last
/// byte went out, or when the connection closed under it.
#[derive(Debug)]
pub struct Tracked {
    inner: Body,
    activity: std::sync::Arc<Activity>,
}

impl Tracked {
    pub fn new(inner: Body, activity: std::sync::Arc<Activity>) -> Tracked {
        Tracked { inner, activity }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.activity.request_ended();
    }
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
