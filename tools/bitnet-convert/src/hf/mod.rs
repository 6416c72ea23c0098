//! Hugging Face checkpoint files other than the weights: `config.json` (the architecture
//! and its hyper-parameters; the embedding models' in `embedding.rs`), sentence-transformers'
//! pooling files, and the JSON helpers the tokenizer readers share.

mod config;
mod embedding;
pub mod pooling;

pub use config::{HfConfig, ScaleMode};

use std::path::Path;

use serde_json::Value;

use crate::error::ConvertError;

impl HfConfig {
    /// Reads `config.json` in `dir`.
    pub fn read(dir: &Path) -> Result<HfConfig, ConvertError> {
        let path = dir.join("config.json");
        let v = read_json(&path)?;
        Self::from_value(&path, &v)
    }

    /// Parses an already-read `config.json`: the BitNet embedding models by their
    /// `model_type` (`embedding.rs`), the language models by their `architectures`
    /// (`config.rs`).
    pub fn from_value(path: &Path, v: &Value) -> Result<HfConfig, ConvertError> {
        if let Some(model_type) = v.get("model_type").and_then(Value::as_str)
            && embedding::is_embedding_model_type(model_type)
        {
            return embedding::from_value(path, v, model_type);
        }
        Self::from_lm_value(path, v)
    }
}

/// Largest JSON file we read (a Llama-3 `tokenizer.json` is about 9 MB).
const MAX_JSON_BYTES: u64 = 256 << 20;

/// Reads and parses a JSON file (a regular file of at most 256 MiB).
pub fn read_json(path: &Path) -> Result<Value, ConvertError> {
    let bytes = crate::files::read_capped(path, MAX_JSON_BYTES)?;
    serde_json::from_slice(&bytes).map_err(|source| ConvertError::Json {
        path: path.to_owned(),
        source,
    })
}

/// Reads a JSON file if it exists; a directory or FIFO at its path is an error, not absence.
pub fn read_json_opt(path: &Path) -> Result<Option<Value>, ConvertError> {
    if crate::files::is_present(path)? {
        read_json(path).map(Some)
    } else {
        Ok(None)
    }
}
