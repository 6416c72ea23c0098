//! The tokenizer's error type. Every variant that comes from bad metadata names the GGUF key
//! at fault, so a broken file can be diagnosed without a debugger.

use thiserror::Error;

/// Why a tokenizer could not be built from a vocabulary.
#[derive(Debug, Error)]
pub enum TokenizerError {
    /// A required key is absent.
    #[error("tokenizer metadata: required key `{key}` is missing")]
    MissingKey {
        /// The GGUF metadata key.
        key: &'static str,
    },
    /// A key is present but its value cannot be used.
    #[error("tokenizer metadata: key `{key}`: {reason}")]
    InvalidKey {
        /// The GGUF metadata key.
        key: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// `tokenizer.ggml.model` names a tokenizer family this crate does not implement.
    #[error(
        "tokenizer metadata: key `tokenizer.ggml.model`: unsupported tokenizer model `{0}` (supported: llama, gpt2)"
    )]
    UnsupportedModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer this crate does not implement.
    #[error("tokenizer metadata: key `tokenizer.ggml.pre`: unknown pre-tokenizer `{0}`")]
    UnknownPreTokenizer(String),
}

impl TokenizerError {
    /// Shorthand for [`TokenizerError::InvalidKey`].
    pub(crate) fn invalid(key: &'static str, reason: impl Into<String>) -> Self {
        TokenizerError::InvalidKey {
            key,
            reason: reason.into(),
        }
    }
}
