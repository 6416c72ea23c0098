//! The tensor schema: which tensors a config implies (llama.cpp's names, ggml-order dims,
//! the storage types each role accepts), and the check of a file's tensor list against it
//! before any weight byte is read.

use std::collections::HashMap;

use bitnet_gguf::{TensorInfo, TensorType};

use super::error::ConfigError;
use super::model::ModelConfig;

/// What a tensor is for; decides which storage types are accepted.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TensorRole {
    /// `token_embd.weight`, `[n_embd, n_vocab]`.
    Embedding,
    /// `output.weight`, `[n_embd, n_vocab]`.
    Head,
    /// An RMSNorm weight vector.
    Norm,
    /// A layer projection (ternary or binary in BitNet models).
    Matrix,
    /// An optional one-element f32 scale applied after a projection.
    Scale,
}

impl TensorRole {
    fn describe(self) -> &'static str {
        match self {
            TensorRole::Embedding => "the token embedding",
            TensorRole::Head => "the output head",
            TensorRole::Norm => "a norm weight",
            TensorRole::Matrix => "a layer projection",
            TensorRole::Scale => "a projection scale",
        }
    }

    fn allowed_names(self) -> &'static str {
        match self {
            TensorRole::Embedding | TensorRole::Head => "F32, F16, BF16, Q8_0, Q6_K, Q4_0",
            TensorRole::Norm => "F32, F16, BF16",
            TensorRole::Scale => "F32",
            TensorRole::Matrix => "I2_S, TQ2_0, TQ1_0, Q1_0, F32, F16, BF16, Q8_0, Q6_K, Q4_0",
        }
    }

    /// Whether tensors of this role may be stored as `ty`.
    pub fn accepts(self, ty: TensorType) -> bool {
        use TensorType as T;
        let float = matches!(ty, T::F32 | T::F16 | T::BF16 | T::Q8_0 | T::Q6_K | T::Q4_0);
        match self {
            TensorRole::Embedding | TensorRole::Head => float,
            // bitnet.cpp's embedding converter writes its norms as F16.
            TensorRole::Norm => matches!(ty, T::F32 | T::F16 | T::BF16),
            TensorRole::Scale => ty == T::F32,
            TensorRole::Matrix => float || matches!(ty, T::I2_S | T::TQ2_0 | T::TQ1_0 | T::Q1_0),
        }
    }
}

/// One tensor the config implies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedTensor {
    /// llama.cpp name.
    pub name: String,
    /// ggml-order dims (`dims[0]` = row length).
    pub dims: Vec<u64>,
    /// What it is for.
    pub role: TensorRole,
}

/// The projections of one layer, in llama.cpp's names (`blk.N.attn_q.weight`, ...).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Proj {
    /// Query.
    AttnQ,
    /// Key.
    AttnK,
    /// Value.
    AttnV,
    /// Attention output.
    AttnOut,
    /// FFN gate.
    FfnGate,
    /// FFN up.
    FfnUp,
    /// FFN down.
    FfnDown,
}

impl Proj {
    /// All projections, in forward-pass order.
    pub const ALL: [Proj; 7] = [
        Proj::AttnQ,
        Proj::AttnK,
        Proj::AttnV,
        Proj::AttnOut,
        Proj::FfnGate,
        Proj::FfnUp,
        Proj::FfnDown,
    ];

    /// The name stem (`attn_q`, `ffn_down`, ...).
    pub fn stem(self) -> &'static str {
        match self {
            Proj::AttnQ => "attn_q",
            Proj::AttnK => "attn_k",
            Proj::AttnV => "attn_v",
            Proj::AttnOut => "attn_output",
            Proj::FfnGate => "ffn_gate",
            Proj::FfnUp => "ffn_up",
            Proj::FfnDown => "ffn_down",
        }
    }
}

/// The name of layer `layer`'s projection weight.
pub fn proj_name(layer: usize, p: Proj) -> String {
    format!("blk.{layer}.{}.weight", p.stem())
}

/// The name of layer `layer`'s optional one-element projection scale (`blk.N.attn_q.scale`,
/// as early llama.cpp BitNet conversions wrote it).
pub fn proj_scale_name(layer: usize, p: Proj) -> String {
    format!("blk.{layer}.{}.scale", p.stem())
}

/// The name of layer `layer`'s input norm of projection `p` (`blk.N.attn_q_norm_in.weight`:
/// the BitNet embedding models' BitLinear normalizes each projection's input).
pub fn proj_norm_name(layer: usize, p: Proj) -> String {
    format!("blk.{layer}.{}_norm_in.weight", p.stem())
}

/// Names of a layer's norm weights.
pub fn norm_name(layer: usize, which: &str) -> String {
    format!("blk.{layer}.{which}.weight")
}

/// Token embedding tensor name.
pub const TOKEN_EMBD: &str = "token_embd.weight";
/// Final norm tensor name.
pub const OUTPUT_NORM: &str = "output_norm.weight";
/// Untied output head tensor name.
pub const OUTPUT: &str = "output.weight";

impl ModelConfig {
    /// Dims `[row length, rows]` (ggml order) of a layer projection.
    pub fn proj_dims(&self, p: Proj) -> [u64; 2] {
        let (e, q, kv, f) = (
            self.n_embd as u64,
            self.q_dim() as u64,
            self.kv_dim() as u64,
            self.n_ff as u64,
        );
        match p {
            Proj::AttnQ => [e, q],
            Proj::AttnK | Proj::AttnV => [e, kv],
            Proj::AttnOut => [q, e],
            Proj::FfnGate | Proj::FfnUp => [e, f],
            Proj::FfnDown => [f, e],
        }
    }

    /// Every tensor the config requires, in the order [`crate::synth`] writes them:
    /// embedding, then per layer norms and projections, then the final norm and the head.
    /// Optional `.scale` tensors are not listed.
    pub fn expected_tensors(&self) -> Vec<ExpectedTensor> {
        let (e, v) = (self.n_embd as u64, self.n_vocab as u64);
        let t = |name: String, dims: Vec<u64>, role| ExpectedTensor { name, dims, role };
        let mut out = vec![t(TOKEN_EMBD.into(), vec![e, v], TensorRole::Embedding)];
        for l in 0..self.n_layer {
            let proj = |out: &mut Vec<ExpectedTensor>, p: Proj| {
                let dims = self.proj_dims(p);
                if self.proj_norms {
                    out.push(t(proj_norm_name(l, p), vec![dims[0]], TensorRole::Norm));
                }
                out.push(t(proj_name(l, p), dims.to_vec(), TensorRole::Matrix));
            };
            let norm = |out: &mut Vec<ExpectedTensor>, which: &str, width: usize| {
                out.push(t(norm_name(l, which), vec![width as u64], TensorRole::Norm));
            };
            norm(&mut out, "attn_norm", self.n_embd);
            for p in [Proj::AttnQ, Proj::AttnK, Proj::AttnV] {
                proj(&mut out, p);
            }
            if self.qk_norms {
                norm(&mut out, "attn_q_norm", self.head_dim);
                norm(&mut out, "attn_k_norm", self.head_dim);
            }
            if self.sub_norms {
                norm(&mut out, "attn_sub_norm", self.q_dim());
            }
            proj(&mut out, Proj::AttnOut);
            if self.post_norms {
                norm(&mut out, "post_attention_norm", self.n_embd);
            }
            norm(&mut out, "ffn_norm", self.n_embd);
            for p in [Proj::FfnGate, Proj::FfnUp] {
                proj(&mut out, p);
            }
            if self.sub_norms {
                norm(&mut out, "ffn_sub_norm", self.n_ff);
            }
            proj(&mut out, Proj::FfnDown);
            if self.post_norms {
                norm(&mut out, "post_ffw_norm", self.n_embd);
            }
        }
        out.push(t(OUTPUT_NORM.into(), vec![e], TensorRole::Norm));
        if !self.tied_head {
            out.push(t(OUTPUT.into(), vec![e, v], TensorRole::Head));
        }
        out
    }

    /// Checks the file's tensors against [`Self::expected_tensors`] and records the storage
    /// types. Extra tensors other than one-element projection scales are refused.
    pub(super) fn check_tensors(&mut self, tensors: &[TensorInfo]) -> Result<(), ConfigError> {
        let by_name: HashMap<&str, &TensorInfo> =
            tensors.iter().map(|t| (t.name.as_str(), t)).collect();
        let expected = self.expected_tensors();
        let mut known: HashMap<&str, ()> = HashMap::with_capacity(expected.len());
        for e in &expected {
            let t = by_name
                .get(e.name.as_str())
                .ok_or_else(|| ConfigError::MissingTensor {
                    name: e.name.clone(),
                })?;
            check_one(t, &e.dims, e.role)?;
            known.insert(e.name.as_str(), ());
        }
        let mut scales = 0usize;
        for t in tensors {
            if known.contains_key(t.name.as_str()) {
                continue;
            }
            if is_proj_scale(&t.name, self.n_layer) {
                check_one(t, &[1], TensorRole::Scale)?;
                scales += 1;
                continue;
            }
            return Err(ConfigError::UnexpectedTensor {
                name: t.name.clone(),
                arch: self.arch_name.clone(),
            });
        }
        self.has_proj_scales = scales > 0;
        self.embd_type = by_name[TOKEN_EMBD].ty;
        self.head_type = (!self.tied_head).then(|| by_name[OUTPUT].ty);
        if self.n_layer > 0 {
            self.weight_type = by_name[proj_name(0, Proj::AttnQ).as_str()].ty;
        }
        Ok(())
    }

    /// Number of weights (parameters) the tensor list holds, scales excluded.
    pub fn n_params(&self) -> u64 {
        self.expected_tensors()
            .iter()
            .map(|t| t.dims.iter().product::<u64>())
            .sum()
    }
}

fn check_one(t: &TensorInfo, dims: &[u64], role: TensorRole) -> Result<(), ConfigError> {
    if t.dims != dims {
        return Err(ConfigError::TensorShape {
            name: t.name.clone(),
            expected: dims.to_vec(),
            found: t.dims.clone(),
        });
    }
    if !role.accepts(t.ty) {
        return Err(ConfigError::UnsupportedType {
            name: t.name.clone(),
            ty: t.ty.name(),
            role: role.describe(),
            allowed: role.allowed_names(),
        });
    }
    Ok(())
}

/// `blk.N.<proj>.scale` with `N < n_layer`.
pub(super) fn is_proj_scale(name: &str, n_layer: usize) -> bool {
    let Some(rest) = name.strip_prefix("blk.") else {
        return false;
    };
    let Some((layer, rest)) = rest.split_once('.') else {
        return false;
    };
    let Ok(layer) = layer.parse::<usize>() else {
        return false;
    };
    layer < n_layer
        && Proj::ALL
            .iter()
            .any(|p| rest.strip_prefix(p.stem()) == Some(".scale"))
}
