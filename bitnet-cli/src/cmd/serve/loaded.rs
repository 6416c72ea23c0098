//! What one model's engine thread publishes for the handlers, a fresh one per load
//! ([`Shared`]): the model once it is loaded, with what the handlers need of it
//! ([`Loaded`]: context, template, pooling, slots, the prefix cache on disk), and the
//! model's figures.

use std::sync::{Arc, OnceLock};

use bitnet_core::chat::ChatTemplate;
use bitnet_core::embed::Pooling;
use bitnet_core::model::Model;
use bitnet_core::tokenizer::Tokenizer;

use super::error::{ApiError, ApiResult};
use super::metrics::Metrics;
use super::prefix_store::PrefixStore;
use super::slots::Slots;

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

impl Loaded {
    pub fn tokenizer(&self) -> ApiResult<&Tokenizer> {
        self.model
            .tokenizer()
            .ok_or_else(|| ApiError::internal("the model has no tokenizer"))
    }
}
