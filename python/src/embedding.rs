//! Embeddings from Python: inputs' tokens to vectors on the engine thread (each input its
//! own sequence, in the passes of whatever else runs), pooled as the file says or as the
//! `Llama` was told.

use bitnet_core::config::ModelConfig;
use bitnet_core::embed::{Normalize, Pooling};
use bitnet_core::runtime::{EmbedRequest, Handle, Reply};
use bitnet_core::scheduler::EmbedParams;
use pyo3::prelude::*;

use crate::error::{engine_error, refused};
use crate::replies::{Replies, next_reply};

/// `pooling=`: a name (`none`, `mean`, `cls`, `last`), else the file's `pooling_type`, else
/// last-token pooling (what a causal model trained for embeddings reads).
pub fn pooling(name: Option<&str>, config: &ModelConfig) -> PyResult<Pooling> {
    if let Some(name) = name {
        return Pooling::from_name(name).ok_or_else(|| {
            refused(format!(
                "pooling: {name:?} is not a pooling (none, mean, cls, last)"
            ))
        });
    }
    match config.pooling_type {
        None => Ok(Pooling::Last),
        Some(v) => Pooling::from_gguf(i64::from(v)).ok_or_else(|| {
            refused(format!(
                "the file's pooling_type {v} (rank) is not an embedding: pass pooling="
            ))
        }),
    }
}

/// The vectors of each input: one (pooled) or one a token (`Pooling::None`). `normalize`
/// is llama.cpp's `embd_normalize` (-1 none, 2 Euclidean).
pub fn embed(
    py: Python<'_>,
    handle: &Handle,
    inputs: Vec<Vec<u32>>,
    pooling: Pooling,
    normalize: i32,
) -> PyResult<Vec<Vec<Vec<f32>>>> {
    if let Some(i) = inputs.iter().position(Vec::is_empty) {
        return Err(refused(format!("input {i} is empty after tokenization")));
    }
    let n = inputs.len();
    let request = EmbedRequest {
        inputs,
        params: EmbedParams {
            pooling,
            normalize: Normalize(normalize),
        },
    };
    let replies = std::sync::Mutex::new(Replies::embed(handle, request)?);
    let mut out: Vec<Option<Vec<Vec<f32>>>> = vec![None; n];
    while let Some(reply) = next_reply(py, &replies)? {
        match reply {
            Reply::Embedding { index, embedding } => {
                if let Some(slot) = out.get_mut(index) {
                    *slot = Some(embedding);
                }
            }
            Reply::Error { error, .. } => return Err(engine_error("embedding", &error)),
            _ => {}
        }
    }
    out.into_iter()
        .enumerate()
        .map(|(i, v)| v.ok_or_else(|| refused(format!("input {i}: no embedding came back"))))
        .collect()
}
