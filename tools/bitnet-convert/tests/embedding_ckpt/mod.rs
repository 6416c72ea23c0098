//! Tiny Hugging Face checkpoints of the BitNet embedding models' two shapes, written here
//! (config.json, safetensors with the reference converter's tensor names, the per-projection
//! input norms included, tokenizer.json / tokenizer_config.json, and optionally
//! sentence-transformers' modules.json + 1_Pooling/config.json), and an independent
//! re-implementation of what bitnet.cpp's `utils/convert-bitnet-embedding-to-gguf.py` makes
//! of them: its name map, its type rules, its numpy absmean and I2_S packing, its F16 casts
//! and Gemma's `+1`, written from the script, sharing no code with the converter.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bitnet_gguf::TensorType;
use safetensors::Dtype;
use serde_json::{Value, json};

use crate::common::{T, Tensors, safetensors_bytes, tmp_dir, values};

/// The two architectures.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `model_type: qwen3` (BitNet-embedding-0.6B's layout).
    Qwen3,
    /// `model_type: gemma3_text` (BitNet-embedding-270M's layout).
    Gemma3,
}

pub const HIDDEN: usize = 256;
pub const LAYERS: usize = 2;
pub const FFN: usize = 512;
pub const VOCAB: usize = 512;

impl Kind {
    /// (heads, kv heads, head_dim): head_dim is not hidden / heads in either.
    pub fn heads(self) -> (usize, usize, usize) {
        match self {
            Kind::Qwen3 => (4, 2, 128),
            Kind::Gemma3 => (2, 1, 256),
        }
    }

    pub fn arch(self) -> &'static str {
        match self {
            Kind::Qwen3 => "qwen3",
            Kind::Gemma3 => "gemma3",
        }
    }

    pub fn config(self) -> Value {
        let (h, kv, hd) = self.heads();
        match self {
            Kind::Qwen3 => json!({
                "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
                "num_attention_heads": h, "num_key_value_heads": kv, "head_dim": hd,
                "intermediate_size": FFN, "vocab_size": VOCAB,
                "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
                "rope_theta": 1_000_000.0, "hidden_act": "silu", "attention_bias": false,
                "use_sliding_window": false, "sliding_window": null, "rope_scaling": null,
                "tie_word_embeddings": false, "bos_token_id": 300, "eos_token_id": 302,
                "torch_dtype": "bfloat16"
            }),
            Kind::Gemma3 => json!({
                "architectures": ["Gemma3TextModel"], "model_type": "gemma3_text",
                "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
                "num_attention_heads": h, "num_key_value_heads": kv, "head_dim": hd,
                "intermediate_size": FFN, "vocab_size": VOCAB,
                "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_local_base_freq": 10000.0,
                "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": hd,
                "sliding_window": 512, "sliding_window_pattern": 6,
                "attn_logit_softcapping": null, "final_logit_softcapping": null,
                "use_bidirectional_attention": false, "rope_scaling": null,
                "bos_token_id": 2, "eos_token_id": [1, 6], "pad_token_id": 0
            }),
        }
    }
}

/// A deterministic stream of roughly normal values (sum of four uniforms).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn uniform(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }

    pub fn normal(&mut self) -> f32 {
        (self.uniform() + self.uniform() + self.uniform() + self.uniform() - 2.0) * 1.7
    }
}

/// A tensor of `dtype` with values `f(rng)`.
fn tensor(dtype: Dtype, shape: &[usize], seed: u64, f: impl Fn(&mut Rng) -> f32) -> T {
    let mut rng = Rng::new(seed);
    let n: usize = shape.iter().product();
    let vals: Vec<f32> = (0..n).map(|_| f(&mut rng)).collect();
    let data = match dtype {
        Dtype::F32 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        Dtype::F16 => vals
            .iter()
            .flat_map(|&v| bitnet_kernels::float::f32_to_f16(v).to_le_bytes())
            .collect(),
        Dtype::BF16 => vals
            .iter()
            .flat_map(|&v| bitnet_kernels::float::f32_to_bf16(v).to_le_bytes())
            .collect(),
        d => panic!("{d:?}"),
    };
    T {
        dtype,
        shape: shape.to_vec(),
        data,
    }
}

/// The checkpoint's tensors: Qwen3 in bf16 under `model.` with an `lm_head` (as
/// `Qwen3ForCausalLM` saves it), Gemma3 without the prefix (`Gemma3TextModel`), f32 matrices
/// and f16 norms. `norm_in`: with the BitLinear input norms (without: a teacher model).
pub fn tensors(kind: Kind, norm_in: bool) -> Tensors {
    let (h, kv, hd) = kind.heads();
    let (q, kvd) = (h * hd, kv * hd);
    let (prefix, mat, norm) = match kind {
        Kind::Qwen3 => ("model.", Dtype::BF16, Dtype::BF16),
        Kind::Gemma3 => ("", Dtype::F32, Dtype::F16),
    };
    let gemma = kind == Kind::Gemma3;
    let mut t = Tensors::new();
    let mut seed = 1u64;
    let mut add = |t: &mut Tensors,
                   name: String,
                   dtype: Dtype,
                   shape: &[usize],
                   f: &dyn Fn(&mut Rng) -> f32| {
        seed += 1;
        t.insert(name, tensor(dtype, shape, seed, f));
    };
    // Gemma's own norms are stored as w (applied as 1 + w); BitLinear's as the factor itself.
    let native_norm = move |r: &mut Rng| {
        if gemma {
            0.1 * r.normal()
        } else {
            1.0 + 0.1 * r.normal()
        }
    };
    let factor_norm = |r: &mut Rng| 1.0 + 0.1 * r.normal();
    let embd_std = if gemma { 0.02 } else { 0.2 };
    add(
        &mut t,
        format!("{prefix}embed_tokens.weight"),
        mat,
        &[VOCAB, HIDDEN],
        &|r| embd_std * r.normal(),
    );
    add(
        &mut t,
        format!("{prefix}norm.weight"),
        norm,
        &[HIDDEN],
        &native_norm,
    );
    for l in 0..LAYERS {
        let p = format!("{prefix}layers.{l}.");
        let projs: [(&str, usize, usize); 7] = [
            ("self_attn.q_proj", q, HIDDEN),
            ("self_attn.k_proj", kvd, HIDDEN),
            ("self_attn.v_proj", kvd, HIDDEN),
            ("self_attn.o_proj", HIDDEN, q),
            ("mlp.gate_proj", FFN, HIDDEN),
            ("mlp.up_proj", FFN, HIDDEN),
            ("mlp.down_proj", HIDDEN, FFN),
        ];
        for (name, out, inp) in projs {
            let std = 1.0 / (inp as f32).sqrt();
            add(
                &mut t,
                format!("{p}{name}.weight"),
                mat,
                &[out, inp],
                &|r| std * r.normal(),
            );
            if norm_in {
                add(
                    &mut t,
                    format!("{p}{name}.norm.weight"),
                    norm,
                    &[inp],
                    &factor_norm,
                );
            }
        }
        add(
            &mut t,
            format!("{p}input_layernorm.weight"),
            norm,
            &[HIDDEN],
            &native_norm,
        );
        add(
            &mut t,
            format!("{p}self_attn.q_norm.weight"),
            norm,
            &[hd],
            &native_norm,
        );
        add(
            &mut t,
            format!("{p}self_attn.k_norm.weight"),
            norm,
            &[hd],
            &native_norm,
        );
        add(
            &mut t,
            format!("{p}post_attention_layernorm.weight"),
            norm,
            &[HIDDEN],
            &native_norm,
        );
        if gemma {
            add(
                &mut t,
                format!("{p}pre_feedforward_layernorm.weight"),
                norm,
                &[HIDDEN],
                &native_norm,
            );
            add(
                &mut t,
                format!("{p}post_feedforward_layernorm.weight"),
                norm,
                &[HIDDEN],
                &native_norm,
            );
        }
    }
    if !gemma {
        add(
            &mut t,
            "lm_head.weight".into(),
            mat,
            &[VOCAB, HIDDEN],
            &|r| 0.2 * r.normal(),
        );
    }
    t
}

/// GPT-2's byte-to-character map (each byte a printable character).
fn byte_chars() -> Vec<char> {
    let printable: Vec<u32> = (33..=126).chain(161..=172).chain(174..=255).collect();
    let mut out = vec!['\0'; 256];
    let mut extra = 0;
    for b in 0..256u32 {
        let c = if printable.contains(&b) {
            b
        } else {
            extra += 1;
            255 + extra
        };
        out[b as usize] = char::from_u32(c).unwrap();
    }
    out
}

/// Qwen3's tokenizer.json: the 256 byte characters (ids 0..256), five merges (ids 256..261),
/// a gap, and added tokens at 300.. (three special, one special-looking and one ordinary
/// non-special).
pub fn qwen3_tokenizer() -> (Value, Value) {
    let mut vocab = serde_json::Map::new();
    for (i, c) in byte_chars().into_iter().enumerate() {
        vocab.insert(c.to_string(), json!(i));
    }
    for (i, t) in ["Ġt", "he", "Ġthe", "in", "er"].iter().enumerate() {
        vocab.insert((*t).into(), json!(256 + i));
    }
    let added = [
        (300, "<|endoftext|>", true),
        (301, "<|im_start|>", true),
        (302, "<|im_end|>", true),
        (303, "<think>", false),
        (304, "▁custom", false),
    ];
    let qwen2_re = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    let tj = json!({
        "version": "1.0",
        "added_tokens": added.iter().map(|(id, c, s)| json!({"id": id, "content": c,
            "single_word": false, "lstrip": false, "rstrip": false, "normalized": false,
            "special": s})).collect::<Vec<_>>(),
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": qwen2_re}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        "model": {"type": "BPE", "vocab": vocab, "merges": ["Ġ t", "h e", ["Ġt", "he"], "i n", "e r"]}
    });
    let tc = json!({
        "add_bos_token": false, "add_prefix_space": false, "bos_token": null,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": null,
        "chat_template": "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}"
    });
    (tj, tc)
}

/// Gemma3's tokenizer.json: specials 0..7, the 256 byte tokens 7..263, pieces 263..276
/// (some produced by the merges, `▁world` by none), a gap, `<only_added>` as an added token
/// only (a gap in the vocabulary), and `▁world` at 400.
pub fn gemma3_tokenizer() -> (Value, Value) {
    let mut vocab = serde_json::Map::new();
    let specials = [
        "<pad>",
        "<eos>",
        "<bos>",
        "<unk>",
        "<mask>",
        "<start_of_turn>",
        "<end_of_turn>",
    ];
    for (i, s) in specials.iter().enumerate() {
        vocab.insert((*s).into(), json!(i));
    }
    for b in 0..256 {
        vocab.insert(format!("<0x{b:02X}>"), json!(7 + b));
    }
    let pieces = [
        "▁", "a", "b", "c", "h", "e", "l", "o", "▁h", "el", "lo", "▁hel", "▁hello", "ab",
    ];
    for (i, p) in pieces.iter().enumerate() {
        vocab.insert((*p).into(), json!(263 + i));
    }
    vocab.insert("▁world".into(), json!(400));
    let added: Vec<Value> = specials
        .iter()
        .enumerate()
        .map(|(i, s)| json!({"id": i, "content": s, "special": i != 4, "normalized": false}))
        .chain([json!({"id": 450, "content": "<only_added>", "special": true})])
        .collect();
    let tj = json!({
        "version": "1.0",
        "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false},
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [], "special_tokens": {}},
        "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "byte_fallback": true, "fuse_unk": true, "vocab": vocab,
            "merges": ["▁ h", "e l", "l o", ["▁h", "el"], "▁hel lo", "a b", "e l"]}
    });
    let tc = json!({
        "add_bos_token": true, "add_eos_token": false, "bos_token": "<bos>",
        "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>",
        "chat_template": "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.content }}<end_of_turn>{% endfor %}"
    });
    (tj, tc)
}

/// What a checkpoint directory holds besides the weights.
#[derive(Clone, Debug)]
pub struct Layout {
    /// `Some(flag)`: modules.json and 1_Pooling/config.json with that pooling flag set.
    pub pooling: Option<&'static str>,
    /// With per-projection input norms (a BitNet model) or without (a teacher).
    pub norm_in: bool,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            pooling: Some("pooling_mode_lasttoken"),
            norm_in: true,
        }
    }
}

fn write_json(path: &Path, v: &Value) {
    std::fs::write(path, serde_json::to_vec_pretty(v).unwrap()).unwrap();
}

/// Writes the checkpoint's side files (config, tokenizer, pooling) into `dir`.
pub fn write_side_files(kind: Kind, layout: &Layout, dir: &Path) {
    write_json(&dir.join("config.json"), &kind.config());
    let (tj, tc) = match kind {
        Kind::Qwen3 => qwen3_tokenizer(),
        Kind::Gemma3 => gemma3_tokenizer(),
    };
    write_json(&dir.join("tokenizer.json"), &tj);
    write_json(&dir.join("tokenizer_config.json"), &tc);
    if let Some(flag) = layout.pooling {
        write_json(
            &dir.join("modules.json"),
            &json!([
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
            ]),
        );
        std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
        let mut p = json!({"word_embedding_dimension": HIDDEN,
            "pooling_mode_cls_token": false, "pooling_mode_mean_tokens": false,
            "pooling_mode_max_tokens": false, "pooling_mode_mean_sqrt_len_tokens": false,
            "pooling_mode_weightedmean_tokens": false, "pooling_mode_lasttoken": false,
            "include_prompt": true});
        p[flag] = json!(true);
        write_json(&dir.join("1_Pooling/config.json"), &p);
    }
}

/// A whole checkpoint in a fresh directory (named by the architecture, as `general.name`).
pub fn checkpoint(kind: Kind, layout: &Layout) -> (PathBuf, Tensors) {
    let dir = tmp_dir("embedding-hf").join(kind.arch());
    std::fs::create_dir_all(&dir).unwrap();
    write_side_files(kind, layout, &dir);
    let t = tensors(kind, layout.norm_in);
    std::fs::write(dir.join("model.safetensors"), safetensors_bytes(&t)).unwrap();
    (dir, t)
}

/// The reference's `build_tensor_name_map`, without the `model.` prefix.
pub fn reference_name_map(kind: Kind) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert("embed_tokens.weight".into(), "token_embd.weight".into());
    m.insert("norm.weight".into(), "output_norm.weight".into());
    for i in 0..LAYERS {
        let (p, b) = (format!("layers.{i}"), format!("blk.{i}"));
        let mut add = |hf: &str, gguf: &str| {
            m.insert(format!("{p}.{hf}.weight"), format!("{b}.{gguf}.weight"));
        };
        add("input_layernorm", "attn_norm");
        add("self_attn.q_proj", "attn_q");
        add("self_attn.k_proj", "attn_k");
        add("self_attn.v_proj", "attn_v");
        add("self_attn.o_proj", "attn_output");
        add("self_attn.q_norm", "attn_q_norm");
        add("self_attn.k_norm", "attn_k_norm");
        add("self_attn.q_proj.norm", "attn_q_norm_in");
        add("self_attn.k_proj.norm", "attn_k_norm_in");
        add("self_attn.v_proj.norm", "attn_v_norm_in");
        add("self_attn.o_proj.norm", "attn_output_norm_in");
        add("mlp.gate_proj", "ffn_gate");
        add("mlp.up_proj", "ffn_up");
        add("mlp.down_proj", "ffn_down");
        add("mlp.gate_proj.norm", "ffn_gate_norm_in");
        add("mlp.up_proj.norm", "ffn_up_norm_in");
        add("mlp.down_proj.norm", "ffn_down_norm_in");
        match kind {
            Kind::Qwen3 => add("post_attention_layernorm", "ffn_norm"),
            Kind::Gemma3 => {
                add("post_attention_layernorm", "post_attention_norm");
                add("pre_feedforward_layernorm", "ffn_norm");
                add("post_feedforward_layernorm", "post_ffw_norm");
            }
        }
    }
    m
}

/// numpy's float32 `np.add.reduce` of a contiguous array (`pairwise_sum`), translated from
/// its C source with explicit indices.
fn numpy_sum(a: &[f32], start: usize, n: usize) -> f32 {
    if n < 8 {
        let mut res = 0.0f32;
        for i in 0..n {
            res += a[start + i];
        }
        res
    } else if n <= 128 {
        let mut r = [0f32; 8];
        r.copy_from_slice(&a[start..start + 8]);
        let mut i = 8;
        while i < n - (n % 8) {
            for (j, rj) in r.iter_mut().enumerate() {
                *rj += a[start + i + j];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        while i < n {
            res += a[start + i];
            i += 1;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        numpy_sum(a, start, n2) + numpy_sum(a, start + n2, n - n2)
    }
}

/// The reference's `quantize_to_i2_s` on a `[rows, cols]` float32 matrix: the I2_S bytes.
pub fn reference_i2s(w: &[f32]) -> Vec<u8> {
    let n = w.len();
    let abs: Vec<f32> = w.iter().map(|v| v.abs()).collect();
    // np.mean: the float32 sum divided by the count, in float32.
    let mean = numpy_sum(&abs, 0, n) / n as f32;
    let (abs_mean, inv_scale): (f64, f32) = if f64::from(mean) < 1e-5 {
        (1e-5, (1.0f64 / 1e-5) as f32)
    } else {
        (f64::from(mean), 1.0f32 / mean)
    };
    let scale = abs_mean as f32;
    let codes: Vec<u8> = w
        .iter()
        .map(|&v| {
            let q = (v * inv_scale).round_ties_even().clamp(-1.0, 1.0);
            if q > 0.5 {
                2
            } else if q < -0.5 {
                0
            } else {
                1
            }
        })
        .collect();
    assert!(n.is_multiple_of(128));
    let mut out = vec![0u8; n / 4 + 32];
    // q.reshape(n_blocks, 4, 32): byte (b, p) = q[b,0,p] << 6 | q[b,1,p] << 4 | ...
    for b in 0..n / 128 {
        for p in 0..32 {
            let c = |g: usize| codes[128 * b + 32 * g + p];
            out[32 * b + p] = (c(0) << 6) | (c(1) << 4) | (c(2) << 2) | c(3);
        }
    }
    out[n / 4..n / 4 + 4].copy_from_slice(&scale.to_le_bytes());
    out
}

/// numpy's `astype(np.float16)` (round to nearest even), computed in f64 from the value's
/// binade, independently of the kernels' converter. Normal and subnormal f16 range only.
pub fn f16_bits(x: f32) -> u16 {
    let sign = if x.is_sign_negative() { 0x8000u16 } else { 0 };
    let a = f64::from(x.abs());
    if a == 0.0 {
        return sign;
    }
    assert!(a < 65504.0, "{x} overflows f16");
    let e = a.log2().floor().max(-14.0) as i32;
    let ulp = 2f64.powi(e - 10);
    let m = (a / ulp).round_ties_even(); // exact: a has 24 significant bits
    let (e, m) = if m >= 2048.0 {
        (e + 1, m / 2.0)
    } else {
        (e, m)
    };
    if m < 1024.0 {
        // subnormal: e = -14, the value is m * 2^-24
        return sign | m as u16;
    }
    sign | (((e + 15) as u16) << 10) | (m as u16 - 1024)
}

/// One tensor the reference writes: ggml dims, type, bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct RefTensor {
    pub dims: Vec<u64>,
    pub ty: TensorType,
    pub bytes: Vec<u8>,
}

/// The reference's tensors for `outtype` ("i2_s", "f16", "f32"), by its rules: unmapped
/// tensors (the lm_head) skipped; linear = 2-D, not a norm, not the embedding; I2_S for
/// linear weights under i2_s; F16 for linear weights and the embedding under f16 and i2_s;
/// norms `+ 1` in float32 for Gemma (not `_norm_in`), then F16 (f16, i2_s) or F32.
pub fn reference_tensors(
    kind: Kind,
    tensors: &Tensors,
    outtype: &str,
) -> BTreeMap<String, RefTensor> {
    let map = reference_name_map(kind);
    let mut out = BTreeMap::new();
    for (hf, t) in tensors {
        let name = hf.strip_prefix("model.").unwrap_or(hf);
        let Some(gguf) = map.get(name) else { continue };
        let data = values(t);
        let dims: Vec<u64> = t.shape.iter().rev().map(|&d| d as u64).collect();
        let is_norm = gguf.ends_with("_norm.weight") || gguf.ends_with("_norm_in.weight");
        let is_embed = gguf == "token_embd.weight";
        let is_linear = t.shape.len() == 2 && !is_norm && !is_embed;
        let half = |x: &[f32]| {
            x.iter()
                .flat_map(|&v| f16_bits(v).to_le_bytes())
                .collect::<Vec<u8>>()
        };
        let (ty, bytes) = if outtype == "i2_s" && is_linear {
            (TensorType::I2_S, reference_i2s(&data))
        } else if outtype != "f32" && (is_linear || is_embed) {
            (TensorType::F16, half(&data))
        } else {
            let gemma_native =
                kind == Kind::Gemma3 && is_norm && !gguf.ends_with("_norm_in.weight");
            let data: Vec<f32> = if gemma_native {
                data.iter().map(|&v| v + 1.0f32).collect()
            } else {
                data
            };
            if outtype == "f32" {
                (
                    TensorType::F32,
                    data.iter().flat_map(|v| v.to_le_bytes()).collect(),
                )
            } else {
                (TensorType::F16, half(&data))
            }
        };
        out.insert(gguf.clone(), RefTensor { dims, ty, bytes });
    }
    out
}
