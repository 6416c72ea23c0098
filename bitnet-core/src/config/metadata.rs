//! Reading the hyper-parameters from GGUF metadata: the keys (llama.cpp's names,
//! `general.architecture` = `A`, then `A.embedding_length`, `A.block_count`, ...), their
//! types and sanity caps, and the rules that fill a [`ModelConfig`] from them.

use bitnet_gguf::{Array, Metadata, TensorInfo, TensorType, Value};

use super::arch::{ActBits, Arch, FfnAct};
use super::error::ConfigError;
use super::model::ModelConfig;
use super::tensors::{OUTPUT, Proj, TOKEN_EMBD, norm_name};

/// Sanity caps: a value above these is a broken or hostile file, not a model.
const MAX_EMBD: usize = 1 << 16;
const MAX_LAYERS: usize = 1024;
const MAX_HEADS: usize = 1024;
const MAX_HEAD_DIM: usize = 1024;
const MAX_FF: usize = 1 << 20;
const MAX_VOCAB: usize = 1 << 22;
const MAX_CTX: usize = 1 << 24;

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
                reason: "expected \"silu\", \"relu2\" or \"gelu\"".into(),
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

        // Sliding-window layers (stock Gemma3 writes the window): the engine attends over
        // every position, which for inputs past the window is another function. The BitNet
        // embedding models' converter writes no window, and bitnet.cpp then runs every layer
        // global (as we do).
        let swa_key = k.key("attention.sliding_window");
        if let Some(w) = k.opt_int(&swa_key)?
            && w > 0
        {
            return Err(ConfigError::BadValue {
                key: swa_key,
                value: w.to_string(),
                reason: "sliding-window attention layers are not supported".into(),
            });
        }
        let proj_norms = tensors
            .iter()
            .any(|t| t.name == norm_name(0, &format!("{}_norm_in", Proj::AttnQ.stem())));
        if proj_norms && arch.has_sub_norms() {
            return Err(ConfigError::Inconsistent(format!(
                "{arch_name} has sub-norms, and the file gives its projections input norms \
                 (*_norm_in) too: no model has both"
            )));
        }
        let pooling_type = match k.opt_int(&k.key("pooling_type"))? {
            None => None,
            Some(v) => Some(u32::try_from(v).ok().filter(|&v| v <= 4).ok_or_else(|| {
                ConfigError::BadValue {
                    key: k.key("pooling_type"),
                    value: v.to_string(),
                    reason: "not a pooling type (none 0, mean 1, cls 2, last 3, rank 4)".into(),
                }
            })?),
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
            proj_norms,
            qk_norms: arch.has_qk_norms(),
            post_norms: arch.is_gemma(),
            embd_scale: arch.is_gemma().then(|| (n_embd as f32).sqrt()),
            tied_head: !tensors.iter().any(|t| t.name == OUTPUT),
            act_bits,
            weight_type: TensorType::F32,
            embd_type: TensorType::F32,
            head_type: None,
            has_proj_scales: false,
            pooling_type,
        })
    }
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
