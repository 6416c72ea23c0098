//! Hugging Face checkpoint files other than the weights: `config.json` (the architecture
//! and its hyper-parameters) and the JSON helpers the tokenizer readers share.

mod config;

pub use config::{HfConfig, ScaleMode};

use std::path::Path;

use serde_json::Value;

use crate::error::ConvertError;

/// Largest JSON file we read (a Llama-3 `tokenizer.json` is about 9 MB).
const MAX_JSON_BYTES: u64 = 256 << 20;

/// Reads and parses a JSON file.
pub fn read_json(path: &Path) -> Result<Value, ConvertError> {
    let len = std::fs::metadata(path)
        .map_err(ConvertError::io(path))?
        .len();
    if len > MAX_JSON_BYTES {
        return Err(ConvertError::BadValue {
            path: path.to_owned(),
            key: String::new(),
            reason: format!("{len} bytes, more than the {MAX_JSON_BYTES} a JSON file may have"),
        });
    }
    let bytes = std::fs::read(path).map_err(ConvertError::io(path))?;
    serde_json::from_slice(&bytes).map_err(|source| ConvertError::Json {
        path: path.to_owned(),
        source,
    })
}

/// Reads a JSON file if it exists.
pub fn read_json_opt(path: &Path) -> Result<Option<Value>, ConvertError> {
    if path.is_file() {
        read_json(path).map(Some)
    } else {
        Ok(None)
    }
}
