//! Model hyper-parameters read from GGUF metadata, and the tensor list they imply.
//!
//! This file owns the rules that turn a file's keys (llama.cpp's names:
//! `general.architecture` = `A`, then `A.embedding_length`, `A.block_count`, ...) into a
//! [`ModelConfig`], and checks the file's tensors (names, shapes, types) against it before
//! any weight byte is read. Everything the forward pass needs to know about the architecture
//! (gate activation, rope style, sub-norms, tied head) is decided here, once.
//!
//! Architecture rules (what llama.cpp and bitnet.cpp run for each name):
//! - `bitnet-b1.58`, `bitnet-25` (bitnet.cpp, BitNet b1.58 2B-4T): squared-ReLU gate,
//!   sub-norms before `attn_output` and `ffn_down`, NeoX rope.
//! - `bitnet` (upstream llama.cpp `build_bitnet`, the 1bitLLM models): SiLU gate, sub-norms,
//!   NeoX rope (`llama_model_rope_type` lists `LLM_ARCH_BITNET` with the NeoX archs).
//! - `llama` (ternary Llama-architecture models such as Falcon3-1.58bit): SiLU gate, no
//!   sub-norms, normal (interleaved-pair) rope.
//!
//! Our own optional keys (no converter writes them; `gen-model` may):
//! - `A.feed_forward_activation` = `"silu"` | `"relu2"` overrides the gate rule.
//! - `A.activation_bits` = 8 (default) | 1 selects int8 or binary activations.

use std::collections::HashMap;

use bitnet_gguf::{Array, Metadata, TensorInfo, TensorType, Value};

#[path = "config/error.rs"]
mod error;
pub use error::ConfigError;

/// Sanity caps: a value above these is a broken or hostile file, not a model.
const MAX_EMBD: usize = 1 << 16;
const MAX_LAYERS: usize = 1024;
const MAX_HEADS: usize = 1024;
const MAX_HEAD_DIM: usize = 1024;
const MAX_FF: usize = 1 << 20;
const MAX_VOCAB: usize = 1 << 22;
const MAX_CTX: usize = 1 << 24;

/// The architecture families we run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// `bitnet-b1.58` / `bitnet-25` (bitnet.cpp): squared-ReLU gate, sub-norms.
    BitnetB158,
    /// Upstream llama.cpp `bitnet`: SiLU gate, sub-norms.
    Bitnet,
    /// Ternary llama-architecture models: SiLU gate, no sub-norms, normal rope.
    Llama,
}

impl Arch {
    /// The architecture for a `general.architecture` value.
    pub fn from_name(name: &str) -> Option<Arch> {
        match name {
            "bitnet-b1.58" | "bitnet-25" => Some(Arch::BitnetB158),
            "bitnet" => Some(Arch::Bitnet),
            "llama" => Some(Arch::Llama),
            _ => None,
        }
    }

    /// The name we write for this architecture.
    pub fn canonical_name(self) -> &'static str {
        match self {
            Arch::BitnetB158 => "bitnet-b1.58",
            Arch::Bitnet => "bitnet",
            Arch::Llama => "llama",
        }
    }

    /// The gate activation the architecture's reference engine computes.
    pub fn default_ffn_act(self) -> FfnAct {
        match self {
            Arch::BitnetB158 => FfnAct::Relu2,
            Arch::Bitnet | Arch::Llama => FfnAct::Silu,
        }
    }

    /// The rope style of the architecture (llama.cpp's `llama_model_rope_type`).
    pub fn rope_style(self) -> RopeStyle {
        match self {
            Arch::BitnetB158 | Arch::Bitnet => RopeStyle::Neox,
            Arch::Llama => RopeStyle::Normal,
        }
    }

    /// Whether the architecture has `attn_sub_norm` / `ffn_sub_norm`.
    pub fn has_sub_norms(self) -> bool {
        !matches!(self, Arch::Llama)
    }
}

/// The FFN gate activation: `down(act(gate(x)) * up(x))`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FfnAct {
    /// `x * sigmoid(x)`.
    Silu,
    /// `max(x, 0)^2`.
    Relu2,
}

impl FfnAct {
    /// Parses the value of the `A.feed_forward_activation` key.
    pub fn from_name(s: &str) -> Option<FfnAct> {
        match s.to_ascii_lowercase().as_str() {
            "silu" | "swish" | "swiglu" => Some(FfnAct::Silu),
            "relu2" | "relu_sqr" | "relu_squared" | "squared_relu" => Some(FfnAct::Relu2),
            _ => None,
        }
    }

    /// The name written to `A.feed_forward_activation`.
    pub fn name(self) -> &'static str {
        match self {
            FfnAct::Silu => "silu",
            FfnAct::Relu2 => "relu2",
        }
    }
}

/// How rope pairs the dimensions of a head.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RopeStyle {
    /// Adjacent pairs `(x[2i], x[2i+1])` (ggml `LLAMA_ROPE_TYPE_NORM`).
    Normal,
    /// Halves `(x[i], x[i + d/2])` (ggml NeoX, HF `rotate_half`).
    Neox,
}

/// Activation precision fed to the ternary / binary matmuls.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ActBits {
    /// Per-token absmax int8 (BitNet b1.58).
    Int8,
    /// Per-token sign with the mean absolute value as scale.
    Binary,
}

impl ActBits {
    /// The value written to `A.activation_bits`.
    pub fn bits(self) -> u32 {
        match self {
            ActBits::Int8 => 8,
            ActBits::Binary => 1,
        }
    }
}

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
            TensorRole::Norm | TensorRole::Scale => "F32",
            TensorRole::Matrix => "I2_S, TQ2_0, TQ1_0, Q1_0, F32, F16, BF16, Q8_0, Q6_K, Q4_0",
        }
    }

    /// Whether tensors of this role may be stored as `ty`.
    pub fn accepts(self, ty: TensorType) -> bool {
        use TensorType as T;
        let float = matches!(ty, T::F32 | T::F16 | T::BF16 | T::Q8_0 | T::Q6_K | T::Q4_0);
        match self {
            TensorRole::Embedding | TensorRole::Head => float,
            TensorRole::Norm | TensorRole::Scale => ty == T::F32,
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

/// Everything the forward pass needs to know about a model's shape and semantics.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// Architecture family.
    pub arch: Arch,
    /// `general.architecture` as written in the file.
    pub arch_name: String,
    /// Vocabulary size (rows of the embedding).
    pub n_vocab: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Number of transformer blocks.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (GQA).
    pub n_head_kv: usize,
    /// Dimension of one head.
    pub head_dim: usize,
    /// FFN inner size.
    pub n_ff: usize,
    /// Training context length.
    pub n_ctx_train: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Rope base frequency.
    pub rope_theta: f32,
    /// Linear rope scaling: positions are multiplied by this (1 / `rope.scaling.factor`).
    pub rope_freq_scale: f32,
    /// Dimensions rotated per head (the first `rope_dim` of each head).
    pub rope_dim: usize,
    /// Rope pairing.
    pub rope: RopeStyle,
    /// FFN gate activation.
    pub ffn_act: FfnAct,
    /// Whether `attn_sub_norm` / `ffn_sub_norm` are applied.
    pub sub_norms: bool,
    /// The output head is the token embedding (no `output.weight`).
    pub tied_head: bool,
    /// Activation precision for the projections.
    pub act_bits: ActBits,
    /// Storage type of the layer projections (of `blk.0.attn_q.weight`; others may differ).
    pub weight_type: TensorType,
    /// Storage type of the token embedding.
    pub embd_type: TensorType,
    /// Storage type of the untied head, if any.
    pub head_type: Option<TensorType>,
    /// The file carries one-element `.scale` tensors after the projections.
    pub has_proj_scales: bool,
}

/// Metadata look-up with errors that name the key.
struct Keys<'a> {
    meta: &'a Metadata,
    arch: String,
}

impl Keys<'_> {
    fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.arch)
    }

    fn opt_int(&self, key: &str) -> Result<Option<i128>, ConfigError> {
        match self.meta.get(key) {
            None => Ok(None),
            Some(v) => v.as_int().map(Some).ok_or_else(|| ConfigError::WrongType {
                key: key.to_owned(),
                expected: "integer",
                found: v.type_name(),
            }),
        }
    }

    /// A size in `1..=max`.
    fn opt_size(&self, suffix: &str, max: usize) -> Result<Option<usize>, ConfigError> {
        let key = self.key(suffix);
        let Some(v) = self.opt_int(&key)? else {
            return Ok(None);
        };
        if v < 1 || v > max as i128 {
            return Err(ConfigError::BadValue {
                key,
                value: v.to_string(),
                reason: format!("must be between 1 and {max}"),
            });
        }
        Ok(Some(v as usize))
    }

    fn size(&self, suffix: &str, max: usize) -> Result<usize, ConfigError> {
        self.opt_size(suffix, max)?
            .ok_or_else(|| ConfigError::MissingKey {
                key: self.key(suffix),
            })
    }

    fn opt_float(&self, suffix: &str) -> Result<Option<(String, f64)>, ConfigError> {
        let key = self.key(suffix);
        let v = match self.meta.get(&key) {
            None => return Ok(None),
            Some(Value::F32(x)) => f64::from(*x),
            Some(Value::F64(x)) => *x,
            Some(v) => {
                return Err(ConfigError::WrongType {
                    key,
                    expected: "f32",
                    found: v.type_name(),
                });
            }
        };
        Ok(Some((key, v)))
    }

    fn opt_str(&self, key: &str) -> Result<Option<&str>, ConfigError> {
        match self.meta.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(ConfigError::WrongType {
                key: key.to_owned(),
                expected: "string",
                found: v.type_name(),
            }),
        }
    }
}

fn positive_float(key: String, v: f64, max: f64) -> Result<f32, ConfigError> {
    if !(v.is_finite() && v > 0.0 && v <= max) {
        return Err(ConfigError::BadValue {
            key,
            value: v.to_string(),
            reason: format!("must be a finite number in (0, {max}]"),
        });
    }
    Ok(v as f32)
}

impl ModelConfig {
    /// Reads the config of an open GGUF file and checks its tensors against it.
    pub fn from_gguf(file: &bitnet_gguf::GgufFile) -> Result<Self, ConfigError> {
        Self::from_parts(file.metadata(), file.tensors())
    }

    /// Reads the config from metadata and checks `tensors` (names, dims, types) against it.
    /// No tensor data is needed.
    pub fn from_parts(meta: &Metadata, tensors: &[TensorInfo]) -> Result<Self, ConfigError> {
        let mut cfg = Self::from_metadata(meta, tensors)?;
        cfg.check_tensors(tensors)?;
        Ok(cfg)
    }

    /// The hyper-parameters alone. `tensors` is consulted only for the vocabulary size when
    /// neither `A.vocab_size` nor `tokenizer.ggml.tokens` gives it, and for the head's
    /// presence; the result's storage types are placeholders until [`Self::from_parts`]
    /// checks the tensors.
    fn from_metadata(meta: &Metadata, tensors: &[TensorInfo]) -> Result<Self, ConfigError> {
        let arch_name = match meta.get("general.architecture") {
            None => {
                return Err(ConfigError::MissingKey {
                    key: "general.architecture".into(),
                });
            }
            Some(Value::String(s)) => s.clone(),
            Some(v) => {
                return Err(ConfigError::WrongType {
                    key: "general.architecture".into(),
                    expected: "string",
                    found: v.type_name(),
                });
            }
        };
        let arch = Arch::from_name(&arch_name).ok_or_else(|| ConfigError::UnknownArch {
            name: arch_name.clone(),
        })?;
        let k = Keys {
            meta,
            arch: arch_name.clone(),
        };

        let n_embd = k.size("embedding_length", MAX_EMBD)?;
        let n_layer = k.size("block_count", MAX_LAYERS)?;
        let n_ff = k.size("feed_forward_length", MAX_FF)?;
        let n_head = k.size("attention.head_count", MAX_HEADS)?;
        let n_head_kv = k
            .opt_size("attention.head_count_kv", MAX_HEADS)?
            .unwrap_or(n_head);
        let n_ctx_train = k.size("context_length", MAX_CTX)?;

        if !n_head.is_multiple_of(n_head_kv) {
            return Err(ConfigError::Inconsistent(format!(
                "{} = {n_head} is not a multiple of {} = {n_head_kv}",
                k.key("attention.head_count"),
                k.key("attention.head_count_kv")
            )));
        }
        let head_dim = match k.opt_size("attention.key_length", MAX_HEAD_DIM)? {
            Some(d) => d,
            None => {
                if !n_embd.is_multiple_of(n_head) {
                    return Err(ConfigError::Inconsistent(format!(
                        "{} = {n_embd} is not a multiple of {} = {n_head}",
                        k.key("embedding_length"),
                        k.key("attention.head_count")
                    )));
                }
                n_embd / n_head
            }
        };
        if head_dim > MAX_HEAD_DIM {
            return Err(ConfigError::Inconsistent(format!(
                "head dimension {head_dim} exceeds {MAX_HEAD_DIM}"
            )));
        }
        if let Some(v) = k.opt_size("attention.value_length", MAX_HEAD_DIM)?
            && v != head_dim
        {
            return Err(ConfigError::Inconsistent(format!(
                "{} = {v} differs from the key length {head_dim} (not supported)",
                k.key("attention.value_length")
            )));
        }
        let rope_dim = k
            .opt_size("rope.dimension_count", MAX_HEAD_DIM)?
            .unwrap_or(head_dim);
        if rope_dim > head_dim || rope_dim % 2 != 0 {
            return Err(ConfigError::BadValue {
                key: k.key("rope.dimension_count"),
                value: rope_dim.to_string(),
                reason: format!("must be even and at most the head dimension {head_dim}"),
            });
        }

        let rms_eps = match k.opt_float("attention.layer_norm_rms_epsilon")? {
            Some((key, v)) => positive_float(key, v, 1.0)?,
            None => {
                return Err(ConfigError::MissingKey {
                    key: k.key("attention.layer_norm_rms_epsilon"),
                });
            }
        };
        let rope_theta = match k.opt_float("rope.freq_base")? {
            Some((key, v)) => positive_float(key, v, 1e12)?,
            None => 10_000.0,
        };
        let rope_freq_scale = rope_scaling(&k)?;

        let n_vocab = vocab_size(&k, tensors)?;

        let ffn_key = k.key("feed_forward_activation");
        let ffn_act = match k.opt_str(&ffn_key)? {
            None => arch.default_ffn_act(),
            Some(s) => FfnAct::from_name(s).ok_or_else(|| ConfigError::BadValue {
                key: ffn_key.clone(),
                value: format!("\"{s}\""),
                reason: "expected \"silu\" or \"relu2\"".into(),
            })?,
        };
        let bits_key = k.key("activation_bits");
        let act_bits = match k.opt_int(&bits_key)? {
            None | Some(8) => ActBits::Int8,
            Some(1) => ActBits::Binary,
            Some(v) => {
                return Err(ConfigError::BadValue {
                    key: bits_key,
                    value: v.to_string(),
                    reason: "expected 8 or 1".into(),
                });
            }
        };

        Ok(ModelConfig {
            arch,
            arch_name,
            n_vocab,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim,
            n_ff,
            n_ctx_train,
            rms_eps,
            rope_theta,
            rope_freq_scale,
            rope_dim,
            rope: arch.rope_style(),
            ffn_act,
            sub_norms: arch.has_sub_norms(),
            tied_head: !tensors.iter().any(|t| t.name == OUTPUT),
            act_bits,
            weight_type: TensorType::F32,
            embd_type: TensorType::F32,
            head_type: None,
            has_proj_scales: false,
        })
    }

    /// Width of the concatenated query heads.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Width of the concatenated key (or value) heads.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// Query heads per key/value head.
    pub fn gqa_group(&self) -> usize {
        self.n_head / self.n_head_kv
    }

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
            out.push(t(norm_name(l, "attn_norm"), vec![e], TensorRole::Norm));
            for p in [Proj::AttnQ, Proj::AttnK, Proj::AttnV] {
                out.push(t(
                    proj_name(l, p),
                    self.proj_dims(p).to_vec(),
                    TensorRole::Matrix,
                ));
            }
            if self.sub_norms {
                let q = self.q_dim() as u64;
                out.push(t(norm_name(l, "attn_sub_norm"), vec![q], TensorRole::Norm));
            }
            let o = Proj::AttnOut;
            out.push(t(
                proj_name(l, o),
                self.proj_dims(o).to_vec(),
                TensorRole::Matrix,
            ));
            out.push(t(norm_name(l, "ffn_norm"), vec![e], TensorRole::Norm));
            for p in [Proj::FfnGate, Proj::FfnUp] {
                out.push(t(
                    proj_name(l, p),
                    self.proj_dims(p).to_vec(),
                    TensorRole::Matrix,
                ));
            }
            if self.sub_norms {
                let f = self.n_ff as u64;
                out.push(t(norm_name(l, "ffn_sub_norm"), vec![f], TensorRole::Norm));
            }
            let d = Proj::FfnDown;
            out.push(t(
                proj_name(l, d),
                self.proj_dims(d).to_vec(),
                TensorRole::Matrix,
            ));
        }
        out.push(t(OUTPUT_NORM.into(), vec![e], TensorRole::Norm));
        if !self.tied_head {
            out.push(t(OUTPUT.into(), vec![e, v], TensorRole::Head));
        }
        out
    }

    /// Checks the file's tensors against [`Self::expected_tensors`] and records the storage
    /// types. Extra tensors other than one-element projection scales are refused.
    fn check_tensors(&mut self, tensors: &[TensorInfo]) -> Result<(), ConfigError> {
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

    /// Bytes of a K and V cache for `n_ctx` positions stored as `kv_type` (F32, F16, ...),
    /// over all layers. Saturates instead of overflowing.
    pub fn kv_bytes(&self, n_ctx: usize, kv_type: TensorType) -> u64 {
        let per_row = (self.kv_dim() as u64)
            .saturating_mul(kv_type.block_bytes())
            .div_ceil(kv_type.block_len().max(1));
        per_row
            .saturating_mul(n_ctx as u64)
            .saturating_mul(self.n_layer as u64)
            .saturating_mul(2)
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
fn is_proj_scale(name: &str, n_layer: usize) -> bool {
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

/// `A.rope.scaling.type` none/linear (with `A.rope.scaling.factor`) → position multiplier.
fn rope_scaling(k: &Keys<'_>) -> Result<f32, ConfigError> {
    let type_key = k.key("rope.scaling.type");
    let ty = k.opt_str(&type_key)?.unwrap_or("none");
    let factor = match k.opt_float("rope.scaling.factor")? {
        Some((key, v)) => positive_float(key, v, 1e6)?,
        None => 1.0,
    };
    match ty {
        "none" => Ok(1.0),
        "linear" => Ok(1.0 / factor),
        other => Err(ConfigError::BadValue {
            key: type_key,
            value: format!("\"{other}\""),
            reason: "only \"none\" and \"linear\" rope scaling are supported".into(),
        }),
    }
}

/// `A.vocab_size`, else the tokenizer's token count, else the embedding's row count.
fn vocab_size(k: &Keys<'_>, tensors: &[TensorInfo]) -> Result<usize, ConfigError> {
    if let Some(v) = k.opt_size("vocab_size", MAX_VOCAB)? {
        return Ok(v);
    }
    match k.meta.get("tokenizer.ggml.tokens") {
        Some(Value::Array(a)) if !a.is_empty() => {
            let n = a.len();
            if n > MAX_VOCAB {
                return Err(ConfigError::BadValue {
                    key: "tokenizer.ggml.tokens".into(),
                    value: format!("{n} tokens"),
                    reason: format!("more than {MAX_VOCAB}"),
                });
            }
            if !matches!(a, Array::String(_)) {
                return Err(ConfigError::WrongType {
                    key: "tokenizer.ggml.tokens".into(),
                    expected: "array<string>",
                    found: a.type_name(),
                });
            }
            return Ok(n);
        }
        _ => {}
    }
    match tensors.iter().find(|t| t.name == TOKEN_EMBD) {
        Some(t) if t.dims.len() == 2 && (1..=MAX_VOCAB as u64).contains(&t.dims[1]) => {
            Ok(t.dims[1] as usize)
        }
        Some(t) => Err(ConfigError::Inconsistent(format!(
            "cannot take the vocabulary size from {TOKEN_EMBD} dims {:?}",
            t.dims
        ))),
        None => Err(ConfigError::MissingKey {
            key: k.key("vocab_size"),
        }),
    }
}

#[cfg(test)]
#[path = "config/tests.rs"]
mod tests;
