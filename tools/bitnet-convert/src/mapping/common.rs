//! What both routes of the mapping share: the output types, a tensor's route and job, the
//! runtime config a checkpoint converts to, the checkpoint names of a GGUF tensor, and the
//! checks every planned tensor passes (its source found and used once, its shape, its
//! blocks).

use std::collections::BTreeSet;
use std::path::Path;

use bitnet_core::config::{ModelConfig, TensorRole};
use bitnet_gguf::{TensorInfo, TensorType};
use safetensors::Dtype;

use crate::error::ConvertError;
use crate::hf::{HfConfig, ScaleMode};
use crate::source::{Sources, TensorRef};

/// Output types chosen by the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeOptions {
    /// Type of the projections: I2_S, TQ2_0 or TQ1_0 (ternary); on the embedding route
    /// I2_S, F16 or F32, as bitnet.cpp's embedding converter's `--outtype`.
    pub weights: TensorType,
    /// Type of the token embedding; `None`: the route's default (F16; F32 with
    /// `--outtype f32` on the embedding route).
    pub embd: Option<TensorType>,
    /// Type of an untied output head; `None`: F16. The embedding route writes no head and
    /// refuses one.
    pub head: Option<TensorType>,
}

/// The types a conversion writes, resolved from [`TypeOptions`] for the checkpoint's route.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OutputTypes {
    /// Layer projections.
    pub weights: TensorType,
    /// Token embedding.
    pub embd: TensorType,
    /// An untied output head.
    pub head: TensorType,
    /// Norm weights.
    pub norms: TensorType,
}

/// Float types an embedding or head may be written as.
pub(super) const FLOAT_TYPES: [TensorType; 4] = [
    TensorType::F16,
    TensorType::F32,
    TensorType::BF16,
    TensorType::Q8_0,
];

/// Ternary projection types of the language-model routes.
pub(super) const TERNARY_TYPES: [TensorType; 3] =
    [TensorType::I2_S, TensorType::TQ2_0, TensorType::TQ1_0];

/// How a ternary projection is stored in the checkpoint.
#[derive(Clone, Debug)]
pub enum TernarySource {
    /// uint8, four 2-bit codes per byte along the output dimension, with a `weight_scale`.
    Packed {
        /// The one-element scale tensor.
        scale: TensorRef,
        /// Whether the scale divides or multiplies.
        mode: ScaleMode,
    },
    /// Float latent weights, ternarized with absmean at conversion.
    Latent,
    /// Float latent weights, ternarized with absmean as bitnet.cpp's embedding converter
    /// computes it in numpy (float32 pairwise mean, times the reciprocal): the embedding route.
    LatentNumpy,
}

/// What to do with one tensor.
#[derive(Clone, Debug)]
pub enum Route {
    /// Decode floats, re-encode in the output type.
    Float,
    /// Decode floats, add 1 in f32, re-encode: Gemma's RMSNorm multiplies by `1 + w`, and
    /// bitnet.cpp's embedding converter stores `1 + w` so that a plain RMSNorm runs it.
    FloatPlusOne,
    /// Produce trits and a scale, pack them.
    Ternary {
        /// Where the trits come from.
        source: TernarySource,
        /// Reorder rows from HF's rotate-half layout to the interleaved pairs of ggml's
        /// normal rope, with this many heads (llama architecture q/k only).
        permute_heads: Option<usize>,
    },
}

/// One GGUF tensor and where it comes from.
#[derive(Clone, Debug)]
pub struct Job {
    /// The GGUF tensor (name, ggml-order dims, type).
    pub info: TensorInfo,
    /// What it is for.
    pub role: TensorRole,
    /// The checkpoint tensor.
    pub src: TensorRef,
    /// How it is converted.
    pub route: Route,
}

/// The runtime config a checkpoint converts to; storage types are filled in by the planner.
/// `proj_norms` is false here: whether projections have input norms is read from the
/// checkpoint's tensors (embedding route).
pub fn model_config(cfg: &HfConfig, types: &OutputTypes) -> ModelConfig {
    ModelConfig {
        arch: cfg.arch,
        arch_name: cfg.arch.canonical_name().into(),
        n_vocab: cfg.n_vocab,
        n_embd: cfg.n_embd,
        n_layer: cfg.n_layer,
        n_head: cfg.n_head,
        n_head_kv: cfg.n_head_kv,
        head_dim: cfg.head_dim,
        n_ff: cfg.n_ff,
        n_ctx_train: cfg.n_ctx,
        rms_eps: cfg.rms_eps,
        rope_theta: cfg.rope_theta,
        rope_freq_scale: cfg.rope_linear_factor.map_or(1.0, |f| 1.0 / f),
        rope_dim: cfg.head_dim,
        rope: cfg.arch.rope_style(),
        ffn_act: cfg.ffn_act,
        sub_norms: cfg.arch.has_sub_norms(),
        proj_norms: false,
        qk_norms: cfg.arch.has_qk_norms(),
        post_norms: cfg.arch.is_gemma(),
        embd_scale: cfg.arch.is_gemma().then(|| (cfg.n_embd as f32).sqrt()),
        tied_head: cfg.tied,
        act_bits: bitnet_core::config::ActBits::Int8,
        weight_type: types.weights,
        embd_type: types.embd,
        head_type: (!cfg.tied).then_some(types.head),
        has_proj_scales: false,
        pooling_type: None,
    }
}

/// The checkpoint names that may hold a GGUF tensor (alternatives: the 2B-4T and the
/// 1bitLLM spellings of the sub-norms).
pub fn hf_names(gguf: &str) -> Vec<String> {
    match gguf {
        "token_embd.weight" => return vec!["model.embed_tokens.weight".into()],
        "output_norm.weight" => return vec!["model.norm.weight".into()],
        "output.weight" => return vec!["lm_head.weight".into()],
        _ => {}
    }
    let Some(rest) = gguf.strip_prefix("blk.") else {
        return Vec::new();
    };
    let Some((layer, stem)) = rest.split_once('.') else {
        return Vec::new();
    };
    let stem = stem.strip_suffix(".weight").unwrap_or(stem);
    let p = format!("model.layers.{layer}.");
    let names: &[&str] = match stem {
        "attn_norm" => &["input_layernorm"],
        "attn_q" => &["self_attn.q_proj"],
        "attn_k" => &["self_attn.k_proj"],
        "attn_v" => &["self_attn.v_proj"],
        "attn_output" => &["self_attn.o_proj"],
        "attn_sub_norm" => &["self_attn.attn_sub_norm", "self_attn.inner_attn_ln"],
        "ffn_norm" => &["post_attention_layernorm"],
        "ffn_gate" => &["mlp.gate_proj"],
        "ffn_up" => &["mlp.up_proj"],
        "ffn_down" => &["mlp.down_proj"],
        "ffn_sub_norm" => &["mlp.ffn_sub_norm", "mlp.ffn_layernorm"],
        _ => &[],
    };
    names.iter().map(|n| format!("{p}{n}.weight")).collect()
}

/// Checkpoint tensors that carry nothing the GGUF needs.
pub(super) fn ignorable(name: &str, cfg: &HfConfig) -> bool {
    name.ends_with("rotary_emb.inv_freq") || (cfg.tied && name == "lm_head.weight")
}

pub(super) fn is_float(d: Dtype) -> bool {
    matches!(d, Dtype::F32 | Dtype::F16 | Dtype::BF16)
}

/// The checkpoint tensor among `names` (alternative spellings) that holds GGUF tensor
/// `gguf`: exactly one must exist.
pub(super) fn find_source<'a>(
    dir: &Path,
    sources: &'a Sources,
    names: &[String],
    gguf: &str,
) -> Result<&'a TensorRef, ConvertError> {
    let found: Vec<&TensorRef> = names
        .iter()
        .filter_map(|n| sources.tensors.get(n))
        .collect();
    match found.as_slice() {
        [one] => Ok(*one),
        [] => Err(ConvertError::MissingTensor {
            dir: dir.to_owned(),
            tensor: names.join(" or "),
            gguf: gguf.to_owned(),
        }),
        [a, b, ..] => Err(ConvertError::Tensor {
            path: sources.path(b).to_owned(),
            tensor: b.name.clone(),
            reason: format!(
                "both {} and {} are present; which one is meant?",
                a.name, b.name
            ),
        }),
    }
}

/// Refuses a checkpoint tensor that no GGUF tensor uses and `ignorable` does not excuse:
/// a tensor the architecture does not have changes the model if dropped.
pub(super) fn refuse_unused(
    cfg: &HfConfig,
    sources: &Sources,
    used: &BTreeSet<&str>,
    ignorable: impl Fn(&str) -> bool,
) -> Result<(), ConvertError> {
    match sources
        .tensors
        .values()
        .find(|t| !used.contains(t.name.as_str()) && !ignorable(&t.name))
    {
        Some(t) => Err(ConvertError::ExtraTensor {
            path: sources.path(t).to_owned(),
            tensor: t.name.clone(),
            arch: format!("{} ({})", cfg.hf_arch, cfg.arch.canonical_name()),
        }),
        None => Ok(()),
    }
}

/// A shape error for `src`.
pub(super) fn shape_mismatch(sources: &Sources, src: &TensorRef, expected: String) -> ConvertError {
    ConvertError::ShapeMismatch {
        path: sources.path(src).to_owned(),
        tensor: src.name.clone(),
        found: src.shape.clone(),
        dtype: format!("{:?}", src.dtype),
        expected,
    }
}

/// Refuses shapes the output type cannot hold, before anything is written.
pub(super) fn check_blocks(
    gguf: &str,
    dims: &[u64],
    ty: TensorType,
    sources: &Sources,
    src: &TensorRef,
) -> Result<(), ConvertError> {
    let n: u64 = dims.iter().product();
    let ok = match ty {
        // I2_S packs the flattened tensor in blocks of 128 values.
        TensorType::I2_S => n.is_multiple_of(128),
        _ => dims[0].is_multiple_of(ty.block_len()),
    };
    if ok {
        return Ok(());
    }
    Err(ConvertError::Tensor {
        path: sources.path(src).to_owned(),
        tensor: src.name.clone(),
        reason: format!(
            "{gguf} {dims:?} cannot be stored as {}: {} (choose another type)",
            ty.name(),
            if ty == TensorType::I2_S {
                "its size must be a multiple of 128".to_string()
            } else {
                format!("its rows must be multiples of {}", ty.block_len())
            }
        ),
    })
}
