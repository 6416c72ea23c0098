//! The converter's error type: every variant names the file, and where one is involved the
//! tensor or key, so a user can find what is wrong in their checkpoint without a debugger.

use std::path::PathBuf;

use bitnet_core::config::ConfigError;
use bitnet_core::tokenizer::TokenizerError;
use bitnet_gguf::GgufError;

/// Why a checkpoint could not be converted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConvertError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// An input is a directory, FIFO, device or socket where a regular file belongs.
    #[error("{path}: is {kind}, not a regular file")]
    NotRegularFile {
        /// The path.
        path: PathBuf,
        /// What it is instead ("a directory", "a FIFO (named pipe)"...).
        kind: &'static str,
    },
    /// The input is not a checkpoint folder (a file, or a directory without config.json):
    /// the converter takes the folder, not a file in it.
    #[error(
        "{path}: {reason}: bitnet-convert takes a Hugging Face checkpoint folder (a directory \
         with config.json and *.safetensors)"
    )]
    NotACheckpoint {
        /// The path given.
        path: PathBuf,
        /// What it is instead ("not a directory", "no config.json in it").
        reason: &'static str,
    },
    /// An input file is larger than any sane file of its kind.
    #[error("{path}: larger than the {limit} bytes such a file may have")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
    /// A JSON file does not parse.
    #[error("{path}: invalid JSON: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// A value in `config.json` (or another JSON file) is missing or out of range.
    #[error("{path}: {key}: {reason}")]
    BadValue {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The checkpoint's architecture is not one we convert.
    #[error("{path}: unsupported architecture {name}: {hint}")]
    UnknownArch {
        /// `config.json`.
        path: PathBuf,
        /// The `architectures` entry (or `model_type`).
        name: String,
        /// What we do convert.
        hint: String,
    },
    /// A safetensors file (or the shard index) is malformed.
    #[error("{path}: not a valid safetensors file: {reason}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the tensor where one is involved.
        reason: String,
    },
    /// No safetensors weights in the directory.
    #[error("{dir}: no model.safetensors, model.safetensors.index.json or *.safetensors file")]
    NoWeights {
        /// The checkpoint directory.
        dir: PathBuf,
    },
    /// A tensor the architecture needs is absent.
    #[error("{dir}: missing tensor {tensor} (needed for {gguf})")]
    MissingTensor {
        /// The checkpoint directory.
        dir: PathBuf,
        /// The Hugging Face name looked for (alternatives joined with " or ").
        tensor: String,
        /// The GGUF tensor it becomes.
        gguf: String,
    },
    /// A tensor the architecture does not use.
    #[error("{path}: unexpected tensor {tensor} for {arch} (not part of the architecture)")]
    ExtraTensor {
        /// The file holding it.
        path: PathBuf,
        /// Its name.
        tensor: String,
        /// The architecture converted.
        arch: String,
    },
    /// A tensor's shape or dtype differs from what `config.json` implies.
    #[error("{path}: tensor {tensor}: shape {found:?} {dtype}, expected {expected}")]
    ShapeMismatch {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its shape.
        found: Vec<usize>,
        /// Its dtype.
        dtype: String,
        /// What was expected, in words.
        expected: String,
    },
    /// A packed ternary tensor holds the 2-bit code 3, which is not -1, 0 or +1.
    #[error(
        "{path}: tensor {tensor}: packed ternary code 3 at row {row}, column {col} (only 0, 1, 2 = -1, 0, +1 are valid)"
    )]
    BadTernaryCode {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Unpacked row (output feature).
        row: usize,
        /// Column (input feature).
        col: usize,
    },
    /// A value is NaN or infinite.
    #[error("{path}: tensor {tensor}: non-finite value {value} at element {index}")]
    NonFinite {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Flat index of the element.
        index: usize,
        /// The value.
        value: f32,
    },
    /// Any other problem with one tensor (dtype, scale, block sizes).
    #[error("{path}: tensor {tensor}: {reason}")]
    Tensor {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// The tokenizer files cannot be converted.
    #[error("{path}: {reason}")]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The converted vocabulary does not build in our tokenizer.
    #[error("converted tokenizer does not load: {0}")]
    TokenizerCheck(#[from] TokenizerError),
    /// The output path cannot be used.
    #[error("output {path}: {reason}")]
    Output {
        /// The path given.
        path: PathBuf,
        /// Why not.
        reason: String,
    },
    /// The GGUF writer refused the layout or data.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The converted header does not pass the runtime's own checks (a converter bug, or
    /// options the runtime cannot load).
    #[error("the converted model would not load: {0}")]
    Validate(#[from] ConfigError),
    /// `--calibration`'s plan is for another number of layers.
    #[error(
        "the calibration plan has {plan_layers} layers and the checkpoint {model_layers}: \
         calibrate this model"
    )]
    Calibration {
        plan_layers: usize,
        model_layers: usize,
    },
    /// A weight encoder refused its input.
    #[error("{tensor}: {source}")]
    Encode {
        /// The GGUF tensor.
        tensor: String,
        /// The encoder's error.
        source: bitnet_kernels::KernelError,
    },
}

impl ConvertError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ConvertError {
        let path = path.into();
        move |source| ConvertError::Io { path, source }
    }
}
