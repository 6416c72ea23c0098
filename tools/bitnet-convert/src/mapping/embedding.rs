//! The BitNet embedding models' tensors (qwen3, gemma3) as bitnet.cpp's embedding converter
//! names and stores them (`utils/convert-bitnet-embedding-to-gguf.py`,
//! `build_tensor_name_map` and its type rules):
//! - names: the checkpoint's, with or without the `model.` prefix (`Qwen3Model` /
//!   `Gemma3TextModel` save none); each projection's BitLinear input norm
//!   `layers.N.self_attn.q_proj.norm.weight` becomes `blk.N.attn_q_norm_in.weight`, and so
//!   on; Gemma3's `post_attention_layernorm` is `post_attention_norm`, its
//!   `pre_feedforward_layernorm` `ffn_norm` (Qwen3's `post_attention_layernorm`);
//! - types: with `--outtype i2_s` the projections are I2_S (absmean, as the reference's
//!   `quantize_to_i2_s`), the embedding and every norm F16; `f16` keeps the projections F16
//!   (the runtime ternarizes them at load), `f32` writes everything F32;
//! - Gemma's norms multiply by `1 + w`: every `*_norm.weight` is written as `1 + w` (f32
//!   arithmetic, then the cast), the `*_norm_in` weights (plain BitLinear RMSNorms) as they
//!   are;
//! - no output head: an `lm_head.weight` is skipped, as the reference skips it.
//!
//! A checkpoint without the input norms is a full-precision (teacher) model: it converts as
//! a plain qwen3 / gemma3 with float projections (`f16` / `f32`), and I2_S, which would
//! ternarize it into another function, is refused.

use std::collections::BTreeSet;
use std::path::Path;

use bitnet_core::config::{Arch, TensorRole};
use bitnet_gguf::{TensorInfo, TensorType};

use super::common::{
    Job, OutputTypes, Route, TernarySource, TypeOptions, check_blocks, find_source, is_float,
    model_config, refuse_unused, shape_mismatch,
};
use crate::error::ConvertError;
use crate::hf::HfConfig;
use crate::source::Sources;

/// The projection types the reference's `--outtype` offers.
const OUTTYPES: [TensorType; 3] = [TensorType::I2_S, TensorType::F16, TensorType::F32];

/// The types of the embedding route: the reference's, but for an explicit `--embd-type`.
pub(super) fn output_types(cfg: &HfConfig, opts: &TypeOptions) -> Result<OutputTypes, String> {
    if !OUTTYPES.contains(&opts.weights) {
        return Err(format!(
            "output type {} is not written for the embedding model {} (i2_s, f16 or f32, as \
             bitnet.cpp's embedding converter)",
            opts.weights.name(),
            cfg.hf_arch
        ));
    }
    if let Some(head) = opts.head {
        return Err(format!(
            "{} is an embedding model: no output head is written, so a head type ({}) has \
             nothing to set",
            cfg.hf_arch,
            head.name()
        ));
    }
    let float = if opts.weights == TensorType::F32 {
        TensorType::F32
    } else {
        TensorType::F16
    };
    Ok(OutputTypes {
        weights: opts.weights,
        embd: opts.embd.unwrap_or(float),
        head: float,
        norms: float,
    })
}

/// The checkpoint name (under `prefix`, `model.` or nothing) of GGUF tensor `gguf`.
fn hf_name(gguf: &str, arch: Arch, prefix: &str) -> String {
    let base = match gguf {
        "token_embd.weight" => "embed_tokens.weight".to_owned(),
        "output_norm.weight" => "norm.weight".to_owned(),
        _ => {
            let rest = gguf.strip_prefix("blk.").unwrap_or(gguf);
            let (layer, stem) = rest.split_once('.').unwrap_or(("?", rest));
            let stem = stem.strip_suffix(".weight").unwrap_or(stem);
            let hf = match (stem, arch) {
                ("attn_norm", _) => "input_layernorm",
                ("attn_q", _) => "self_attn.q_proj",
                ("attn_k", _) => "self_attn.k_proj",
                ("attn_v", _) => "self_attn.v_proj",
                ("attn_output", _) => "self_attn.o_proj",
                ("attn_q_norm", _) => "self_attn.q_norm",
                ("attn_k_norm", _) => "self_attn.k_norm",
                ("attn_q_norm_in", _) => "self_attn.q_proj.norm",
                ("attn_k_norm_in", _) => "self_attn.k_proj.norm",
                ("attn_v_norm_in", _) => "self_attn.v_proj.norm",
                ("attn_output_norm_in", _) => "self_attn.o_proj.norm",
                ("ffn_gate", _) => "mlp.gate_proj",
                ("ffn_up", _) => "mlp.up_proj",
                ("ffn_down", _) => "mlp.down_proj",
                ("ffn_gate_norm_in", _) => "mlp.gate_proj.norm",
                ("ffn_up_norm_in", _) => "mlp.up_proj.norm",
                ("ffn_down_norm_in", _) => "mlp.down_proj.norm",
                ("ffn_norm", Arch::Gemma3) => "pre_feedforward_layernorm",
                ("ffn_norm", _) => "post_attention_layernorm",
                ("post_attention_norm", _) => "post_attention_layernorm",
                ("post_ffw_norm", _) => "post_feedforward_layernorm",
                (other, _) => other,
            };
            format!("layers.{layer}.{hf}.weight")
        }
    };
    format!("{prefix}{base}")
}

/// Checkpoint tensors the GGUF has no place for and that change nothing it computes.
fn ignorable(name: &str) -> bool {
    name.ends_with("rotary_emb.inv_freq") || name == "lm_head.weight"
}

/// What a tensor's expected shape follows from, for a shape error: the attention tensors'
/// widths come from the heads and `head_dim`, which a config can get wrong.
fn expected_shape(gguf: &str, hf_shape: &[usize], cfg: &HfConfig) -> String {
    let attn = [
        "attn_q.",
        "attn_k.",
        "attn_v.",
        "attn_output",
        "attn_q_norm",
        "attn_k_norm",
    ];
    let mut s = format!("F32/F16/BF16 {hf_shape:?}");
    if attn.iter().any(|a| gguf.contains(a)) {
        s.push_str(&format!(
            " (config.json: {} heads and {} key/value heads of head_dim {})",
            cfg.n_head, cfg.n_head_kv, cfg.head_dim
        ));
    }
    s
}

/// Plans every GGUF tensor of an embedding model.
pub(super) fn plan(
    dir: &Path,
    cfg: &HfConfig,
    types: &OutputTypes,
    sources: &Sources,
) -> Result<Vec<Job>, ConvertError> {
    let prefix = if sources.tensors.contains_key("model.embed_tokens.weight") {
        "model."
    } else {
        ""
    };
    let mut mc = model_config(cfg, types);
    // BitLinear input norms in any layer make it a BitNet model; then every layer needs all
    // seven (a missing one is named below).
    mc.proj_norms = sources
        .tensors
        .keys()
        .any(|n| n.ends_with("_proj.norm.weight"));
    if !mc.proj_norms
        && types.weights == TensorType::I2_S
        && let Some(q) = sources
            .tensors
            .get(&format!("{prefix}layers.0.self_attn.q_proj.weight"))
    {
        return Err(ConvertError::Tensor {
            path: sources.path(q).to_owned(),
            tensor: q.name.clone(),
            reason: "no projection has a BitLinear input norm (q_proj.norm.weight ...): this \
                     is a full-precision model, which I2_S would ternarize into another \
                     function; convert it with --outtype f16 or f32 (kept float)"
                .into(),
        });
    }
    let mut used: BTreeSet<&str> = BTreeSet::new();
    let mut jobs = Vec::new();
    for e in mc.expected_tensors() {
        let name = hf_name(&e.name, cfg.arch, prefix);
        let src = find_source(dir, sources, &[name], &e.name)?;
        used.insert(src.name.as_str());
        let ty = match e.role {
            TensorRole::Embedding => types.embd,
            TensorRole::Matrix => types.weights,
            TensorRole::Norm | TensorRole::Scale | TensorRole::Head => types.norms,
        };
        let hf_shape: Vec<usize> = e.dims.iter().rev().map(|&d| d as usize).collect();
        if !is_float(src.dtype) || src.shape != hf_shape {
            return Err(shape_mismatch(
                sources,
                src,
                expected_shape(&e.name, &hf_shape, cfg),
            ));
        }
        check_blocks(&e.name, &e.dims, ty, sources, src)?;
        let gemma_norm = cfg.arch == Arch::Gemma3
            && e.role == TensorRole::Norm
            && !e.name.ends_with("_norm_in.weight");
        let route = if e.role == TensorRole::Matrix && ty == TensorType::I2_S {
            Route::Ternary {
                source: TernarySource::LatentNumpy,
                permute_heads: None,
            }
        } else if gemma_norm {
            Route::FloatPlusOne
        } else {
            Route::Float
        };
        jobs.push(Job {
            info: TensorInfo::new(e.name.clone(), e.dims.clone(), ty)?,
            role: e.role,
            src: src.clone(),
            route,
        });
    }
    refuse_unused(cfg, sources, &used, ignorable)?;
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_reference_map() {
        let g = |n: &str| hf_name(n, Arch::Gemma3, "");
        let q = |n: &str| hf_name(n, Arch::Qwen3, "model.");
        assert_eq!(q("token_embd.weight"), "model.embed_tokens.weight");
        assert_eq!(q("output_norm.weight"), "model.norm.weight");
        assert_eq!(
            q("blk.3.attn_output_norm_in.weight"),
            "model.layers.3.self_attn.o_proj.norm.weight"
        );
        assert_eq!(
            q("blk.0.ffn_norm.weight"),
            "model.layers.0.post_attention_layernorm.weight"
        );
        assert_eq!(
            g("blk.0.ffn_norm.weight"),
            "layers.0.pre_feedforward_layernorm.weight"
        );
        assert_eq!(
            g("blk.1.post_attention_norm.weight"),
            "layers.1.post_attention_layernorm.weight"
        );
        assert_eq!(
            g("blk.1.post_ffw_norm.weight"),
            "layers.1.post_feedforward_layernorm.weight"
        );
        assert_eq!(
            g("blk.2.ffn_down_norm_in.weight"),
            "layers.2.mlp.down_proj.norm.weight"
        );
        assert_eq!(
            g("blk.2.attn_k_norm.weight"),
            "layers.2.self_attn.k_norm.weight"
        );
    }
}
