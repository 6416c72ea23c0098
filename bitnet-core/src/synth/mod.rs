//! The model generator behind `bitnet gen-model`: random-weight GGUF models of real
//! architectures and shapes, in every weight type the runtime loads, deterministic from a
//! seed, streamed to disk one tensor at a time (memory stays at one tensor, whatever the
//! model size).
//!
//! The tensor list comes from [`ModelConfig::expected_tensors`], and the written metadata and
//! tensor list are checked with [`ModelConfig::from_parts`] before any byte is written, so a
//! generated file always parses with the same rules as a downloaded one.
//!
//! Value distributions: ternary projections draw each trit as 0 with probability
//! `zero_share` (default 1/3) and +-1 otherwise, with one scale per matrix around
//! `1 / sqrt(fan_in * nonzero share)`; binary (Q1_0) projections are +-1 with the scale
//! `1 / sqrt(fan_in)`; norms are `1 + 0.1 N(0,1)`; embeddings are `N(0, (3 / sqrt(n_embd))^2)`
//! so tied-head logits have a standard deviation around 3.

mod error;
mod rng;
mod vocab;
mod weights;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use bitnet_gguf::{GgufWriter, Metadata, TensorInfo, TensorType};

use crate::config::{ActBits, Arch, FfnAct, ModelConfig, TensorRole};

pub use error::SynthError;
pub use rng::{Rng, splitmix64};
pub use vocab::SPECIAL_AND_BYTES;

/// Layers a generated model may have: a typo such as `--layers 1000000000` is refused before
/// the tensor list is built.
const MAX_LAYERS: usize = 4096;
/// Weights a generated model may hold (a 2B-4T shape holds 2.4 G).
const MAX_WEIGHTS: u64 = 1_000_000_000_000;

/// Everything that defines a generated model.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthSpec {
    /// Written as `general.name`.
    pub name: String,
    /// Architecture (decides the gate, rope style and sub-norms).
    pub arch: Arch,
    /// Vocabulary size (replaced by the vocab file's token count when `vocab` is set).
    pub n_vocab: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Blocks.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// FFN inner size.
    pub n_ff: usize,
    /// Training context written to `A.context_length`.
    pub n_ctx: usize,
    /// Rope base.
    pub rope_theta: f32,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Writes `A.feed_forward_activation` when set; `None` = the architecture's rule.
    pub ffn_act: Option<FfnAct>,
    /// Storage type of the layer projections (I2_S, TQ2_0, TQ1_0, Q1_0, or a float type).
    pub weight_type: TensorType,
    /// Storage type of the token embedding.
    pub embd_type: TensorType,
    /// Storage type of an untied output head; `None` = tied to the embedding.
    pub head_type: Option<TensorType>,
    /// PRNG seed.
    pub seed: u64,
    /// Share of zero trits in ternary matrices, in `[0, 1)`.
    pub zero_share: f32,
    /// Copy the `tokenizer.*` keys (and the vocab size) from this GGUF.
    pub vocab: Option<PathBuf>,
    /// Activation precision, written to `A.activation_bits` when binary.
    pub act_bits: ActBits,
    /// Also write one-element `blk.N.<proj>.scale` tensors (the early llama.cpp BitNet
    /// layout), each in `[0.5, 1.5)`.
    pub proj_scales: bool,
    /// Dimension of one head, written as `A.attention.key_length` / `value_length`; `None`
    /// = `n_embd / n_head`, no key written.
    pub head_dim: Option<usize>,
    /// Give every projection its own input norm (`blk.N.<proj>_norm_in`: the BitNet
    /// embedding models).
    pub proj_norms: bool,
    /// Storage type of the norm weights (F32; bitnet.cpp's embedding converter writes F16).
    pub norm_type: TensorType,
    /// Written as `A.pooling_type` when set (llama.cpp's values: mean 1, cls 2, last 3).
    pub pooling_type: Option<u32>,
}

/// A named preset.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PresetInfo {
    /// The name `SynthSpec::preset` accepts.
    pub name: &'static str,
    /// One line: which model's shapes it copies.
    pub description: &'static str,
}

/// The presets, in the order `bitnet gen-model --help` lists them.
pub const PRESETS: &[PresetInfo] = &[
    PresetInfo {
        name: "2b-4t",
        description: "BitNet b1.58 2B-4T shapes: 2560 x 30 layers, 20/5 heads, ffn 6912, vocab 128256, relu2, tied head, I2_S",
    },
    PresetInfo {
        name: "large",
        description: "1bitLLM bitnet_b1_58-large shapes: 1536 x 24 layers, 16 heads, ffn 4096, vocab 32002, arch bitnet (SiLU), TQ2_0",
    },
    PresetInfo {
        name: "3b",
        description: "1bitLLM bitnet_b1_58-3B shapes: 3200 x 26 layers, 32 heads, ffn 8640, vocab 32002, arch bitnet (SiLU), I2_S",
    },
    PresetInfo {
        name: "falcon3-1b",
        description: "Falcon3-1B-Instruct-1.58bit shapes: 2048 x 18 layers, 8/4 heads (dim 256), ffn 8192, vocab 131072, arch llama, I2_S",
    },
    PresetInfo {
        name: "tiny",
        description: "256 x 2 layers, 4/2 heads, ffn 768, vocab 512, bitnet-b1.58 (relu2), TQ2_0: for tests",
    },
    PresetInfo {
        name: "tiny-bitnet",
        description: "as tiny, arch bitnet (SiLU gate), untied Q8_0 head",
    },
    PresetInfo {
        name: "tiny-llama",
        description: "as tiny, arch llama (no sub-norms, normal rope)",
    },
    PresetInfo {
        name: "bitnet-embedding-0.6b",
        description: "BitNet-embedding-0.6B shapes: qwen3, 1024 x 28 layers, 16/8 heads (dim 128), ffn 3072, vocab 151936, input norm per projection, I2_S, F16 norms, last-token pooling",
    },
    PresetInfo {
        name: "bitnet-embedding-270m",
        description: "BitNet-embedding-270M shapes: gemma3, 640 x 18 layers, 4/1 heads (dim 256), ffn 2048, vocab 262144, GELU-tanh, input norm per projection, I2_S, F16 norms, last-token pooling",
    },
    PresetInfo {
        name: "tiny-qwen3-embed",
        description: "bitnet-embedding-0.6b's layout at 256 x 2 layers, 4/2 heads (dim 128), ffn 768, vocab 512: for tests",
    },
    PresetInfo {
        name: "tiny-gemma3-embed",
        description: "bitnet-embedding-270m's layout at 256 x 2 layers, 2/1 heads (dim 256), ffn 512, vocab 512: for tests",
    },
];

impl SynthSpec {
    /// The spec of a preset (see [`PRESETS`]), seed 0.
    pub fn preset(name: &str) -> Result<SynthSpec, SynthError> {
        let tiny = SynthSpec {
            name: "tiny".into(),
            arch: Arch::BitnetB158,
            n_vocab: 512,
            n_embd: 256,
            n_layer: 2,
            n_head: 4,
            n_head_kv: 2,
            n_ff: 768,
            n_ctx: 512,
            rope_theta: 500_000.0,
            rms_eps: 1e-5,
            ffn_act: None,
            weight_type: TensorType::TQ2_0,
            embd_type: TensorType::F16,
            head_type: None,
            seed: 0,
            zero_share: 1.0 / 3.0,
            vocab: None,
            act_bits: ActBits::Int8,
            proj_scales: false,
            head_dim: None,
            proj_norms: false,
            norm_type: TensorType::F32,
            pooling_type: None,
        };
        // The BitNet embedding models (bitnet.cpp's converter's layout: I2_S projections,
        // F16 embedding and norms, last-token pooling).
        let qwen3_embed = SynthSpec {
            name: "bitnet-embedding-0.6b".into(),
            arch: Arch::Qwen3,
            n_vocab: 151_936,
            n_embd: 1024,
            n_layer: 28,
            n_head: 16,
            n_head_kv: 8,
            head_dim: Some(128),
            n_ff: 3072,
            n_ctx: 32_768,
            rope_theta: 1_000_000.0,
            rms_eps: 1e-6,
            weight_type: TensorType::I2_S,
            norm_type: TensorType::F16,
            proj_norms: true,
            pooling_type: Some(3),
            ..tiny.clone()
        };
        let gemma3_embed = SynthSpec {
            name: "bitnet-embedding-270m".into(),
            arch: Arch::Gemma3,
            n_vocab: 262_144,
            n_embd: 640,
            n_layer: 18,
            n_head: 4,
            n_head_kv: 1,
            head_dim: Some(256),
            n_ff: 2048,
            rope_theta: 10_000.0,
            ..qwen3_embed.clone()
        };
        let s = match name {
            "tiny" => tiny,
            "tiny-bitnet" => SynthSpec {
                name: name.into(),
                arch: Arch::Bitnet,
                head_type: Some(TensorType::Q8_0),
                ..tiny
            },
            "tiny-llama" => SynthSpec {
                name: name.into(),
                arch: Arch::Llama,
                ..tiny
            },
            "tiny-qwen3-embed" => SynthSpec {
                name: name.into(),
                n_vocab: 512,
                n_embd: 256,
                n_layer: 2,
                n_head: 4,
                n_head_kv: 2,
                head_dim: Some(128),
                n_ff: 768,
                n_ctx: 512,
                ..qwen3_embed
            },
            "tiny-gemma3-embed" => SynthSpec {
                name: name.into(),
                n_vocab: 512,
                n_embd: 256,
                n_layer: 2,
                n_head: 2,
                n_head_kv: 1,
                head_dim: Some(256),
                n_ff: 512,
                n_ctx: 512,
                ..gemma3_embed
            },
            "bitnet-embedding-0.6b" => qwen3_embed,
            "bitnet-embedding-270m" => gemma3_embed,
            "2b-4t" => SynthSpec {
                name: name.into(),
                n_vocab: 128_256,
                n_embd: 2560,
                n_layer: 30,
                n_head: 20,
                n_head_kv: 5,
                n_ff: 6912,
                n_ctx: 4096,
                weight_type: TensorType::I2_S,
                ..tiny
            },
            "large" => SynthSpec {
                name: name.into(),
                arch: Arch::Bitnet,
                n_vocab: 32_002,
                n_embd: 1536,
                n_layer: 24,
                n_head: 16,
                n_head_kv: 16,
                n_ff: 4096,
                n_ctx: 2048,
                rope_theta: 10_000.0,
                head_type: Some(TensorType::F16),
                ..tiny
            },
            "3b" => SynthSpec {
                name: name.into(),
                arch: Arch::Bitnet,
                n_vocab: 32_002,
                n_embd: 3200,
                n_layer: 26,
                n_head: 32,
                n_head_kv: 32,
                n_ff: 8640,
                n_ctx: 2048,
                rope_theta: 10_000.0,
                weight_type: TensorType::I2_S,
                head_type: Some(TensorType::F16),
                ..tiny
            },
            "falcon3-1b" => SynthSpec {
                name: name.into(),
                arch: Arch::Llama,
                n_vocab: 131_072,
                n_embd: 2048,
                n_layer: 18,
                n_head: 8,
                n_head_kv: 4,
                n_ff: 8192,
                n_ctx: 8192,
                rope_theta: 1_000_042.0,
                rms_eps: 1e-6,
                weight_type: TensorType::I2_S,
                head_type: Some(TensorType::F16),
                ..tiny
            },
            _ => {
                return Err(SynthError::UnknownPreset {
                    name: name.into(),
                    known: PRESETS
                        .iter()
                        .map(|p| p.name)
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
        };
        Ok(s)
    }

    /// Dimension of one head.
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.n_embd / self.n_head.max(1))
    }

    /// Weights of the embedding, the head if untied, and every layer's projections; `None`
    /// where the count overflows.
    fn weight_count(&self) -> Option<u64> {
        let (embd, ff, layers) = (self.n_embd as u64, self.n_ff as u64, self.n_layer as u64);
        let hd = self.head_dim() as u64;
        let q = hd.checked_mul(self.n_head as u64)?;
        let kv = hd.checked_mul(self.n_head_kv as u64)?;
        let attention = embd.checked_mul(q.checked_mul(2)?.checked_add(kv.checked_mul(2)?)?)?;
        let ffn = embd.checked_mul(ff)?.checked_mul(3)?;
        let per_layer = attention.checked_add(ffn)?;
        let tables = (self.n_vocab as u64)
            .checked_mul(embd)?
            .checked_mul(if self.head_type.is_some() { 2 } else { 1 })?;
        layers.checked_mul(per_layer)?.checked_add(tables)
    }

    fn check(&self) -> Result<(), SynthError> {
        let bad = |m: String| Err(SynthError::Spec(m));
        let sizes = [
            ("n_vocab", self.n_vocab),
            ("n_embd", self.n_embd),
            ("n_layer", self.n_layer),
            ("n_head", self.n_head),
            ("n_head_kv", self.n_head_kv),
            ("n_ff", self.n_ff),
            ("n_ctx", self.n_ctx),
        ];
        if let Some((what, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return bad(format!("{what} must be at least 1"));
        }
        if (self.head_dim.is_none() && !self.n_embd.is_multiple_of(self.n_head))
            || !self.n_head.is_multiple_of(self.n_head_kv)
        {
            return bad(format!(
                "n_embd {} must be a multiple of n_head {} (or the head dimension given), and \
                 n_head of n_head_kv {}",
                self.n_embd, self.n_head, self.n_head_kv
            ));
        }
        if self.head_dim() == 0 || !self.head_dim().is_multiple_of(2) {
            return bad(format!(
                "head dimension {} must be even and at least 2",
                self.head_dim()
            ));
        }
        if self.n_layer > MAX_LAYERS {
            return bad(format!(
                "{} layers: at most {MAX_LAYERS} (the largest released models have under 200)",
                self.n_layer
            ));
        }
        match self.weight_count() {
            Some(n) if n <= MAX_WEIGHTS => {}
            _ => {
                return bad(format!(
                    "these shapes hold more than {} G weights: far past any model this makes",
                    MAX_WEIGHTS / 1_000_000_000
                ));
            }
        }
        if !(0.0..1.0).contains(&self.zero_share) {
            return bad(format!("zero share {} must be in [0, 1)", self.zero_share));
        }
        let roles = [
            (TensorRole::Matrix, Some(self.weight_type), "weight type"),
            (
                TensorRole::Embedding,
                Some(self.embd_type),
                "embedding type",
            ),
            (TensorRole::Head, self.head_type, "head type"),
            (TensorRole::Norm, Some(self.norm_type), "norm type"),
        ];
        for (role, ty, what) in roles {
            if let Some(ty) = ty
                && !role.accepts(ty)
            {
                return bad(format!("{what} {} is not supported", ty.name()));
            }
        }
        // The engine has no kernel multiplying ternary weights by 1-bit activations and
        // refuses such a file at load: refusing it here saves writing a model nobody can run.
        if self.act_bits == ActBits::Binary
            && matches!(
                self.weight_type,
                TensorType::I2_S | TensorType::TQ1_0 | TensorType::TQ2_0
            )
        {
            return bad(format!(
                "1-bit activations need 1-bit (q1_0) or float weights, not ternary {}: \
                 the runtime has no ternary x binary kernel",
                self.weight_type.name()
            ));
        }
        // I2_S packs the flattened tensor in blocks of 128 (a block may straddle rows); the
        // other types need every row to be a whole number of blocks.
        let wt = self.weight_type;
        if wt == TensorType::I2_S {
            let kv = self.head_dim() * self.n_head_kv;
            for (what, n) in [
                (
                    "n_embd * q_dim",
                    self.n_embd * self.head_dim() * self.n_head,
                ),
                ("n_embd * kv_dim", self.n_embd * kv),
                ("n_embd * n_ff", self.n_embd * self.n_ff),
            ] {
                if n % 128 != 0 {
                    return bad(format!(
                        "{what} = {n} is not a multiple of 128, the I2_S block; pick another weight type"
                    ));
                }
            }
        } else {
            let block = wt.block_len() as usize;
            for (what, len) in [("n_embd", self.n_embd), ("n_ff", self.n_ff)] {
                if len % block != 0 {
                    return bad(format!(
                        "{what} = {len} is not a multiple of {block}, the block of {}; pick another weight type (I2_S needs 128 weights per matrix, TQ1_0/TQ2_0 256 per row)",
                        wt.name()
                    ));
                }
            }
        }
        for (ty, what) in [
            (Some(self.embd_type), "embedding"),
            (self.head_type, "head"),
        ] {
            if let Some(ty) = ty
                && !(self.n_embd as u64).is_multiple_of(ty.block_len())
            {
                return bad(format!(
                    "n_embd = {} is not a multiple of {}, the block of the {what} type {}",
                    self.n_embd,
                    ty.block_len(),
                    ty.name()
                ));
            }
        }
        Ok(())
    }
}

/// What [`write_model`] produced.
#[derive(Clone, Debug)]
pub struct SynthReport {
    /// The file written.
    pub path: PathBuf,
    /// Its size in bytes.
    pub file_bytes: u64,
    /// Tensors written.
    pub n_tensors: usize,
    /// Weights written (scales excluded).
    pub n_params: u64,
    /// The config the file parses to.
    pub config: ModelConfig,
}

/// `general.file_type` values llama.cpp / bitnet.cpp use for these weight types.
fn file_type(ty: TensorType) -> Option<u32> {
    match ty {
        TensorType::F32 => Some(0),
        TensorType::F16 => Some(1),
        TensorType::Q4_0 => Some(2),
        TensorType::Q8_0 => Some(7),
        TensorType::Q6_K => Some(18),
        TensorType::BF16 => Some(32),
        TensorType::TQ1_0 => Some(36),
        TensorType::TQ2_0 => Some(37),
        TensorType::I2_S => Some(40),
        _ => None,
    }
}

/// The metadata and tensor list of the model `spec` describes (no data).
pub fn plan(spec: &SynthSpec) -> Result<(Metadata, Vec<(TensorInfo, TensorRole)>), SynthError> {
    spec.check()?;
    let mut meta = Metadata::new();
    let arch = spec.arch.canonical_name();
    meta.insert("general.architecture", arch);
    meta.insert("general.name", spec.name.as_str());
    meta.insert("general.quantization_version", 2u32);
    if let Some(ft) = file_type(spec.weight_type) {
        meta.insert("general.file_type", ft);
    }
    let n_vocab = match &spec.vocab {
        Some(path) => vocab::copy_vocab(path, &mut meta)?,
        None => {
            vocab::synthetic_vocab(spec.n_vocab, &mut meta)?;
            spec.n_vocab
        }
    };
    let k = |s: &str| format!("{arch}.{s}");
    let u = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    let head_dim = spec.head_dim();
    meta.insert(k("vocab_size"), u(n_vocab));
    meta.insert(k("context_length"), u(spec.n_ctx));
    meta.insert(k("embedding_length"), u(spec.n_embd));
    meta.insert(k("block_count"), u(spec.n_layer));
    meta.insert(k("feed_forward_length"), u(spec.n_ff));
    meta.insert(k("attention.head_count"), u(spec.n_head));
    meta.insert(k("attention.head_count_kv"), u(spec.n_head_kv));
    meta.insert(k("attention.layer_norm_rms_epsilon"), spec.rms_eps);
    meta.insert(k("rope.freq_base"), spec.rope_theta);
    meta.insert(k("rope.dimension_count"), u(head_dim));
    if spec.head_dim.is_some() {
        meta.insert(k("attention.key_length"), u(head_dim));
        meta.insert(k("attention.value_length"), u(head_dim));
    }
    if let Some(p) = spec.pooling_type {
        meta.insert(k("pooling_type"), p);
    }
    if let Some(act) = spec.ffn_act {
        meta.insert(k("feed_forward_activation"), act.name());
    }
    if spec.act_bits != ActBits::Int8 {
        meta.insert(k("activation_bits"), spec.act_bits.bits());
    }

    let shape = ModelConfig {
        arch: spec.arch,
        arch_name: arch.into(),
        n_vocab,
        n_embd: spec.n_embd,
        n_layer: spec.n_layer,
        n_head: spec.n_head,
        n_head_kv: spec.n_head_kv,
        head_dim,
        n_ff: spec.n_ff,
        n_ctx_train: spec.n_ctx,
        rms_eps: spec.rms_eps,
        rope_theta: spec.rope_theta,
        rope_freq_scale: 1.0,
        rope_dim: head_dim,
        rope: spec.arch.rope_style(),
        ffn_act: spec.ffn_act.unwrap_or(spec.arch.default_ffn_act()),
        sub_norms: spec.arch.has_sub_norms(),
        proj_norms: spec.proj_norms,
        qk_norms: spec.arch.has_qk_norms(),
        post_norms: spec.arch.is_gemma(),
        embd_scale: spec.arch.is_gemma().then(|| (spec.n_embd as f32).sqrt()),
        tied_head: spec.head_type.is_none(),
        act_bits: spec.act_bits,
        weight_type: spec.weight_type,
        embd_type: spec.embd_type,
        head_type: spec.head_type,
        has_proj_scales: spec.proj_scales,
        pooling_type: spec.pooling_type,
    };
    let mut tensors = Vec::new();
    for e in shape.expected_tensors() {
        let ty = match e.role {
            TensorRole::Embedding => spec.embd_type,
            TensorRole::Head => spec.head_type.unwrap_or(spec.embd_type),
            TensorRole::Norm => spec.norm_type,
            TensorRole::Scale => TensorType::F32,
            TensorRole::Matrix => spec.weight_type,
        };
        let scale_name = (spec.proj_scales && e.role == TensorRole::Matrix)
            .then(|| e.name.strip_suffix(".weight").map(|s| format!("{s}.scale")))
            .flatten();
        tensors.push((TensorInfo::new(e.name, e.dims, ty)?, e.role));
        if let Some(name) = scale_name {
            tensors.push((
                TensorInfo::new(name, vec![1], TensorType::F32)?,
                TensorRole::Scale,
            ));
        }
    }
    Ok((meta, tensors))
}

/// Generates the model `spec` describes into `out` (written to `out` + `.part`, renamed on
/// success). `progress(done, total)` is called with tensor-data bytes after every chunk.
/// The CLI does not use this: it checks the destination first and writes through its own
/// temporary file with [`write_model_into`].
pub fn write_model(
    spec: &SynthSpec,
    out: &Path,
    progress: impl FnMut(u64, u64),
) -> Result<SynthReport, SynthError> {
    let mut part = out.as_os_str().to_owned();
    part.push(".part");
    let part = PathBuf::from(part);
    let file = File::create(&part).map_err(|source| SynthError::Io {
        path: part.clone(),
        source,
    })?;
    let mut report = match write_model_into(spec, &file, &part, progress) {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_file(&part);
            return Err(e);
        }
    };
    // Dropped before the rename (Windows renames an open file only when it was opened to
    // share deletion); a failed rename (on Windows: `out` open or mapped elsewhere) removes
    // the part file, as a failed write does.
    drop(file);
    if let Err(source) = std::fs::rename(&part, out) {
        let _ = std::fs::remove_file(&part);
        return Err(SynthError::Io {
            path: out.to_owned(),
            source,
        });
    }
    report.path = out.to_owned();
    Ok(report)
}

/// Generates the model `spec` describes into `file` (from its current position, which
/// should be the start of an empty file), flushed and synced to disk. `path` names the file
/// in errors and in the report. The metadata and tensor list are validated before the first
/// byte is written.
pub fn write_model_into(
    spec: &SynthSpec,
    file: &File,
    path: &Path,
    mut progress: impl FnMut(u64, u64),
) -> Result<SynthReport, SynthError> {
    let (meta, tensors) = plan(spec)?;
    let infos: Vec<TensorInfo> = tensors.iter().map(|(t, _)| t.clone()).collect();
    let config = ModelConfig::from_parts(&meta, &infos)?;
    let io = |source| SynthError::Io {
        path: path.to_owned(),
        source,
    };
    let mut w = GgufWriter::new(
        BufWriter::with_capacity(1 << 20, file),
        3,
        &meta,
        &infos,
        false,
    )?;
    let total: u64 = infos.iter().map(|t| t.n_bytes).sum();
    let mut done = 0u64;
    progress(0, total);
    let dist = weights::Dist {
        seed: spec.seed,
        zero_share: spec.zero_share,
        embd_std: 3.0 / (spec.n_embd as f32).sqrt(),
        latent: spec.proj_norms,
    };
    for (info, role) in &tensors {
        weights::write_tensor(&mut w, info, *role, &dist, &mut |n| {
            done += n;
            progress(done, total);
        })?;
    }
    let mut buf = w.finish()?;
    buf.flush().map_err(io)?;
    let file = buf.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    let file_bytes = file.metadata().map_err(io)?.len();
    Ok(SynthReport {
        path: path.to_owned(),
        file_bytes,
        n_tensors: infos.len(),
        n_params: config.n_params(),
        config,
    })
}

#[cfg(test)]
mod tests;
