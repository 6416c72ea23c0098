//! `--pooling none|mean|cls|last` (`bitnet embed`, `bitnet serve --embeddings`) and the
//! pooling a model gets without it: the file's `{arch}.pooling_type` (llama.cpp's rule), else
//! the last token's, said in a note: the models this runtime reads are causal, and a causal
//! model trained for embeddings reads its last token.

use anyhow::{Context, Result};
use bitnet_core::config::ModelConfig;
use bitnet_core::embed::Pooling;

use crate::output::note;

/// The values `--pooling` takes.
pub const POOLING_NAMES: [&str; 4] = ["none", "mean", "cls", "last"];

/// The pooling named by `flag` (one of [`POOLING_NAMES`], clap checked), else the file's;
/// a file that names none gets last-token pooling, with a note that says so. The file's rank
/// pooling (a classifier head) is refused: it is not an embedding.
pub fn choose_pooling(flag: Option<&str>, config: &ModelConfig) -> Result<Pooling> {
    if let Some(name) = flag {
        return Pooling::from_name(name).with_context(|| format!("unknown pooling {name:?}"));
    }
    match config.pooling_type {
        None => {
            note!(
                "the file names no pooling_type: last-token pooling, the default for causal \
                 models (--pooling to choose)"
            );
            Ok(Pooling::Last)
        }
        Some(v) => Pooling::from_gguf(i64::from(v)).with_context(|| {
            format!("the file's pooling_type {v} (rank) is not an embedding: pass --pooling")
        }),
    }
}
