//! The server's accept loop and connections, on hyper directly: `axum::serve` has no
//! connection cap, no read or idle timeout, and a graceful shutdown that waits for every
//! connection, even one a client left half-sent.
//!
//! - At most `--max-connections` are open (kept below the open-file limit); at the cap a new
//!   one replaces the longest-waiting connection that is not serving a request, or is
//!   refused with 503 when all are (`registry.rs`).
//! - A request's header must arrive within `--read-timeout` (a new connection's first byte
//!   too), and its body may not pause longer than that (`stall.rs`); a keep-alive connection
//!   idle for `--idle-timeout` is closed.
//! - On shutdown no connection is accepted, those without a request in progress close at
//!   once, and those serving one finish it. At the deadline the engine's sequences are
//!   cancelled (their answers end with an error, not a finish), then after a short grace for
//!   those errors to go out every connection left is closed, and the server exits.
//!
//! Limits hit are logged, at most one line per kind every 10 s, and counted in `/metrics`.

mod activity;
mod fd_limit;
mod registry;
pub mod stall;
mod throttled;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::ServiceExt;

use super::metrics::ConnectionFigures;
use crate::output::note;
use activity::{Activity, Expiry, Phase, Tracked, Watched};
use registry::{Admission, Registry};
use stall::StallGuarded;
use throttled::Throttled;

/// The connection flags.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_connections: usize,
    pub read_timeout: Duration,
    pub idle_timeout: Duration,
}

/// How long cancelled answers get to send their error before their connections are closed.
const CANCEL_GRACE: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Serving,
    /// Shutdown: no new connections; those serving a request finish it.
    Draining,
    /// Past the deadline and the grace: every connection closes now.
    Closing,
}

/// Everything the connection tasks share.
#[derive(Debug)]
struct Hub {
    app: Router,
    limits: Limits,
    registry: Registry,
    figures: Arc<ConnectionFigures>,
    stage: watch::Receiver<Stage>,
    header_log: Throttled,
    cap_log: Throttled,
    accept_log: Throttled,
}

impl Hub {
    fn figures(&self) -> &ConnectionFigures {
        &self.figures
    }
}

/// What shutdown does: `signal` starts it, requests in flight get `deadline` to finish, then
/// `cancel` cancels the engine's sequences.
pub struct Shutdown<S, C> {
    pub signal: S,
    pub deadline: Duration,
    pub cancel: C,
}

/// The most connections `wanted` may be under this process's open-file limit (raising the
/// soft limit to the hard one first), with a note when the limit lowers it.
pub fn connection_cap(wanted: usize) -> usize {
    match fd_limit::connection_room() {
        Some(room) if room < wanted => {
            note!(
                "--max-connections {wanted} lowered to {room}: the open-file limit leaves room \
                 for that many (raise it with `ulimit -n`)"
            );
            room
        }
        _ => wanted,
    }
}

/// Serves `app` on `listener` until shutdown has run its course.
pub async fn serve<S, C>(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    figures: Arc<ConnectionFigures>,
    shutdown: Shutdown<S, C>,
) where
    S: Future<Output = ()>,
    C: FnOnce(),
{
    let (stage_tx, stage_rx) = watch::channel(Stage::Serving);
    let hub = Arc::new(Hub {
        app,
        limits,
        registry: Registry::new(limits.max_connections, Arc::clone(&figures)),
        figures,
        stage: stage_rx,
        header_log: Throttled::default(),
        cap_log: Throttled::default(),
        accept_log: Throttled::default(),
    });
    let signal = shutdown.signal;
    tokio::pin!(signal);
    loop {
        let accepted = tokio::select! {
            () = &mut signal => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((tcp, peer)) => admit(&hub, tcp, peer),
            Err(e) => {
                // Out of descriptors (EMFILE/ENFILE) or a connection reset before it was
                // taken: wait a moment instead of spinning on the same error.
                hub.accept_log.note(|| {
                    format!(
                        "cannot accept a connection: {e} ({} open; lower --max-connections or \
                         raise `ulimit -n`)",
                        hub.registry.len()
                    )
                });
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    note!("shutting down: no new requests; waiting for those in flight");
    let _ = stage_tx.send(Stage::Draining);
    if tokio::time::timeout(shutdown.deadline, hub.registry.all_closed())
        .await
        .is_ok()
    {
        return;
    }
    note!("shutdown deadline passed: cancelling the requests left");
    (shutdown.cancel)();
    if tokio::time::timeout(CANCEL_GRACE, hub.registry.all_closed())
        .await
        .is_ok()
    {
        return;
    }
    note!(
        "closing the {} still open",
        crate::output::count(hub.registry.len(), "connection")
    );
    let _ = stage_tx.send(Stage::Closing);
    let _ = tokio::time::timeout(Duration::from_secs(1), hub.registry.all_closed()).await;
}

fn admit(hub: &Arc<Hub>, tcp: TcpStream, peer: SocketAddr) {
    // Tokens go out as small writes: without TCP_NODELAY, Nagle's algorithm holds each one
    // back until the previous one is acknowledged (40 ms behind a proxy).
    let _ = tcp.set_nodelay(true);
    let activity = match hub.registry.admit(peer) {
        Admission::Admitted(a) => a,
        Admission::Replaced { admitted, evicted } => {
            hub.figures().evicted.fetch_add(1, Relaxed);
            hub.cap_log.note(|| {
                format!(
                    "connection limit reached ({} open, --max-connections): closed the \
                     longest-waiting connection without a request, from {}",
                    hub.registry.cap(),
                    evicted.peer
                )
            });
            admitted
        }
        Admission::Refused => {
            hub.figures().refused.fetch_add(1, Relaxed);
            hub.cap_log.note(|| {
                format!(
                    "connection limit reached ({} open, all serving requests, \
                     --max-connections): refused a connection from {peer} with 503",
                    hub.registry.cap()
                )
            });
            refuse(tcp);
            return;
        }
    };
    let registered = Registered {
        hub: Arc::clone(hub),
        id: activity.id,
    };
    tokio::spawn(async move {
        connection(&registered.hub, tcp, &activity).await;
        drop(registered);
    });
}

/// A connection's place in the registry, given up when its task ends, even by a panic
/// (else the place would stay taken and shutdown would wait for it until its deadline).
struct Registered {
    hub: Arc<Hub>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.hub.registry.remove(self.id);
    }
}

/// Answers 503 without reading the request, and closes: one non-blocking write, so a flood
/// of refusals holds no descriptor longer than the call.
fn refuse(tcp: TcpStream) {
    let body = r#"{"error":{"message":"the server has as many connections open as it allows (--max-connections); retry later","type":"server_error","param":null,"code":"too_many_connections"}}"#;
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let _ = tcp.try_write(format!("{head}{body}").as_bytes());
}

/// Serves one connection until it ends, times out, is evicted, or shutdown closes it.
async fn connection(hub: &Arc<Hub>, tcp: TcpStream, activity: &Arc<Activity>) {
    let service = {
        let app = hub.app.clone();
        let activity = Arc::clone(activity);
        let read_timeout = hub.limits.read_timeout;
        hyper::service::service_fn(move |req: Request<Incoming>| {
            activity.request_started();
            let req = req.map(|b| Body::new(StallGuarded::new(b, read_timeout)));
            let app = app.clone();
            let activity = Arc::clone(&activity);
            async move {
                let response = app
                    .oneshot(req)
                    .await
                    .unwrap_or_else(|e: Infallible| match e {});
                Ok::<_, Infallible>(response.map(|b| Tracked::new(b, activity)))
            }
        })
    };
    let conn = http1::Builder::new().keep_alive(true).serve_connection(
        TokioIo::new(Watched::new(tcp, Arc::clone(activity))),
        service,
    );
    tokio::pin!(conn);
    let mut stage = hub.stage.clone();
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            why = activity.expired(hub.limits.read_timeout, hub.limits.idle_timeout) => {
                match why {
                    Expiry::Header => {
                        hub.figures().header_timeouts.fetch_add(1, Relaxed);
                        hub.header_log.note(|| format!(
                            "closed a connection from {}: no complete request header in {} s \
                             (--read-timeout)",
                            activity.peer,
                            hub.limits.read_timeout.as_secs()
                        ));
                    }
                    Expiry::Idle => {
                        hub.figures().idle_timeouts.fetch_add(1, Relaxed);
                    }
                }
                return;
            }
            () = activity.evicted() => return,
            changed = stage.changed() => {
                let now = if changed.is_err() { Stage::Closing } else { *stage.borrow_and_update() };
                match now {
                    Stage::Serving => {}
                    Stage::Draining => {
                        if activity.phase().0 != Phase::Busy {
                            return;
                        }
                        // Finish the request in progress, then close.
                        conn.as_mut().graceful_shutdown();
                    }
                    Stage::Closing => return,
                }
            }
        }
    }
}
