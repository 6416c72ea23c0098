//! The config's error type: every variant names the metadata key or tensor at fault.

/// Why a file's metadata or tensor list does not describe a model we can run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A required metadata key is absent.
    #[error("missing metadata key \"{key}\"")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A key holds a value of the wrong type.
    #[error("metadata key \"{key}\": expected {expected}, found {found}")]
    WrongType {
        /// The key.
        key: String,
        /// What was expected.
        expected: &'static str,
        /// The type stored.
        found: &'static str,
    },
    /// A key's value is out of range or not one of the accepted values.
    #[error("metadata key \"{key}\" = {value}: {reason}")]
    BadValue {
        /// The key.
        key: String,
        /// The value, printed.
        value: String,
        /// Why it is refused.
        reason: String,
    },
    /// `general.architecture` names an architecture we do not run.
    #[error(
        "unsupported architecture \"{name}\" (supported: bitnet-b1.58, bitnet-25, bitnet, llama, qwen3, gemma3)"
    )]
    UnknownArch {
        /// The name found.
        name: String,
    },
    /// Values that are each fine but contradict each other.
    #[error("inconsistent hyper-parameters: {0}")]
    Inconsistent(String),
    /// A tensor the architecture needs is absent.
    #[error("missing tensor \"{name}\"")]
    MissingTensor {
        /// The tensor.
        name: String,
    },
    /// A tensor the architecture does not use (llama.cpp refuses these too).
    #[error("unexpected tensor \"{name}\" for architecture {arch}")]
    UnexpectedTensor {
        /// The tensor.
        name: String,
        /// The architecture name.
        arch: String,
    },
    /// A tensor's dims differ from what the hyper-parameters imply.
    #[error("tensor \"{name}\" has dims {found:?}, expected {expected:?} (ggml order)")]
    TensorShape {
        /// The tensor.
        name: String,
        /// Dims implied by the config.
        expected: Vec<u64>,
        /// Dims in the file.
        found: Vec<u64>,
    },
    /// A tensor stored in a type we cannot use for its role.
    #[error("tensor \"{name}\" has type {ty}, not supported for {role} (supported: {allowed})")]
    UnsupportedType {
        /// The tensor.
        name: String,
        /// Its type's name.
        ty: &'static str,
        /// Its role.
        role: &'static str,
        /// The types accepted for that role.
        allowed: &'static str,
    },
}
