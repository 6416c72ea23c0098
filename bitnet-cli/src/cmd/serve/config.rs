//! The server's settings that the handlers read, from its flags.

use std::time::Duration;

use bitnet_core::scheduler::default_reply_budget;

use super::cors::CorsPolicy;
use crate::args::context::ContextArgs;

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
    /// The clean-up of a request that names none (`--clean-input`).
    pub clean_input: Option<bitnet_core::tokenizer::clean::CleanMode>,
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
