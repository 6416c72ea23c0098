//! Why a model could not be generated: its own file so that the vocabulary and weight
//! writers can report it without importing the generator that calls them.

use std::path::PathBuf;

use bitnet_gguf::GgufError;
use bitnet_kernels::KernelError;

use crate::config::ConfigError;

/// Why a model could not be generated.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SynthError {
    /// The spec asks for something impossible (sizes, block multiples, types).
    #[error("invalid model spec: {0}")]
    Spec(String),
    /// No preset of that name.
    #[error("unknown preset \"{name}\" (known: {known})")]
    UnknownPreset {
        /// The name asked for.
        name: String,
        /// The preset names.
        known: String,
    },
    /// The vocab GGUF could not be used.
    #[error("vocab file {path}: {reason}")]
    Vocab {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Creating, writing or renaming the output file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The GGUF writer refused the layout or data.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// A weight encoder refused its input.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// The generated header does not pass the config rules (a bad combination of options).
    #[error("generated model does not validate: {0}")]
    Config(#[from] ConfigError),
}
