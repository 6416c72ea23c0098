//! `config.json`: which of our architectures a checkpoint is, and its hyper-parameters.
//!
//! Recognised (the `architectures` entry is compared without case, because the same model
//! family has shipped as both `BitnetForCausalLM` and `BitNetForCausalLM`):
//! - `BitNetForCausalLM` with `hidden_act` `relu2` (BitNet b1.58 2B-4T, packed or bf16
//!   master weights) -> `bitnet-b1.58`;
//! - `BitnetForCausalLM` with `hidden_act` `silu` (1bitLLM bitnet_b1_58-large / -3B, fp16
//!   latent weights, `model_type` `llama`) -> `bitnet`;
//! - `LlamaForCausalLM` whose `quantization_config.quant_method` is `bitnet` (Falcon3-*-1.58bit,
//!   HF1BitLLM Llama3-8B-1.58: packed weights with a `weight_scale`) -> `llama`.
//!
//! A plain full-precision Llama is refused: it is not a ternary model, and ternarizing it
//! would silently produce garbage.
//!
//! The BitNet embedding models (`model_type` `qwen3` / `gemma3_text`) are recognised by their
//! `model_type`, as bitnet.cpp's embedding converter recognises them, and read by
//! [`super::embedding`].

use std::path::Path;

use bitnet_core::config::{Arch, FfnAct};
use serde_json::Value;

use crate::error::ConvertError;

/// How a packed checkpoint's `weight_scale` relates to the effective weight.
///
/// transformers `integrations/bitnet.py`: `BitLinear.forward` (the class of
/// `linear_class = "bitlinear"`, the default, used by 2B-4T, Falcon3-1.58bit and
/// Llama3-8B-1.58) computes `y = (x_q @ W_t^T) / (input_scale * weight_scale)`, so the
/// effective weight is `W_t / weight_scale` (bitnet.cpp's converter divides too:
/// `convert-hf-to-gguf-bitnet.py`, `data_torch / scale_map[...]`). `AutoBitLinear` with
/// offline quantization (`linear_class = "autobitlinear"`) instead multiplies its output by
/// `weight_scale`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ScaleMode {
    /// Effective weight = trits / weight_scale (`BitLinear`).
    Divide,
    /// Effective weight = trits * weight_scale (`AutoBitLinear`, offline).
    Multiply,
}

/// The hyper-parameters we need, read from `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct HfConfig {
    /// The `architectures` entry.
    pub hf_arch: String,
    /// Our architecture.
    pub arch: Arch,
    /// Gate activation.
    pub ffn_act: FfnAct,
    /// Vocabulary size (embedding rows).
    pub n_vocab: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Layers.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// FFN inner size.
    pub n_ff: usize,
    /// Training context.
    pub n_ctx: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Rope base.
    pub rope_theta: f32,
    /// Whether `rope.freq_base` is written: always on the language-model routes; on the
    /// embedding route only when `config.json` gives a base, as bitnet.cpp's converter does.
    pub rope_theta_given: bool,
    /// Linear rope scaling factor, if any.
    pub rope_linear_factor: Option<f32>,
    /// The head is the embedding.
    pub tied: bool,
    /// Meaning of `weight_scale` in packed checkpoints.
    pub scale_mode: ScaleMode,
    /// `bos_token_id` / `eos_token_id` / `pad_token_id` (first of a list).
    pub bos_id: Option<u32>,
    /// End of sequence.
    pub eos_id: Option<u32>,
    /// Padding.
    pub pad_id: Option<u32>,
    /// What the converted file does differently from the checkpoint's own (Hugging Face)
    /// forward pass, or fills in where `config.json` is silent: said to the user, never
    /// silently (embedding route only; empty on the others).
    pub notes: Vec<String>,
}

impl HfConfig {
    /// Whether this is one of the BitNet embedding architectures (qwen3, gemma3): their
    /// tensor names, types, metadata and tokenizer follow bitnet.cpp's embedding converter.
    pub fn is_embedding_model(&self) -> bool {
        matches!(self.arch, Arch::Qwen3 | Arch::Gemma3)
    }
}

pub(super) const SUPPORTED: &str = "supported: BitNetForCausalLM (relu2: BitNet b1.58 2B-4T; silu: 1bitLLM bitnet_b1_58), \
LlamaForCausalLM with quantization_config.quant_method = \"bitnet\" (Falcon3-1.58bit, Llama3-8B-1.58), \
model_type qwen3 or gemma3_text (the BitNet embedding models, bitnet-embedding-0.6b / -270m)";

/// Caps: beyond these a config is broken, not a model.
const MAX_DIM: u64 = 1 << 20;

/// `config.json` look-ups whose errors name the file and the key.
pub(super) struct Reader<'a> {
    pub(super) path: &'a Path,
    pub(super) v: &'a Value,
}

impl Reader<'_> {
    /// `hidden_size`, `num_attention_heads`, `num_key_value_heads` (default: the heads) and
    /// `head_dim` (default: hidden / heads), checked: the KV heads divide the heads, the head
    /// dimension is even (rope rotates pairs).
    pub(super) fn attention_shape(&self) -> Result<(usize, usize, usize, usize), ConvertError> {
        let n_embd = self.usize("hidden_size")?;
        let n_head = self.usize("num_attention_heads")?;
        let n_head_kv = self.opt_usize("num_key_value_heads")?.unwrap_or(n_head);
        if !n_head.is_multiple_of(n_head_kv) {
            return Err(self.bad(
                "num_key_value_heads",
                format!("{n_head_kv} does not divide num_attention_heads {n_head}"),
            ));
        }
        let head_dim = match self.opt_usize("head_dim")? {
            Some(d) => d,
            None if n_embd.is_multiple_of(n_head) => n_embd / n_head,
            None => {
                return Err(self.bad(
                    "hidden_size",
                    format!(
                        "{n_embd} is not a multiple of num_attention_heads {n_head}, and no \
                         head_dim is given"
                    ),
                ));
            }
        };
        if !head_dim.is_multiple_of(2) {
            return Err(self.bad("head_dim", format!("{head_dim} is odd; rope needs pairs")));
        }
        Ok((n_embd, n_head, n_head_kv, head_dim))
    }

    pub(super) fn bad(&self, key: &str, reason: impl Into<String>) -> ConvertError {
        ConvertError::BadValue {
            path: self.path.to_owned(),
            key: key.to_owned(),
            reason: reason.into(),
        }
    }

    pub(super) fn opt_usize(&self, key: &str) -> Result<Option<usize>, ConvertError> {
        match self.v.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => match x.as_u64() {
                Some(n) if (1..=MAX_DIM).contains(&n) => Ok(Some(n as usize)),
                _ => Err(self.bad(key, format!("{x} is not an integer in 1..={MAX_DIM}"))),
            },
        }
    }

    pub(super) fn usize(&self, key: &str) -> Result<usize, ConvertError> {
        self.opt_usize(key)?.ok_or_else(|| self.bad(key, "missing"))
    }

    pub(super) fn opt_f32(&self, key: &str) -> Result<Option<f32>, ConvertError> {
        match self.v.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => match x.as_f64() {
                Some(f) if f.is_finite() && f > 0.0 => Ok(Some(f as f32)),
                _ => Err(self.bad(key, format!("{x} is not a positive number"))),
            },
        }
    }

    pub(super) fn opt_str(&self, key: &str) -> Option<&str> {
        self.v.get(key).and_then(Value::as_str)
    }

    /// A token id, or the first of a list of ids.
    pub(super) fn opt_id(&self, key: &str) -> Result<Option<u32>, ConvertError> {
        let x = match self.v.get(key) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Array(a)) => match a.first() {
                None => return Ok(None),
                Some(x) => x,
            },
            Some(x) => x,
        };
        x.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| self.bad(key, format!("{x} is not a token id")))
    }
}

impl HfConfig {
    /// Parses the `config.json` of a language-model checkpoint (the routes above).
    pub(super) fn from_lm_value(path: &Path, v: &Value) -> Result<HfConfig, ConvertError> {
        let r = Reader { path, v };
        let hf_arch = match v.get("architectures").and_then(Value::as_array) {
            Some(a) if a.len() == 1 => a[0]
                .as_str()
                .ok_or_else(|| r.bad("architectures", "not a string"))?
                .to_owned(),
            Some(a) => {
                return Err(r.bad(
                    "architectures",
                    format!("expected exactly one entry, found {}", a.len()),
                ));
            }
            // A config without `architectures` that names a model_type is a model family we
            // do not convert, said as such (not as a missing key).
            None => match v.get("model_type").and_then(Value::as_str) {
                Some(mt) => {
                    return Err(ConvertError::UnknownArch {
                        path: path.to_owned(),
                        name: format!("model_type \"{mt}\""),
                        hint: SUPPORTED.into(),
                    });
                }
                None => return Err(r.bad("architectures", "missing")),
            },
        };
        let act = r.opt_str("hidden_act").unwrap_or("silu").to_owned();
        let quant = v.get("quantization_config");
        let quant_method = quant
            .and_then(|q| q.get("quant_method"))
            .and_then(Value::as_str);
        let unknown = |hint: String| ConvertError::UnknownArch {
            path: path.to_owned(),
            name: match v.get("model_type").and_then(Value::as_str) {
                Some(mt) => format!("{hf_arch} (model_type \"{mt}\")"),
                None => hf_arch.clone(),
            },
            hint,
        };
        let (arch, ffn_act) = match hf_arch.to_ascii_lowercase().as_str() {
            "bitnetforcausallm" => match FfnAct::from_name(&act) {
                Some(FfnAct::Relu2) => (Arch::BitnetB158, FfnAct::Relu2),
                Some(FfnAct::Silu) => (Arch::Bitnet, FfnAct::Silu),
                Some(FfnAct::GeluTanh) | None => {
                    return Err(r.bad(
                        "hidden_act",
                        format!("\"{act}\": BitNet checkpoints use relu2 or silu"),
                    ));
                }
            },
            "llamaforcausallm" => {
                if quant_method != Some("bitnet") {
                    return Err(unknown(format!(
                        "a Llama checkpoint without quantization_config.quant_method = \"bitnet\" is a \
                         full-precision model, not a ternary one; {SUPPORTED}"
                    )));
                }
                if FfnAct::from_name(&act) != Some(FfnAct::Silu) {
                    return Err(r.bad("hidden_act", format!("\"{act}\": Llama uses silu")));
                }
                (Arch::Llama, FfnAct::Silu)
            }
            _ => return Err(unknown(SUPPORTED.into())),
        };
        if let Some(m) = quant_method
            && m != "bitnet"
        {
            return Err(r.bad(
                "quantization_config.quant_method",
                format!("\"{m}\": only BitNet ternary checkpoints are converted"),
            ));
        }
        let scale_mode = match quant
            .and_then(|q| q.get("linear_class"))
            .and_then(Value::as_str)
        {
            None | Some("bitlinear") => ScaleMode::Divide,
            Some("autobitlinear") => ScaleMode::Multiply,
            Some(other) => {
                return Err(r.bad(
                    "quantization_config.linear_class",
                    format!("\"{other}\" is neither bitlinear nor autobitlinear"),
                ));
            }
        };

        let (n_embd, n_head, n_head_kv, head_dim) = r.attention_shape()?;
        let rope_linear_factor = match v.get("rope_scaling") {
            None | Some(Value::Null) => None,
            Some(s) => {
                let ty = s
                    .get("rope_type")
                    .or_else(|| s.get("type"))
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                let factor = s.get("factor").and_then(Value::as_f64);
                match (ty, factor) {
                    ("linear", Some(f)) if f.is_finite() && f > 0.0 => Some(f as f32),
                    ("default", _) => None,
                    _ => {
                        return Err(r.bad(
                            "rope_scaling",
                            format!("{s}: only linear rope scaling is supported"),
                        ));
                    }
                }
            }
        };
        let tied = match v.get("tie_word_embeddings") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(x) => return Err(r.bad("tie_word_embeddings", format!("{x} is not a bool"))),
        };
        Ok(HfConfig {
            hf_arch,
            arch,
            ffn_act,
            n_vocab: r.usize("vocab_size")?,
            n_embd,
            n_layer: r.usize("num_hidden_layers")?,
            n_head,
            n_head_kv,
            head_dim,
            n_ff: r.usize("intermediate_size")?,
            n_ctx: r.opt_usize("max_position_embeddings")?.unwrap_or(2048),
            rms_eps: r.opt_f32("rms_norm_eps")?.unwrap_or(1e-6),
            rope_theta: r.opt_f32("rope_theta")?.unwrap_or(10_000.0),
            rope_theta_given: true,
            rope_linear_factor,
            tied,
            scale_mode,
            bos_id: r.opt_id("bos_token_id")?,
            eos_id: r.opt_id("eos_token_id")?,
            pad_id: r.opt_id("pad_token_id")?,
            notes: Vec::new(),
        })
    }
}
