//! What the handlers share: the model once it is loaded, readiness, the figures, the
//! handle of the engine thread, the server's settings, and the count of requests in flight
//! that bounds the queue.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bitnet_core::chat::ChatTemplate;
use bitnet_core::embed::Pooling;
use bitnet_core::model::Model;
use bitnet_core::runtime::Handle;
use bitnet_core::scheduler::default_reply_budget;
use bitnet_core::tokenizer::Tokenizer;

use super::cors::CorsPolicy;
use super::error::{ApiError, ApiResult};
use super::metrics::Metrics;
use crate::args::context::ContextArgs;

/// Written by the engine thread, read by the handlers.
#[derive(Debug, Default)]
pub struct Shared {
    /// Set once the model is loaded.
    pub model: OnceLock<Loaded>,
    /// Set after the warm-up: `/health` says 200 from then on.
    pub ready: AtomicBool,
    pub metrics: Metrics,
}

#[derive(Debug)]
pub struct Loaded {
    pub model: Arc<Model>,
    /// Positions one sequence may reach (the shared KV pool's capacity).
    pub max_seq_len: usize,
    pub template: ChatTemplate,
    /// The pooling of embeddings (`--embeddings`; `None`: the server does not embed).
    pub pooling: Option<Pooling>,
    /// Why the file is an embedding model, when it is one (it names a pooling type, or its
    /// projections have their own input norms): its head is not a language model's, so
    /// completions are refused.
    pub embedding_model: Option<String>,
    /// Width of a hidden state (of an embedding before `dimensions`).
    pub n_embd: usize,
}

#[derive(Clone, Debug)]
pub struct Config {
    /// Keys a request may present (none: no key asked for).
    pub api_keys: Vec<String>,
    /// Origins whose pages may read the answers.
    pub cors: CorsPolicy,
    pub model_name: String,
    pub timeout: Duration,
    /// Requests decoded together.
    pub parallel: usize,
    /// Requests that may wait beyond those.
    pub queue: usize,
    pub max_body: usize,
    /// Tokens generated when a request names no `max_tokens` (`usize::MAX`: until the
    /// context is full); `None`: the default reply budget (see [`Config::reply_budget`]).
    pub n_predict: Option<usize>,
    /// What a request does when its sequence fills the context.
    pub context: ContextArgs,
    /// Speculative decoding of every request (`--model-draft`, `--lookup-ngram`).
    pub speculate: Option<bitnet_core::scheduler::SpecParams>,
    /// How long in-flight requests may finish after a shutdown signal.
    pub shutdown_timeout: Duration,
    /// Serve embeddings instead of completions (`--embeddings`).
    pub embeddings: bool,
}

impl Config {
    /// Tokens a request that names no `max_tokens` may generate in a context of `n_ctx`
    /// positions (before the cut to the room its prompt leaves): `-n`, else the default
    /// reply budget, which leaves room for a conversation's next turn.
    pub fn reply_budget(&self, n_ctx: usize) -> usize {
        self.n_predict
            .unwrap_or_else(|| default_reply_budget(n_ctx))
    }
}

#[derive(Debug)]
pub struct AppState {
    pub shared: Arc<Shared>,
    pub engine: Handle,
    pub config: Config,
    in_flight: AtomicUsize,
    pub shutting_down: AtomicBool,
}

impl AppState {
    pub fn new(shared: Arc<Shared>, engine: Handle, config: Config) -> AppState {
        AppState {
            shared,
            engine,
            config,
            in_flight: AtomicUsize::new(0),
            shutting_down: AtomicBool::new(false),
        }
    }

    /// The model, or 503 while it loads and warms up.
    pub fn ready(&self) -> ApiResult<&Loaded> {
        if self.shutting_down.load(SeqCst) {
            return Err(ApiError::unavailable("the server is shutting down", None));
        }
        match self.shared.model.get() {
            Some(m) if self.shared.ready.load(SeqCst) => Ok(m),
            _ => Err(ApiError::unavailable("Loading model", Some(1))),
        }
    }

    /// A place for one generation request, or 503 with `Retry-After` when `--parallel`
    /// running plus `--queue` waiting are taken. The place is given back when the guard
    /// drops (answer sent, client gone, or failure).
    pub fn admit(self: &Arc<Self>) -> ApiResult<InFlight> {
        let cap = self.config.parallel + self.config.queue;
        let taken = self
            .in_flight
            .fetch_update(SeqCst, SeqCst, |n| (n < cap).then_some(n + 1));
        if taken.is_err() {
            self.shared.metrics.rejected.fetch_add(1, SeqCst);
            return Err(ApiError::unavailable(
                format!(
                    "the server is busy: {} running and {} waiting; retry later",
                    crate::output::count(self.config.parallel, "request"),
                    self.config.queue
                ),
                Some(1),
            ));
        }
        Ok(InFlight {
            state: Arc::clone(self),
        })
    }
}

impl Loaded {
    pub fn tokenizer(&self) -> ApiResult<&Tokenizer> {
        self.model
            .tokenizer()
            .ok_or_else(|| ApiError::internal("the model has no tokenizer"))
    }
}

/// One admitted request (see [`AppState::admit`]).
#[derive(Debug)]
pub struct InFlight {
    state: Arc<AppState>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.state.in_flight.fetch_sub(1, SeqCst);
    }
}
