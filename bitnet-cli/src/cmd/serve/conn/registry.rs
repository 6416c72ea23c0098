//! The open connections, bounded by `--max-connections`. At the cap a new connection takes
//! the place of the one that has waited longest without a request in progress (idle, or
//! sending its header slowly): a client with a request ready gets in, and a flood of silent
//! sockets only pushes out its own kind. When every connection is serving a request, the new
//! one is refused with 503.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;

use tokio::sync::watch;

use super::super::metrics::ConnectionFigures;
use super::activity::{Activity, Phase};

#[derive(Debug)]
pub struct Registry {
    cap: usize,
    open: Mutex<(u64, HashMap<u64, Arc<Activity>>)>,
    count: watch::Sender<usize>,
    /// `/metrics`' open-connection gauge, set under the lock with the count: set outside it,
    /// an admission and a removal could land in either order and the gauge pass the cap.
    figures: Arc<ConnectionFigures>,
}

#[derive(Debug)]
pub enum Admission {
    Admitted(Arc<Activity>),
    /// Admitted in the place of `evicted`, which has been asked to close.
    Replaced {
        admitted: Arc<Activity>,
        evicted: Arc<Activity>,
    },
    Refused,
}

impl Registry {
    pub fn new(cap: usize, figures: Arc<ConnectionFigures>) -> Registry {
        Registry {
            cap: cap.max(1),
            open: Mutex::new((0, HashMap::new())),
            count: watch::channel(0).0,
            figures,
        }
    }

    fn publish(&self, n: usize) {
        self.count.send_replace(n);
        self.figures.open.store(n as u64, Relaxed);
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    pub fn len(&self) -> usize {
        *self.count.borrow()
    }

    pub fn admit(&self, peer: SocketAddr) -> Admission {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let evicted = if open.1.len() >= self.cap {
            let victim = open
                .1
                .values()
                .filter_map(|a| {
                    let (phase, since) = a.phase();
                    (phase != Phase::Busy).then_some((since, a))
                })
                .min_by_key(|(since, _)| *since)
                .map(|(_, a)| Arc::clone(a));
            let Some(victim) = victim else {
                return Admission::Refused;
            };
            // Out of the count now: its task may take a moment to close the socket.
            open.1.remove(&victim.id);
            victim.evict();
            Some(victim)
        } else {
            None
        };
        open.0 += 1;
        let admitted = Arc::new(Activity::new(open.0, peer));
        open.1.insert(admitted.id, Arc::clone(&admitted));
        self.publish(open.1.len());
        match evicted {
            Some(evicted) => Admission::Replaced { admitted, evicted },
            None => Admission::Admitted(admitted),
        }
    }

    pub fn remove(&self, id: u64) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.1.remove(&id).is_some() {
            self.publish(open.1.len());
        }
    }

    /// Resolves once no connection is open.
    pub async fn all_closed(&self) {
        let mut rx = self.count.subscribe();
        let _ = rx.wait_for(|&n| n == 0).await;
    }
}
