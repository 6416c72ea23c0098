//! The runtime's error type: one enum for everything `bitnet-core` can refuse, wrapping the
//! errors of the GGUF reader, the kernels, the config rules, the tokenizer and the thread
//! pool, plus the engine's own (missing or odd tensors, bad tokens, a full context).

use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CoreError {
    /// The GGUF file could not be opened or parsed.
    #[error(transparent)]
    Gguf(#[from] bitnet_gguf::GgufError),
    /// A kernel refused a shape or a kernel set.
    #[error(transparent)]
    Kernel(#[from] bitnet_kernels::KernelError),
    /// The file's metadata or tensor list does not describe a model we run.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The KV cache refused: it could not be set up as asked (sizes, memory, rotation), it
    /// is full, or a sequence handle is stale.
    #[error(transparent)]
    Kv(#[from] crate::kv::KvError),
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    /// The sampler configuration was refused.
    #[error(transparent)]
    Sampling(#[from] crate::sampling::SamplingError),
    /// A structured-output constraint was refused or failed.
    #[error(transparent)]
    Constraint(#[from] crate::constrain::ConstraintError),
    /// A request the scheduler refused at submit (context, prompt, parameters).
    #[error(transparent)]
    Request(#[from] crate::scheduler::RequestError),
    /// The thread pool could not be started.
    #[error(transparent)]
    Pool(#[from] crate::threadpool::PoolError),
    #[error(transparent)]
    Numa(#[from] crate::numa::NumaError),
    /// An I/O error outside the GGUF reader (locking memory, ...).
    #[error("{path}: {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A tensor's bytes or values cannot be used the way its type and shape say.
    #[error("tensor \"{name}\": {reason}")]
    BadTensor { name: String, reason: String },
    /// A combination the engine does not implement.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// An option value that makes no sense.
    #[error("invalid option {option}: {reason}")]
    InvalidOption {
        option: &'static str,
        reason: String,
    },
    /// A token id outside the vocabulary.
    #[error(
        "token id {token} at input position {index} is out of range (vocabulary has {n_vocab} tokens)"
    )]
    TokenOutOfRange {
        token: u32,
        index: usize,
        n_vocab: usize,
    },
    /// Evaluating the tokens would overflow the context.
    #[error(
        "context overflow: {n_past} tokens in the context + {n_new} new exceed n_ctx = {n_ctx} by {}",
        n_past + n_new - n_ctx
    )]
    ContextOverflow {
        n_past: usize,
        n_new: usize,
        n_ctx: usize,
    },
    /// `eval` was called with no tokens.
    #[error("no tokens to evaluate")]
    EmptyInput,
    /// The model file has no tokenizer, but one is needed.
    #[error("the model has no tokenizer metadata")]
    NoTokenizer,
}
