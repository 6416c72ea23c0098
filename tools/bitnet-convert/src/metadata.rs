//! The GGUF metadata of a converted model: `general.*`, the architecture's hyper-parameters
//! under the keys bitnet-core's `config.rs` (and llama.cpp) read, and the tokenizer. The
//! BitNet embedding models get exactly the keys bitnet.cpp's embedding converter writes
//! ([`build_embedding`]).

use bitnet_gguf::{Metadata, TensorType};

use crate::hf::HfConfig;
use crate::tokenizer::ConvertedVocab;

/// `general.file_type` for the projection type (llama.cpp's `LLAMA_FTYPE_ALL_F32` 0,
/// `MOSTLY_F16` 1, `MOSTLY_TQ1_0` 36 / `TQ2_0` 37, bitnet.cpp's I2_S 40).
fn file_type(ty: TensorType) -> Option<u32> {
    match ty {
        TensorType::F32 => Some(0),
        TensorType::F16 => Some(1),
        TensorType::TQ1_0 => Some(36),
        TensorType::TQ2_0 => Some(37),
        TensorType::I2_S => Some(40),
        _ => None,
    }
}

/// Builds the metadata.
pub fn build(cfg: &HfConfig, name: &str, weights: TensorType, vocab: &ConvertedVocab) -> Metadata {
    let mut m = Metadata::new();
    let arch = cfg.arch.canonical_name();
    m.insert("general.architecture", arch);
    m.insert("general.name", name);
    m.insert("general.quantization_version", 2u32);
    if let Some(ft) = file_type(weights) {
        m.insert("general.file_type", ft);
    }
    let k = |s: &str| format!("{arch}.{s}");
    let u = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    m.insert(k("vocab_size"), u(cfg.n_vocab));
    m.insert(k("context_length"), u(cfg.n_ctx));
    m.insert(k("embedding_length"), u(cfg.n_embd));
    m.insert(k("block_count"), u(cfg.n_layer));
    m.insert(k("feed_forward_length"), u(cfg.n_ff));
    m.insert(k("attention.head_count"), u(cfg.n_head));
    m.insert(k("attention.head_count_kv"), u(cfg.n_head_kv));
    if cfg.head_dim * cfg.n_head != cfg.n_embd {
        m.insert(k("attention.key_length"), u(cfg.head_dim));
        m.insert(k("attention.value_length"), u(cfg.head_dim));
    }
    m.insert(k("attention.layer_norm_rms_epsilon"), cfg.rms_eps);
    m.insert(k("rope.freq_base"), cfg.rope_theta);
    m.insert(k("rope.dimension_count"), u(cfg.head_dim));
    if let Some(f) = cfg.rope_linear_factor {
        m.insert(k("rope.scaling.type"), "linear");
        m.insert(k("rope.scaling.factor"), f);
    }
    tokenizer(&mut m, vocab);
    m
}

/// The metadata of a BitNet embedding model: the keys of bitnet.cpp's embedding converter
/// (`set_gguf_parameters`, whose order the hyper-parameters keep): no
/// `general.quantization_version`; `key_length`, `value_length` and `rope.dimension_count`
/// always (all head_dim); `rope.freq_base` only when `config.json` gives a base; the epsilon
/// always (`hf/embedding.rs` fills in a missing one); `pooling_type` when the checkpoint
/// declares one (see `hf/pooling.rs`).
pub fn build_embedding(
    cfg: &HfConfig,
    name: &str,
    weights: TensorType,
    pooling_type: Option<u32>,
    vocab: &ConvertedVocab,
) -> Metadata {
    let mut m = Metadata::new();
    let arch = cfg.arch.canonical_name();
    let k = |s: &str| format!("{arch}.{s}");
    let u = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    m.insert("general.architecture", arch);
    m.insert("general.name", name);
    m.insert(k("block_count"), u(cfg.n_layer));
    m.insert(k("context_length"), u(cfg.n_ctx));
    m.insert(k("embedding_length"), u(cfg.n_embd));
    m.insert(k("feed_forward_length"), u(cfg.n_ff));
    m.insert(k("attention.head_count"), u(cfg.n_head));
    m.insert(k("attention.head_count_kv"), u(cfg.n_head_kv));
    m.insert(k("vocab_size"), u(cfg.n_vocab));
    m.insert(k("rope.dimension_count"), u(cfg.head_dim));
    m.insert(k("attention.key_length"), u(cfg.head_dim));
    m.insert(k("attention.value_length"), u(cfg.head_dim));
    if cfg.rope_theta_given {
        m.insert(k("rope.freq_base"), cfg.rope_theta);
    }
    m.insert(k("attention.layer_norm_rms_epsilon"), cfg.rms_eps);
    if let Some(ft) = file_type(weights) {
        m.insert("general.file_type", ft);
    }
    if let Some(p) = pooling_type {
        m.insert(k("pooling_type"), p);
    }
    tokenizer(&mut m, vocab);
    m
}

/// The `tokenizer.*` keys: the vocabulary, the special ids and flags, the chat templates.
fn tokenizer(m: &mut Metadata, vocab: &ConvertedVocab) {
    let s = &vocab.spec;
    m.insert("tokenizer.ggml.model", s.model.as_str());
    if let Some(p) = &s.pre {
        m.insert("tokenizer.ggml.pre", p.as_str());
    }
    m.insert("tokenizer.ggml.tokens", s.tokens.clone());
    if let Some(sc) = &s.scores {
        m.insert("tokenizer.ggml.scores", sc.clone());
    }
    if let Some(t) = &s.token_types {
        let t: Vec<i32> = t.iter().map(|&x| x as i32).collect();
        m.insert("tokenizer.ggml.token_type", t);
    }
    if let Some(mg) = &s.merges {
        m.insert("tokenizer.ggml.merges", mg.clone());
    }
    for (key, id) in [
        ("tokenizer.ggml.bos_token_id", s.bos_id),
        ("tokenizer.ggml.eos_token_id", s.eos_id),
        ("tokenizer.ggml.eot_token_id", s.eot_id),
        ("tokenizer.ggml.unknown_token_id", s.unk_id),
        ("tokenizer.ggml.padding_token_id", s.pad_id),
    ] {
        if let Some(id) = id {
            m.insert(key, id);
        }
    }
    for (key, v) in [
        ("tokenizer.ggml.add_bos_token", s.add_bos),
        ("tokenizer.ggml.add_eos_token", s.add_eos),
        ("tokenizer.ggml.add_space_prefix", s.add_space_prefix),
    ] {
        if let Some(v) = v {
            m.insert(key, v);
        }
    }
    for &(key, id) in &vocab.extra_ids {
        m.insert(key, id);
    }
    for (name, tpl) in &vocab.chat_templates {
        let key = match name {
            None => "tokenizer.chat_template".to_owned(),
            Some(n) => format!("tokenizer.chat_template.{n}"),
        };
        m.insert(key, tpl.as_str());
    }
}
