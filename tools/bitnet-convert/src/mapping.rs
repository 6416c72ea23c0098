//! The tensor mapping: which Hugging Face tensor becomes which GGUF tensor, in what type,
//! and by which route (float copy, packed-ternary unpack, or absmean ternarization).
//!
//! The GGUF tensor list comes from the runtime's own [`ModelConfig::expected_tensors`], so
//! a converted file has exactly the tensors bitnet-core loads, named as llama.cpp names
//! them. Every checkpoint tensor must be used by exactly one GGUF tensor, apart from rope
//! caches (`rotary_emb.inv_freq`) and an `lm_head` that duplicates a tied embedding. The
//! BitNet embedding models (qwen3, gemma3) have names, types and routes of their own.
//!
//! This file picks the route; `mapping/ternary.rs` is the language models' (BitNet b1.58,
//! 1bitLLM, ternary Llama), `mapping/embedding.rs` the embedding models', and
//! `mapping/common.rs` what both use (types, jobs, the checks of a planned tensor).

mod common;
mod embedding;
mod ternary;

use std::path::Path;

use bitnet_gguf::TensorType;

use crate::error::ConvertError;
use crate::hf::HfConfig;
use crate::source::Sources;
use common::FLOAT_TYPES;

pub use common::{Job, OutputTypes, Route, TernarySource, TypeOptions, hf_names, model_config};

impl OutputTypes {
    /// The types for `cfg`'s route; a choice the route cannot write is refused.
    pub fn resolve(
        dir: &Path,
        cfg: &HfConfig,
        opts: &TypeOptions,
    ) -> Result<OutputTypes, ConvertError> {
        let refuse = |reason: String| ConvertError::Output {
            path: dir.to_owned(),
            reason,
        };
        let names = |types: &[TensorType]| {
            types
                .iter()
                .map(|t| t.name().to_ascii_lowercase())
                .collect::<Vec<_>>()
                .join(", ")
        };
        for (what, ty) in [("embedding type", opts.embd), ("head type", opts.head)] {
            if let Some(ty) = ty
                && !FLOAT_TYPES.contains(&ty)
            {
                return Err(refuse(format!(
                    "{what} {} is not supported here (one of {})",
                    ty.name(),
                    names(&FLOAT_TYPES)
                )));
            }
        }
        if cfg.is_embedding_model() {
            return embedding::output_types(cfg, opts).map_err(refuse);
        }
        ternary::output_types(cfg, opts, names).map_err(refuse)
    }
}

/// Plans every GGUF tensor of the checkpoint's route: resolves its source, checks shapes
/// and dtypes, and refuses missing and unexpected tensors.
pub fn plan(
    dir: &Path,
    cfg: &HfConfig,
    types: &OutputTypes,
    sources: &Sources,
) -> Result<Vec<Job>, ConvertError> {
    if cfg.is_embedding_model() {
        embedding::plan(dir, cfg, types, sources)
    } else {
        ternary::plan(dir, cfg, types, sources)
    }
}
