//! What the handlers share: the models served (`models/`), the server's settings, the
//! connection figures, and whether it is shutting down; and per model load, what its engine
//! thread publishes ([`Shared`]: the model once loaded, readiness, the model's figures).

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bitnet_core::chat::ChatTemplate;
use bitnet_core::embed::Pooling;
use bitnet_core::model::Model;
use bitnet_core::scheduler::default_reply_budget;
use bitnet_core::tokenizer::Tokenizer;
use serde_json::{Map, Value};

use super::cors::CorsPolicy;
use super::error::{ApiError, ApiResult};
use super::metrics::{ConnectionFigures, Metrics};
use super::models::{Models, Served};
use super::prefix_store::PrefixStore;
use super::request::model_name;
use super::slots::Slots;
use crate::args::context::ContextArgs;

/// Written by one model's engine thread, read by the handlers; a fresh one per load.
#[derive(Debug, Default)]
pub struct Shared {
    /// Set once the model is loaded (its warm-up follows: see `engine::Phase`).
    pub model: OnceLock<Loaded>,
    /// The model's figures: the same across its loads, so counters never run backwards.
    pub metrics: Arc<Metrics>,
}

impl Shared {
    pub fn new(metrics: Arc<Metrics>) -> Shared {
        Shared {
            model: OnceLock::new(),
            metrics,
        }
    }
}
#[derive(Debug)]
pub struct Loaded {
    pub model: Arc<Model>,
    /// Positions one sequence may reach (the shared KV pool's capacity).
    pub max_seq_len: usize,
    /// Bytes of the KV cache (counted against `--models-memory-max`).
    pub kv_bytes: u64,
    pub template: ChatTemplate,
    /// The pooling of embeddings (`--embeddings`; `None`: the server does not embed).
    pub pooling: Option<Pooling>,
    /// Why the file is an embedding model, when it is one (it names a pooling type, or its
    /// projections have their own input norms): its head is not a language model's, so
    /// completions are refused.
    pub embedding_model: Option<String>,
    /// Width of a hidden state (of an embedding before `dimensions`).
    pub n_embd: usize,
    /// llama-server's slots: each request's record, saved and restored by `/slots`.
    pub slots: Arc<Slots>,
    /// `--prefix-cache-dir`: where answered requests' rows are kept.
    pub prefix_store: Option<Arc<PrefixStore>>,
}

#[derive(Clone, Debug)]
pub struct Config {
    /// Keys a request may present (none: no key asked for).
    pub api_keys: Vec<String>,
    /// Origins whose pages may read the answers.
    pub cors: CorsPolicy,
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
    /// Speculative decoding (`--model-draft`: the default model's requests; `--lookup-ngram`:
    /// every model's).
    pub speculate: Option<bitnet_core::scheduler::SpecParams>,
    /// Whether `--model-draft` was given (it applies to the default model only).
    pub draft_model: bool,
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
    pub models: Arc<Models>,
    pub config: Config,
    /// The connection layer's figures (server-wide; each model has its own others).
    pub connections: Arc<ConnectionFigures>,
    pub shutting_down: AtomicBool,
}

impl AppState {
    pub fn new(models: Arc<Models>, config: Config) -> AppState {
        AppState {
            models,
            config,
            connections: Arc::default(),
            shutting_down: AtomicBool::new(false),
        }
    }

    /// 503 while the server is not serving: shutting down, or loading its default model
    /// at start (`/health` says the same).
    pub fn check_serving(&self) -> ApiResult<()> {
        if self.shutting_down.load(SeqCst) {
            return Err(ApiError::unavailable("the server is shutting down", None));
        }
        if !self.models.started() {
            return Err(ApiError::unavailable("Loading model", Some(1)));
        }
        Ok(())
    }

    /// The model a request names (`model`; none: the default), loaded: at once when it
    /// serves, else after its load, waiting for it with a place in the model's queue (see
    /// `models/`) and within `--timeout`.
    pub async fn route(&self, name: Option<&str>) -> ApiResult<Served> {
        self.check_serving()?;
        let entry = self.models.find(name)?;
        self.models.serve(&entry, &self.config).await
    }

    /// [`AppState::route`] for the model a request body names.
    pub async fn route_body(&self, body: &Map<String, Value>) -> ApiResult<Served> {
        self.route(model_name(body, self.models.routed())?).await
    }
}

impl Loaded {
    pub fn tokenizer(&self) -> ApiResult<&Tokenizer> {
        self.model
            .tokenizer()
            .ok_or_else(|| ApiError::internal("the model has no tokenizer"))
    }
}
