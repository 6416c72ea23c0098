//! One model the server serves: its names and file, where it stands (unloaded, loading,
//! loaded, failed), the handlers holding it (a model is never unloaded under a request),
//! the requests admitted to its queue, and its figures across loads.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::super::config::Config;
use super::super::engine::Running;
use super::super::error::{ApiError, ApiResult};
use super::super::loaded::Loaded;
use super::super::metrics::Metrics;

/// Where a model stands.
#[derive(Debug, Clone)]
pub enum State {
    Unloaded,
    /// Its engine thread is reading the file or warming up.
    Loading(Arc<Running>),
    Loaded(Arc<Running>),
    /// The last load failed: the error, causes included (the next request tries again).
    Failed(String),
}

impl State {
    /// The name `/v1/models` gives the state (llama-server's router says the same).
    pub fn name(&self) -> &'static str {
        match self {
            State::Unloaded => "unloaded",
            State::Loading(_) => "loading",
            State::Loaded(_) => "loaded",
            State::Failed(_) => "failed",
        }
    }

    /// The engine, while one runs or loads.
    pub fn running(&self) -> Option<&Arc<Running>> {
        match self {
            State::Loading(r) | State::Loaded(r) => Some(r),
            State::Unloaded | State::Failed(_) => None,
        }
    }
}

#[derive(Debug)]
struct Inner {
    state: State,
    /// Handlers holding the model: it is not unloaded while any does.
    users: usize,
    /// The tick of the last request for it: the least recently used idle model goes first.
    last_used: u64,
    /// File size plus KV cache bytes as of its last load (file size alone before one).
    footprint: u64,
}

#[derive(Debug)]
pub struct ModelEntry {
    /// The name `/v1/models` lists and answers carry.
    pub name: String,
    /// Other names requests may use.
    pub aliases: Vec<String>,
    pub path: PathBuf,
    pub is_default: bool,
    /// The model's figures, kept across loads.
    pub metrics: Arc<Metrics>,
    /// Requests admitted (running or waiting), bounded by `--parallel` + `--queue`.
    admitted: AtomicUsize,
    inner: Mutex<Inner>,
    /// Told whenever a model's last user lets go (shared by every entry: a load waiting for
    /// room listens to it).
    idle: Arc<Notify>,
}

impl ModelEntry {
    pub fn new(
        name: String,
        aliases: Vec<String>,
        path: PathBuf,
        is_default: bool,
        file_bytes: u64,
        idle: Arc<Notify>,
    ) -> ModelEntry {
        ModelEntry {
            name,
            aliases,
            path,
            is_default,
            metrics: Arc::default(),
            admitted: AtomicUsize::new(0),
            inner: Mutex::new(Inner {
                state: State::Unloaded,
                users: 0,
                last_used: 0,
                footprint: file_bytes,
            }),
            idle,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn state(&self) -> State {
        self.lock().state.clone()
    }

    pub fn set_state(&self, state: State) {
        self.lock().state = state;
    }

    /// Moves `from`'s load on to `to` (loaded, or failed), unless the entry has moved on
    /// from that load already; whether it did.
    pub fn finish_load(&self, from: &Arc<Running>, to: State) -> bool {
        let mut inner = self.lock();
        match &inner.state {
            State::Loading(r) if Arc::ptr_eq(r, from) => {
                if let Some(loaded) = from.shared.model.get() {
                    inner.footprint = file_bytes(&self.path) + loaded.kv_bytes;
                }
                inner.state = to;
                true
            }
            _ => false,
        }
    }

    /// Takes the model out of service if it is loaded and no handler holds it: the engine to
    /// shut down.
    pub fn take_if_idle(&self) -> Option<Arc<Running>> {
        let mut inner = self.lock();
        match &inner.state {
            State::Loaded(r) if inner.users == 0 => {
                let r = r.clone();
                inner.state = State::Unloaded;
                Some(r)
            }
            _ => None,
        }
    }

    /// Whether the model is loaded or loading (it counts against `--models-max`).
    pub fn is_resident(&self) -> bool {
        self.lock().state.running().is_some()
    }

    /// When the model was last used, if it is loaded and idle: a candidate to unload.
    pub fn idle_since(&self) -> Option<u64> {
        let inner = self.lock();
        (matches!(inner.state, State::Loaded(_)) && inner.users == 0).then_some(inner.last_used)
    }

    pub fn footprint(&self) -> u64 {
        self.lock().footprint
    }

    /// Holds the model for a handler (stamped `tick` for the LRU order).
    pub fn pin(self: &Arc<Self>, tick: u64) -> Pin {
        let mut inner = self.lock();
        inner.users += 1;
        inner.last_used = inner.last_used.max(tick);
        Pin {
            entry: Arc::clone(self),
        }
    }

    /// A place in the model's queue, or 503 with `Retry-After` when `--parallel` running
    /// plus `--queue` waiting are taken. The place is given back when the guard drops
    /// (answer sent, client gone, or failure).
    pub fn admit(&self, pin: &Pin, config: &Config) -> ApiResult<InFlight> {
        let cap = config.parallel + config.queue;
        let taken = self
            .admitted
            .fetch_update(SeqCst, SeqCst, |n| (n < cap).then_some(n + 1));
        if taken.is_err() {
            self.metrics.rejected.fetch_add(1, SeqCst);
            return Err(ApiError::unavailable(
                format!(
                    "the server is busy: {} running and {} waiting; retry later",
                    crate::output::count(config.parallel, "request"),
                    config.queue
                ),
                Some(1),
            ));
        }
        Ok(InFlight { pin: pin.again() })
    }
}

/// The size of the file at `path` (0 if it cannot be read: the load will say why).
pub fn file_bytes(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// A handler's hold on a model (see [`ModelEntry::pin`]).
#[derive(Debug)]
pub struct Pin {
    entry: Arc<ModelEntry>,
}

impl Pin {
    /// A second hold on the same model.
    fn again(&self) -> Pin {
        self.entry.lock().users += 1;
        Pin {
            entry: Arc::clone(&self.entry),
        }
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        let idle = {
            let mut inner = self.entry.lock();
            inner.users -= 1;
            inner.users == 0
        };
        if idle {
            self.entry.idle.notify_waiters();
        }
    }
}

/// One admitted request (see [`ModelEntry::admit`]); it holds the model too.
#[derive(Debug)]
pub struct InFlight {
    pin: Pin,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.pin.entry.admitted.fetch_sub(1, SeqCst);
    }
}

/// The model a request is served by, loaded and held for it.
#[derive(Debug)]
pub struct Served {
    pub entry: Arc<ModelEntry>,
    pub running: Arc<Running>,
    /// The place taken in the queue while the model loaded, if it had to.
    admitted: Option<InFlight>,
    pin: Pin,
}

impl Served {
    pub fn new(
        entry: Arc<ModelEntry>,
        running: Arc<Running>,
        pin: Pin,
        admitted: Option<InFlight>,
    ) -> Served {
        Served {
            entry,
            running,
            admitted,
            pin,
        }
    }

    /// The loaded model (always there: a `Served` is made once the model is ready).
    pub fn loaded(&self) -> ApiResult<&Loaded> {
        self.running
            .shared
            .model
            .get()
            .ok_or_else(|| ApiError::internal("the model is not loaded"))
    }

    /// The request's place in the model's queue: the one it waited in for the load, or a
    /// fresh one (503 when the queue is full).
    pub fn admit(&mut self, config: &Config) -> ApiResult<InFlight> {
        match self.admitted.take() {
            Some(place) => Ok(place),
            None => self.entry.admit(&self.pin, config),
        }
    }
}
