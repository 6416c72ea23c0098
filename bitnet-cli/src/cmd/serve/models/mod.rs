//! The models one server serves (llama-server's router mode): finding the one a request
//! names, loading it on first use on an engine thread of its own, and unloading the least
//! recently used idle one when `--models-max` (or `--models-memory-max`) would be passed.
//!
//! The rule, in one place: a load first makes room (the least recently used model that no
//! request holds is unloaded, its engine shut down; when every loaded model is busy, the
//! load waits for one to go idle), then starts the engine. Loads are decided one at a time
//! (`load_lock`); requests for a model already loaded never wait for that lock. A request
//! for a model that is not loaded takes its place in the model's queue first, so waiting
//! requests count against `--queue` and their `--timeout`. A model whose load fails answers
//! the requests that waited for it with a 500 naming the file and the error; the next
//! request tries again. Only the default model's failure at start stops the server.
//!
//! Files: `catalog.rs` reads the models and their names from the flags; `entry.rs` is one
//! model's state and the holds requests take on it.

mod catalog;
mod entry;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};

use anyhow::Result;
use tokio::sync::{Mutex as AsyncMutex, Notify, oneshot};

use super::args::Args;
use super::config::Config;
use super::engine::{self, LoadSpec, Running};
use super::error::{ApiError, ApiResult};
use super::loaded::Shared;
use crate::output::note;
pub use catalog::Catalog;
pub use entry::{InFlight, ModelEntry, Served, State};

/// Loads and unloads so far (for `/metrics`).
#[derive(Debug, Default)]
pub struct LoadFigures {
    pub loads: AtomicU64,
    pub unloads: AtomicU64,
    pub failures: AtomicU64,
}

#[derive(Debug)]
pub struct Models {
    /// The default model first.
    entries: Vec<Arc<ModelEntry>>,
    /// Every name and alias, to its entry's index.
    by_name: HashMap<String, usize>,
    /// Requests are routed by their `model` (else every request gets the one model).
    routed: bool,
    args: Arc<Args>,
    /// Models loaded at once (0: no limit).
    max_loaded: usize,
    /// Bytes loaded models may take (`None`: no budget).
    max_bytes: Option<u64>,
    /// One load decision at a time.
    load_lock: AsyncMutex<()>,
    /// Told when a model's last user lets go.
    idle: Arc<Notify>,
    /// Stamps requests for the LRU order.
    clock: AtomicU64,
    /// Set once the default model first serves: the server is up from then on.
    started: AtomicBool,
    pub figures: LoadFigures,
}

impl Models {
    pub fn new(catalog: Catalog, args: Arc<Args>) -> Models {
        let idle = Arc::new(Notify::new());
        let mut by_name = HashMap::new();
        let entries: Vec<Arc<ModelEntry>> = catalog
            .models
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                for n in std::iter::once(&m.name).chain(&m.aliases) {
                    by_name.insert(n.clone(), i);
                }
                let bytes = entry::file_bytes(&m.path);
                Arc::new(ModelEntry::new(
                    m.name,
                    m.aliases,
                    m.path,
                    i == 0,
                    bytes,
                    idle.clone(),
                ))
            })
            .collect();
        Models {
            entries,
            by_name,
            routed: catalog.routed,
            max_loaded: args.models_max,
            max_bytes: args
                .models_memory_max
                .map(|mib| mib.saturating_mul(1 << 20)),
            args,
            load_lock: AsyncMutex::new(()),
            idle,
            clock: AtomicU64::new(0),
            started: AtomicBool::new(false),
            figures: LoadFigures::default(),
        }
    }

    pub fn entries(&self) -> &[Arc<ModelEntry>] {
        &self.entries
    }

    pub fn default_entry(&self) -> &Arc<ModelEntry> {
        &self.entries[0]
    }

    /// Whether requests are routed by name (several models, or `--models-dir`).
    pub fn routed(&self) -> bool {
        self.routed
    }

    pub fn started(&self) -> bool {
        self.started.load(SeqCst)
    }

    /// The model `name` names (a name or an alias; none: the default), or the 404 that lists
    /// the names served. A single model answers to any name, as it always has.
    pub fn find(&self, name: Option<&str>) -> ApiResult<Arc<ModelEntry>> {
        match name {
            Some(n) if self.routed => self
                .by_name
                .get(n)
                .map(|&i| self.entries[i].clone())
                .ok_or_else(|| ApiError::model_not_served(n, &self.names())),
            _ => Ok(self.default_entry().clone()),
        }
    }

    /// The model `id` names exactly (for `GET /v1/models/{id}`).
    pub fn named(&self, id: &str) -> Option<&Arc<ModelEntry>> {
        self.by_name.get(id).map(|&i| &self.entries[i])
    }

    /// Every name served, aliases included, in the order the models were given.
    pub fn names(&self) -> Vec<String> {
        self.entries
            .iter()
            .flat_map(|e| std::iter::once(e.name.clone()).chain(e.aliases.iter().cloned()))
            .collect()
    }

    /// Models loaded or loading now.
    pub fn n_resident(&self) -> usize {
        self.entries.iter().filter(|e| e.is_resident()).count()
    }

    /// Starts the default model's engine at start. Its failure is sent whole to `failed`
    /// (the server stops); once it serves, the server is up.
    pub fn start_default(
        self: &Arc<Self>,
        failed: oneshot::Sender<anyhow::Error>,
    ) -> Result<Arc<Running>> {
        self.start(self.default_entry(), Some(failed))
    }

    /// Holds `entry` for a request and has it loaded: at once when it serves; else with a
    /// place in its queue, waiting for the load (started here if need be) within
    /// `--timeout`.
    pub async fn serve(
        self: &Arc<Self>,
        entry: &Arc<ModelEntry>,
        config: &Config,
    ) -> ApiResult<Served> {
        let pin = entry.pin(self.clock.fetch_add(1, SeqCst) + 1);
        if let State::Loaded(running) = entry.state() {
            return Ok(Served::new(entry.clone(), running, pin, None));
        }
        let place = entry.admit(&pin, config)?;
        let running = tokio::time::timeout(config.timeout, self.load(entry))
            .await
            .map_err(|_| ApiError::timeout(config.timeout.as_secs()))??;
        Ok(Served::new(entry.clone(), running, pin, Some(place)))
    }

    /// Waits until `entry` serves, starting its load (after making room) when none runs.
    async fn load(self: &Arc<Self>, entry: &Arc<ModelEntry>) -> ApiResult<Arc<Running>> {
        let running = match entry.state().running() {
            Some(r) => r.clone(),
            None => {
                let _decision = self.load_lock.lock().await;
                match entry.state().running() {
                    Some(r) => r.clone(),
                    None => {
                        self.make_room(entry).await;
                        self.start(entry, None)
                            .map_err(|e| load_error(entry, &crate::output::error_chain(&e)))?
                    }
                }
            }
        };
        let outcome = running.ready().await;
        self.settle(
            entry,
            &running,
            outcome.as_ref().map(|_| ()).map_err(String::as_str),
        );
        outcome.map_err(|why| load_error(entry, &why))?;
        Ok(running)
    }

    /// Unloads least recently used idle models until `entry` may load; waits for one to go
    /// idle when every loaded model is busy.
    async fn make_room(&self, entry: &Arc<ModelEntry>) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            // Listening before looking, so a model going idle in between is not missed.
            idle.as_mut().enable();
            let others: Vec<&Arc<ModelEntry>> = self
                .entries
                .iter()
                .filter(|e| !Arc::ptr_eq(e, entry) && e.is_resident())
                .collect();
            let bytes: u64 = others.iter().map(|e| e.footprint()).sum();
            let over_count = self.max_loaded > 0 && others.len() >= self.max_loaded;
            let over_bytes = self
                .max_bytes
                .is_some_and(|max| !others.is_empty() && bytes + entry.footprint() > max);
            if !over_count && !over_bytes {
                return;
            }
            let victim = others
                .iter()
                .filter_map(|e| e.idle_since().map(|t| (t, *e)))
                .min_by_key(|(t, _)| *t)
                .map(|(_, e)| e);
            match victim.and_then(|v| v.take_if_idle().map(|r| (v, r))) {
                Some((v, running)) => self.unload(v, running).await,
                None => idle.await,
            }
        }
    }

    /// Shuts down `running`, `entry`'s engine (already out of service), and waits for its
    /// thread, so its memory is freed before the next model loads.
    async fn unload(&self, entry: &ModelEntry, running: Arc<Running>) {
        note!("unloading the model {} (least recently used)", entry.name);
        // Counted before the wait: a request that times out meanwhile drops this future,
        // not the shutdown, which runs to its end.
        self.figures.unloads.fetch_add(1, SeqCst);
        let metrics = entry.metrics.clone();
        let _ = tokio::task::spawn_blocking(move || {
            running.shutdown();
            metrics.clear_engine_state();
        })
        .await;
    }

    /// Starts `entry`'s engine thread and a task that follows its load to its end.
    fn start(
        self: &Arc<Self>,
        entry: &Arc<ModelEntry>,
        failed: Option<oneshot::Sender<anyhow::Error>>,
    ) -> Result<Arc<Running>> {
        let spec = LoadSpec {
            args: self.args.clone(),
            path: entry.path.clone(),
            draft: entry.is_default,
            embed_if_embedding_model: self.routed,
            label: if self.routed {
                format!("{}: ", entry.name)
            } else {
                String::new()
            },
        };
        if self.routed {
            note!(
                "loading the model {} ({})",
                entry.name,
                entry.path.display()
            );
        }
        let shared = Arc::new(Shared::new(entry.metrics.clone()));
        let running = Arc::new(engine::spawn(spec, shared, failed)?);
        entry.set_state(State::Loading(running.clone()));
        let (models, entry, followed) = (self.clone(), entry.clone(), running.clone());
        tokio::spawn(async move { models.follow(&entry, followed).await });
        Ok(running)
    }

    /// Moves `entry` on when its load ends: loaded, or failed (its thread then joined).
    async fn follow(&self, entry: &ModelEntry, running: Arc<Running>) {
        let outcome = running.ready().await;
        self.settle(
            entry,
            &running,
            outcome.as_ref().map(|_| ()).map_err(String::as_str),
        );
        if outcome.is_err() {
            let _ = tokio::task::spawn_blocking(move || running.shutdown()).await;
        }
    }

    /// Records how `running`, `entry`'s load, ended (once: [`Models::follow`] and the
    /// requests that waited for it all report it, whoever hears first).
    fn settle(&self, entry: &ModelEntry, running: &Arc<Running>, outcome: Result<(), &str>) {
        match outcome {
            Ok(()) => {
                if entry.finish_load(running, State::Loaded(running.clone())) {
                    self.figures.loads.fetch_add(1, SeqCst);
                    if entry.is_default {
                        self.started.store(true, SeqCst);
                    }
                    // A load that waits for room may now unload this one, if no request
                    // holds it (those that asked for it may have timed out meanwhile).
                    self.idle.notify_waiters();
                }
            }
            Err(why) => {
                if entry.finish_load(running, State::Failed(why.to_owned())) {
                    self.figures.failures.fetch_add(1, SeqCst);
                    // At start the server stops with the error instead.
                    if self.started() {
                        note!("warning: the model {} failed to load: {why}", entry.name);
                    }
                }
            }
        }
    }

    /// Cancels every running request (shutdown's deadline has passed).
    pub fn cancel_all(&self) {
        for e in &self.entries {
            if let Some(r) = e.state().running() {
                r.engine.cancel_all();
            }
        }
    }

    /// Ends every engine thread and waits for them (the server is stopping).
    pub fn shutdown(&self) {
        for e in &self.entries {
            if let Some(r) = e.state().running() {
                r.shutdown();
            }
        }
    }
}

/// The 500 of a request whose model could not be loaded.
fn load_error(entry: &ModelEntry, why: &str) -> ApiError {
    ApiError {
        code: Some("model_load_failed"),
        ..ApiError::internal(format!(
            "the model {} ({}) could not be loaded: {why}",
            entry.name,
            entry.path.display()
        ))
    }
}
