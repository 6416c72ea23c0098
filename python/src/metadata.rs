//! The model file's metadata as llama-cpp-python's `Llama.metadata` holds it: every scalar
//! and string key, its value as text; arrays (the vocabulary, merges) are left out, as
//! llama.cpp leaves them out of `llama_model_meta_val_str`.

use std::path::Path;

use bitnet_gguf::{GgufFile, LoadMode, Value};
use pyo3::PyResult;

use crate::error::engine_error;

/// Reads the keys of the file at `path` (already loaded once, so it parses).
pub fn read(path: &Path) -> PyResult<Vec<(String, String)>> {
    let file = GgufFile::open(path, LoadMode::Mmap)
        .map_err(|e| engine_error(&format!("reading the metadata of {}", path.display()), &e))?;
    Ok(file
        .metadata()
        .iter()
        .filter_map(|(key, value)| as_text(value).map(|v| (key.to_owned(), v)))
        .collect())
}

fn as_text(value: &Value) -> Option<String> {
    Some(match value {
        Value::U8(v) => v.to_string(),
        Value::I8(v) => v.to_string(),
        Value::U16(v) => v.to_string(),
        Value::I16(v) => v.to_string(),
        Value::U32(v) => v.to_string(),
        Value::I32(v) => v.to_string(),
        Value::U64(v) => v.to_string(),
        Value::I64(v) => v.to_string(),
        Value::F32(v) => v.to_string(),
        Value::F64(v) => v.to_string(),
        Value::Bool(v) => v.to_string(),
        Value::String(v) => v.clone(),
        Value::Array(_) => return None,
    })
}
