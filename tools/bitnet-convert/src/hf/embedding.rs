//! `config.json` of the BitNet embedding models, `model_type` `qwen3` (BitNet-embedding-0.6B)
//! and `gemma3_text` (BitNet-embedding-270M), read as bitnet.cpp's embedding converter
//! (`utils/convert-bitnet-embedding-to-gguf.py`, `set_gguf_parameters`) reads it: the same
//! keys and defaults (context 32768, head_dim = hidden / heads, a rope base only when the
//! config gives one).
//!
//! Beyond the reference, two kinds of checks keep the converted file the function the
//! checkpoint computes in Hugging Face transformers: a setting the runtime cannot run
//! (bidirectional attention, q/k/v biases, rope scaling, an attention scale other than
//! 1/sqrt(head_dim), another activation) is refused by name, and a difference the file keeps
//! on purpose (no sliding window, as the reference writes none; a default filled in) becomes
//! a note the converter prints.

use std::path::Path;

use bitnet_core::config::{Arch, FfnAct};
use serde_json::Value;

use super::config::{HfConfig, Reader, ScaleMode};
use crate::error::ConvertError;

/// The reference's context length when `max_position_embeddings` is absent.
const DEFAULT_CONTEXT: usize = 32_768;
/// transformers' `rms_norm_eps` default in both `Qwen3Config` and `Gemma3TextConfig`.
const DEFAULT_RMS_EPS: f32 = 1e-6;
/// transformers' `sliding_window_pattern` default for Gemma3 (every sixth layer global).
const GEMMA3_SLIDING_PATTERN: u64 = 6;

/// Whether `model_type` is one of the BitNet embedding architectures.
pub(super) fn is_embedding_model_type(model_type: &str) -> bool {
    matches!(model_type, "qwen3" | "gemma3_text")
}

/// Parses the `config.json` of a `qwen3` / `gemma3_text` checkpoint.
pub(super) fn from_value(
    path: &Path,
    v: &Value,
    model_type: &str,
) -> Result<HfConfig, ConvertError> {
    let r = Reader { path, v };
    let arch = if model_type == "qwen3" {
        Arch::Qwen3
    } else {
        Arch::Gemma3
    };
    let hf_arch = match v.get("architectures").and_then(Value::as_array) {
        Some(a) if a.len() == 1 => a[0].as_str().unwrap_or(model_type).to_owned(),
        _ => model_type.to_owned(),
    };
    let ffn_act = activation(&r, arch)?;

    let (n_embd, n_head, n_head_kv, head_dim) = r.attention_shape()?;
    let n_layer = r.usize("num_hidden_layers")?;
    refuse_unsupported(&r, arch, head_dim)?;

    let mut notes = Vec::new();
    let (rope_theta, rope_theta_given) = rope_base(&r, arch, &mut notes)?;
    let rms_eps = match r.opt_f32("rms_norm_eps")? {
        Some(eps) => eps,
        None => {
            notes.push(format!(
                "config.json has no rms_norm_eps: writing transformers' default {DEFAULT_RMS_EPS} \
                 (bitnet.cpp's converter writes none, and the file would not load)"
            ));
            DEFAULT_RMS_EPS
        }
    };
    if let Some(note) = sliding_window_note(&r, arch, n_layer)? {
        notes.push(note);
    }
    Ok(HfConfig {
        hf_arch,
        arch,
        ffn_act,
        n_vocab: r.usize("vocab_size")?,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        head_dim,
        n_ff: r.usize("intermediate_size")?,
        n_ctx: r
            .opt_usize("max_position_embeddings")?
            .unwrap_or(DEFAULT_CONTEXT),
        rms_eps,
        rope_theta,
        rope_theta_given,
        rope_linear_factor: None,
        // An embedding model's GGUF has no output head, whatever the checkpoint ties.
        tied: true,
        scale_mode: ScaleMode::Divide,
        bos_id: r.opt_id("bos_token_id")?,
        eos_id: r.opt_id("eos_token_id")?,
        pad_id: r.opt_id("pad_token_id")?,
        notes,
    })
}

/// The gate activation: SiLU for Qwen3, GELU with the tanh approximation for Gemma3 (the
/// runtime's kernels; erf GELU would be another function).
fn activation(r: &Reader<'_>, arch: Arch) -> Result<FfnAct, ConvertError> {
    let (key, act, allowed, want): (&str, &str, &[&str], FfnAct) = match arch {
        Arch::Qwen3 => (
            "hidden_act",
            r.opt_str("hidden_act").unwrap_or("silu"),
            &["silu", "swish"],
            FfnAct::Silu,
        ),
        _ => {
            // Gemma3TextConfig names it hidden_activation; older configs hidden_act.
            let key = if r.v.get("hidden_activation").is_some() {
                "hidden_activation"
            } else {
                "hidden_act"
            };
            (
                key,
                r.opt_str(key).unwrap_or("gelu_pytorch_tanh"),
                &["gelu_pytorch_tanh", "gelu_new"],
                FfnAct::GeluTanh,
            )
        }
    };
    if allowed.contains(&act) {
        Ok(want)
    } else {
        Err(r.bad(
            key,
            format!(
                "\"{act}\": the {} graph runs {} only",
                arch.canonical_name(),
                allowed.join(" / ")
            ),
        ))
    }
}

/// Settings under which the file would compute another function than the checkpoint.
fn refuse_unsupported(r: &Reader<'_>, arch: Arch, head_dim: usize) -> Result<(), ConvertError> {
    let is_true = |key: &str| r.v.get(key).and_then(Value::as_bool) == Some(true);
    if is_true("use_bidirectional_attention") {
        return Err(r.bad(
            "use_bidirectional_attention",
            "true: the qwen3 / gemma3 graphs are causal (upstream llama.cpp calls a \
             bidirectional Gemma3 `gemma-embedding`, another architecture)",
        ));
    }
    if is_true("attention_bias") {
        return Err(r.bad(
            "attention_bias",
            "true: the q/k/v/o biases have no place in the GGUF layout (bitnet.cpp's converter \
             drops them, which changes the model)",
        ));
    }
    if let Some(s) = r.v.get("rope_scaling").filter(|s| !s.is_null()) {
        let ty = s
            .get("rope_type")
            .or_else(|| s.get("type"))
            .and_then(Value::as_str);
        if ty != Some("default") {
            return Err(r.bad(
                "rope_scaling",
                format!("{s}: rope scaling is not written by the embedding route"),
            ));
        }
    }
    if arch == Arch::Gemma3 {
        if let Some(x) = r.v.get("attn_logit_softcapping").filter(|x| !x.is_null()) {
            return Err(r.bad(
                "attn_logit_softcapping",
                format!("{x}: attention logit soft-capping is not supported"),
            ));
        }
        // HF scales Gemma3's scores by query_pre_attn_scalar^-0.5; llama.cpp's gemma3 graph
        // (and ours) by head_dim^-0.5, which is the same only when the two agree.
        if let Some(x) = r.v.get("query_pre_attn_scalar").filter(|x| !x.is_null()) {
            let q = x.as_f64().filter(|q| q.is_finite() && *q > 0.0);
            if q != Some(head_dim as f64) {
                return Err(r.bad(
                    "query_pre_attn_scalar",
                    format!(
                        "{x} is not head_dim {head_dim}: the checkpoint scales attention scores by \
                         1/sqrt({x}), the gemma3 graph by 1/sqrt(head_dim)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The rope base and whether it is written. The reference writes `rope.freq_base` only for a
/// top-level `rope_theta`; newer transformers keep it in `rope_parameters` (per layer type
/// for Gemma3), which is read too, with a note, rather than silently writing no base.
fn rope_base(
    r: &Reader<'_>,
    arch: Arch,
    notes: &mut Vec<String>,
) -> Result<(f32, bool), ConvertError> {
    let params = r.v.get("rope_parameters").filter(|p| p.is_object());
    // Gemma3's global layers' parameters (the only base a file without a window uses).
    let params = params.map(|p| p.get("full_attention").unwrap_or(p));
    if let Some(p) = params {
        let ty = p
            .get("rope_type")
            .and_then(Value::as_str)
            .unwrap_or("default");
        if ty != "default" {
            return Err(r.bad(
                "rope_parameters",
                format!("{p}: rope scaling ({ty}) is not written by the embedding route"),
            ));
        }
    }
    if let Some(theta) = r.opt_f32("rope_theta")? {
        return Ok((theta, true));
    }
    let nested = params.and_then(|p| p.get("rope_theta"));
    if let Some(theta) = nested.and_then(Value::as_f64) {
        if !(theta.is_finite() && theta > 0.0) {
            return Err(r.bad("rope_parameters.rope_theta", "is not a positive number"));
        }
        notes.push(format!(
            "rope base {theta} taken from config.json rope_parameters (bitnet.cpp's converter \
             reads only a top-level rope_theta, and would write no base)"
        ));
        return Ok((theta as f32, true));
    }
    let hf_default = if arch == Arch::Gemma3 {
        "; transformers' Gemma3 default is 1000000"
    } else {
        ""
    };
    notes.push(format!(
        "config.json gives no rope_theta: no rope.freq_base is written (as bitnet.cpp's \
         converter does), so the runtime takes 10000{hf_default}"
    ));
    Ok((10_000.0, false))
}

/// What the checkpoint's sliding-window layers become: bitnet.cpp's converter writes no
/// window, so every layer of the file attends to every earlier position. That equals the
/// checkpoint for inputs no longer than the window, and the user is told so.
fn sliding_window_note(
    r: &Reader<'_>,
    arch: Arch,
    n_layer: usize,
) -> Result<Option<String>, ConvertError> {
    let window = match r.v.get("sliding_window") {
        Some(Value::Number(n)) => n.as_u64().filter(|&w| w > 0),
        _ => None,
    };
    let Some(window) = window else {
        return Ok(None);
    };
    let sliding = match r.v.get("layer_types").and_then(Value::as_array) {
        Some(types) => types
            .iter()
            .filter(|t| t.as_str() == Some("sliding_attention"))
            .count(),
        None if arch == Arch::Gemma3 => {
            let p =
                r.v.get("sliding_window_pattern")
                    .and_then(Value::as_u64)
                    .unwrap_or(GEMMA3_SLIDING_PATTERN)
                    .max(1);
            (0..n_layer as u64).filter(|i| (i + 1) % p != 0).count()
        }
        None => {
            // Qwen3: layers from max_window_layers on, when use_sliding_window is set.
            if r.v.get("use_sliding_window").and_then(Value::as_bool) != Some(true) {
                return Ok(None);
            }
            let from = r.opt_usize("max_window_layers")?.unwrap_or(n_layer);
            n_layer.saturating_sub(from)
        }
    };
    if sliding == 0 {
        return Ok(None);
    }
    Ok(Some(format!(
        "the checkpoint attends within a {window}-token sliding window on {sliding} of its \
         {n_layer} layers; like bitnet.cpp's converter, no window is written, so every layer \
         attends to the whole input: the same model for inputs of up to {window} tokens"
    )))
}
