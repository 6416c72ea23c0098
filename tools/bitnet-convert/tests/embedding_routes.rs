//! The BitNet embedding models' route (`model_type` qwen3 / gemma3_text): tiny checkpoints of
//! both shapes built in `embedding_ckpt`, converted as I2_S, F16 and F32, and checked
//! - tensor by tensor (name, shape, type, every byte) against an independent
//!   re-implementation of bitnet.cpp's `utils/convert-bitnet-embedding-to-gguf.py` (its name
//!   map, numpy absmean and I2_S packing, F16 casts, Gemma's `+1`);
//! - key by key against the metadata the reference writes (with the departures the README
//!   lists: `pooling_type` only when declared, `<|endoftext|>` found by its text);
//! - by running: `Model::load` and `embed_batch` on every kernel set against bitnet-core's
//!   plain f32 reference forward pass, per token (cosine >= 0.999, at least half the rows
//!   exact to rel-L2 1e-5, as bitnet-core's `embedding_models.rs` compares), and pooled;
//! - through the tokenizer the file carries.

mod common;
mod embedding_ckpt;

// bitnet-core's plain f32 reference forward pass (it reads its decoders as
// `super::decode`) and its metrics, compiled into this test.
#[allow(dead_code)]
#[path = "../../../bitnet-core/tests/common/decode.rs"]
mod decode;
#[allow(dead_code)]
#[path = "../../../bitnet-core/tests/common/metrics.rs"]
mod metrics;
#[allow(dead_code)]
#[path = "../../../bitnet-core/tests/common/reference.rs"]
mod reference;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bitnet_convert::{Options, Plan, TypeOptions};
use bitnet_core::config::ModelConfig;
use bitnet_core::embed::{Normalize, Pooling, embed_batch, pool};
use bitnet_core::engine::{Engine, EngineOptions};
use bitnet_core::model::{LoadOptions, Model};
use bitnet_core::tokenizer::{Tokenizer, VocabSpec};
use bitnet_gguf::{GgufFile, LoadMode, Metadata, TensorType, Value};
use bitnet_kernels::Isa;
use common::values;
use embedding_ckpt::*;
use metrics::{cosine, rel_l2};
use reference::{Emulation, RefModel};

/// A row no int8 rounding flip reached agrees with the reference to float rounding.
const EXACT_REL_L2: f64 = 1e-5;
/// Every token's hidden state, flips included.
const MIN_COSINE: f64 = 0.999;
/// Every row of a model with float projections (f32 activations, no int8 rounding to flip):
/// the engine and the reference differ only in summation order.
const FLOAT_REL_L2: f64 = 1e-3;

fn opts(outtype: TensorType) -> Options {
    Options {
        types: TypeOptions {
            weights: outtype,
            embd: None,
            head: None,
        },
        ..Options::default()
    }
}

fn outtype_name(t: TensorType) -> &'static str {
    match t {
        TensorType::I2_S => "i2_s",
        TensorType::F16 => "f16",
        TensorType::F32 => "f32",
        other => panic!("{other:?}"),
    }
}

/// Converts `dir` into a fresh file.
fn convert(dir: &Path, outtype: TensorType) -> (PathBuf, Plan) {
    let out = common::tmp_dir("embedding-out").join("model.gguf");
    let (plan, _) = bitnet_convert::convert(dir, &out, &opts(outtype), &mut |_| {}).unwrap();
    (out, plan)
}

/// Every tensor equals what the reference writes, byte for byte.
fn check_tensors(kind: Kind, outtype: TensorType) {
    let (dir, tensors) = checkpoint(kind, &Layout::default());
    let (out, _) = convert(&dir, outtype);
    let f = GgufFile::open(&out, LoadMode::Read).unwrap();
    let want = reference_tensors(kind, &tensors, outtype_name(outtype));
    let got: BTreeMap<String, RefTensor> = f
        .tensors()
        .iter()
        .map(|t| {
            let r = RefTensor {
                dims: t.dims.clone(),
                ty: t.ty,
                bytes: f.tensor_data(t).to_vec(),
            };
            (t.name.clone(), r)
        })
        .collect();
    let what = format!("{kind:?} {}", outtype.name());
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{what}: tensor names"
    );
    assert_eq!(got.len(), if kind == Kind::Gemma3 { 42 } else { 38 });
    for (name, w) in &want {
        let g = &got[name];
        assert_eq!((&g.dims, g.ty), (&w.dims, w.ty), "{what}: {name}");
        if let Some(at) = g.bytes.iter().zip(&w.bytes).position(|(a, b)| a != b) {
            panic!("{what}: {name}: byte {at} of {} differs", w.bytes.len());
        }
        assert_eq!(g.bytes.len(), w.bytes.len(), "{what}: {name}");
    }
    if outtype == TensorType::I2_S {
        // The check can tell numpy's float32 pairwise mean from an f64 one: on some
        // projection of these the two differ, and so would the scale's bytes.
        let differs = tensors.iter().any(|(name, t)| {
            let Some(g) = got
                .get(&gguf_name(kind, name))
                .filter(|g| g.ty == TensorType::I2_S)
            else {
                return false;
            };
            let w: Vec<f32> = values(t);
            let sum: f64 = w.iter().map(|v| f64::from(v.abs())).sum();
            let f64_mean = (sum / w.len() as f64) as f32;
            g.bytes[w.len() / 4..w.len() / 4 + 4] != f64_mean.to_le_bytes()
        });
        assert!(
            differs,
            "{what}: no scale tells the numpy rule from an f64 mean"
        );
    }
}

/// The GGUF name of a checkpoint tensor (the reference's map).
fn gguf_name(kind: Kind, hf: &str) -> String {
    let map = reference_name_map(kind);
    map.get(hf.strip_prefix("model.").unwrap_or(hf))
        .cloned()
        .unwrap_or_default()
}

#[test]
fn qwen3_tensors_are_the_references_in_every_outtype() {
    for t in [TensorType::I2_S, TensorType::F16, TensorType::F32] {
        check_tensors(Kind::Qwen3, t);
    }
}

#[test]
fn gemma3_tensors_are_the_references_in_every_outtype() {
    for t in [TensorType::I2_S, TensorType::F16, TensorType::F32] {
        check_tensors(Kind::Gemma3, t);
    }
}

/// The keys the reference writes for the test checkpoints, with their values.
fn reference_keys(kind: Kind, outtype: TensorType) -> BTreeMap<String, Value> {
    let (h, kv, hd) = kind.heads();
    let arch = kind.arch();
    let mut m = Metadata::new();
    let k = |s: &str| format!("{arch}.{s}");
    m.insert("general.architecture", arch);
    m.insert("general.name", arch);
    m.insert(k("block_count"), LAYERS as u32);
    let ctx = if kind == Kind::Qwen3 { 4096u32 } else { 32768 };
    m.insert(k("context_length"), ctx);
    m.insert(k("embedding_length"), HIDDEN as u32);
    m.insert(k("feed_forward_length"), FFN as u32);
    m.insert(k("attention.head_count"), h as u32);
    m.insert(k("attention.head_count_kv"), kv as u32);
    m.insert(k("vocab_size"), VOCAB as u32);
    for key in [
        "rope.dimension_count",
        "attention.key_length",
        "attention.value_length",
    ] {
        m.insert(k(key), hd as u32);
    }
    let base = if kind == Kind::Qwen3 { 1e6f32 } else { 1e4 };
    m.insert(k("rope.freq_base"), base);
    m.insert(k("attention.layer_norm_rms_epsilon"), 1e-6f32);
    let file_type = match outtype {
        TensorType::F32 => 0u32,
        TensorType::F16 => 1,
        _ => 40,
    };
    m.insert("general.file_type", file_type);
    m.insert(k("pooling_type"), 3u32);
    let (tj, tc) = match kind {
        Kind::Qwen3 => qwen3_tokenizer(),
        Kind::Gemma3 => gemma3_tokenizer(),
    };
    m.insert(
        "tokenizer.chat_template",
        tc["chat_template"].as_str().unwrap(),
    );
    let vocab = tj["model"]["vocab"].as_object().unwrap();
    let mut tokens: Vec<String> = (0..VOCAB).map(|i| format!("[PAD{i}]")).collect();
    let mut types = vec![5i32; VOCAB];
    match kind {
        Kind::Qwen3 => {
            for (t, id) in vocab {
                let id = id.as_u64().unwrap() as usize;
                tokens[id] = t.clone();
                types[id] = 1;
            }
            // Special or written like one: control; otherwise user-defined, ▁ as a space.
            for (id, t, ty) in [
                (300, "<|endoftext|>", 3),
                (301, "<|im_start|>", 3),
                (302, "<|im_end|>", 3),
                (303, "<think>", 3),
                (304, " custom", 4),
            ] {
                tokens[id] = t.into();
                types[id] = ty;
            }
            m.insert("tokenizer.ggml.model", "gpt2");
            m.insert("tokenizer.ggml.pre", "qwen2");
            let merges: Vec<String> = ["Ġ t", "h e", "Ġt he", "i n", "e r"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            m.insert("tokenizer.ggml.merges", merges);
            // bos from config.json (tokenizer_config's is null); pad by its text; EOS
            // forced to <|endoftext|>, appended.
            m.insert("tokenizer.ggml.bos_token_id", 300u32);
            m.insert("tokenizer.ggml.eos_token_id", 300u32);
            m.insert("tokenizer.ggml.padding_token_id", 300u32);
            m.insert("tokenizer.ggml.add_bos_token", false);
            m.insert("tokenizer.ggml.add_eos_token", true);
        }
        Kind::Gemma3 => {
            let mut scores = vec![-10000f32; VOCAB];
            for (t, id) in vocab {
                let id = id.as_u64().unwrap() as usize;
                tokens[id] = t.clone();
                (types[id], scores[id]) = if id < 7 {
                    (3, -1000.0) // added tokens, <mask> included (written like a special)
                } else if id < 263 {
                    (6, 0.0) // <0xHH>
                } else {
                    (1, 0.0)
                };
            }
            // Minus the rank of the first merge producing the token.
            for (t, s) in [
                ("▁h", 0.0),
                ("el", -1.0),
                ("lo", -2.0),
                ("▁hel", -3.0),
                ("▁hello", -4.0),
                ("ab", -5.0),
            ] {
                scores[vocab[t].as_u64().unwrap() as usize] = s;
            }
            m.insert("tokenizer.ggml.model", "llama");
            m.insert("tokenizer.ggml.pre", "default");
            m.insert("tokenizer.ggml.scores", scores);
            m.insert("tokenizer.ggml.add_space_prefix", false);
            for (key, id) in [
                ("bos_token_id", 2u32),
                ("eos_token_id", 1),
                ("unknown_token_id", 3),
                ("padding_token_id", 0),
                ("mask_token_id", 4),
            ] {
                m.insert(format!("tokenizer.ggml.{key}"), id);
            }
            m.insert("tokenizer.ggml.add_bos_token", true);
            m.insert("tokenizer.ggml.add_eos_token", false);
        }
    }
    m.insert("tokenizer.ggml.tokens", tokens);
    m.insert("tokenizer.ggml.token_type", types);
    m.iter().map(|(k, v)| (k.to_owned(), v.clone())).collect()
}

fn check_keys(kind: Kind, outtype: TensorType) {
    let (dir, _) = checkpoint(kind, &Layout::default());
    let plan = bitnet_convert::plan(&dir, &opts(outtype)).unwrap();
    let got: BTreeMap<String, Value> = plan
        .meta
        .iter()
        .map(|(k, v)| (k.to_owned(), v.clone()))
        .collect();
    let want = reference_keys(kind, outtype);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{kind:?}: the key set"
    );
    for (k, w) in &want {
        assert!(
            &got[k] == w,
            "{kind:?}: {k}:\n got  {:?}\n want {w:?}",
            got[k]
        );
    }
}

#[test]
fn qwen3_keys_are_the_references() {
    check_keys(Kind::Qwen3, TensorType::I2_S);
    check_keys(Kind::Qwen3, TensorType::F32);
}

#[test]
fn gemma3_keys_are_the_references() {
    check_keys(Kind::Gemma3, TensorType::I2_S);
    check_keys(Kind::Gemma3, TensorType::F16);
}

fn inputs() -> Vec<Vec<u32>> {
    [9usize, 1, 23, 5]
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            (0..n)
                .map(|i| ((i * 53 + k * 29 + 7) % VOCAB) as u32)
                .collect()
        })
        .collect()
}

fn unit(v: &[f32]) -> Vec<f32> {
    let n = v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    v.iter().map(|&x| (f64::from(x) / n) as f32).collect()
}

/// The converted file runs: every token's hidden state on every kernel set against the
/// reference forward pass on the same file, and pooled as the file says.
fn check_runs(path: &Path, what: &str) -> ModelConfig {
    check_runs_within(path, what, false)
}

/// [`check_runs`]; `float`: the projections run in float (a teacher model), where every row
/// must agree to [`FLOAT_REL_L2`].
fn check_runs_within(path: &Path, what: &str, float: bool) -> ModelConfig {
    let f = GgufFile::open(path, LoadMode::Read).unwrap();
    let cfg = ModelConfig::from_gguf(&f).unwrap();
    let mut reference = RefModel::new(&f, &cfg);
    reference.emu = Emulation::f16_kv_cache();
    let inputs = inputs();
    let refs: Vec<&[u32]> = inputs.iter().map(Vec::as_slice).collect();
    let want: Vec<Vec<f32>> = inputs.iter().map(|t| reference.hidden(t)).collect();
    let e = cfg.n_embd;
    for isa in Isa::available() {
        let load = LoadOptions {
            isa: Some(isa),
            ..LoadOptions::default()
        };
        let model = Arc::new(Model::load(path, &load).unwrap());
        let eo = EngineOptions {
            threads: 2,
            pin: false,
            n_ctx: 64,
            batch: 16,
            ..EngineOptions::default()
        };
        let mut engine = Engine::new(model, &eo).unwrap();
        let what = format!("{what} {isa}");
        let rows = embed_batch(&mut engine, &refs, Pooling::None, Normalize(-1)).unwrap();
        let (mut exact, mut total, mut worst) = (0, 0, 0f64);
        for (i, w) in want.iter().enumerate() {
            assert_eq!(rows[i].len(), w.len() / e, "{what}: input {i} rows");
            for (t, got) in rows[i].iter().enumerate() {
                let w = &w[t * e..(t + 1) * e];
                let c = cosine(got, w);
                assert!(c >= MIN_COSINE, "{what}: input {i} token {t} cosine {c}");
                let r = rel_l2(got, w);
                worst = worst.max(r);
                exact += usize::from(r <= EXACT_REL_L2);
                total += 1;
            }
        }
        eprintln!("{what}: {exact} of {total} rows exact, worst rel-L2 {worst:.2e}");
        if float {
            assert!(worst <= FLOAT_REL_L2, "{what}: a row is off by {worst}");
        } else {
            // One int8 activation rounded the other way (a .5 tie after another summation
            // order) moves a row by about 1e-2, and every later row of its input a little.
            assert!(
                exact * 2 >= total,
                "{what}: only {exact} of {total} rows agree to float rounding"
            );
        }
        let got = embed_batch(&mut engine, &refs, Pooling::Last, Normalize(2)).unwrap();
        for (i, w) in want.iter().enumerate() {
            let c = cosine(&got[i][0], &unit(&pool(w, e, Pooling::Last)[0]));
            assert!(c >= MIN_COSINE, "{what} last: input {i} cosine {c}");
        }
    }
    cfg
}

#[test]
fn qwen3_files_load_and_embed_like_the_reference() {
    let (dir, _) = checkpoint(Kind::Qwen3, &Layout::default());
    for t in [TensorType::I2_S, TensorType::F16] {
        let (out, _) = convert(&dir, t);
        let cfg = check_runs(&out, &format!("qwen3 {}", t.name()));
        assert!(cfg.proj_norms && cfg.qk_norms && cfg.tied_head);
        assert_eq!((cfg.pooling_type, cfg.weight_type), (Some(3), t));
    }
}

#[test]
fn gemma3_files_load_and_embed_like_the_reference() {
    let (dir, _) = checkpoint(Kind::Gemma3, &Layout::default());
    for t in [TensorType::I2_S, TensorType::F16] {
        let (out, _) = convert(&dir, t);
        let cfg = check_runs(&out, &format!("gemma3 {}", t.name()));
        assert!(cfg.proj_norms && cfg.post_norms && cfg.embd_scale.is_some());
        assert_eq!((cfg.pooling_type, cfg.weight_type), (Some(3), t));
    }
}

/// A teacher checkpoint (no BitLinear input norms) converts kept float and runs as a plain
/// qwen3 / gemma3 with float projections.
#[test]
fn teacher_models_convert_as_float_projections() {
    for kind in [Kind::Qwen3, Kind::Gemma3] {
        let layout = Layout {
            norm_in: false,
            ..Layout::default()
        };
        let (dir, _) = checkpoint(kind, &layout);
        let (out, _) = convert(&dir, TensorType::F16);
        let cfg = check_runs_within(&out, &format!("{kind:?} teacher f16"), true);
        assert!(!cfg.proj_norms && cfg.qk_norms);
    }
}

/// `{arch}.pooling_type` follows sentence-transformers' pooling config; without one nothing
/// is written (the runtime pools by the last token) and the user is told.
#[test]
fn pooling_type_comes_from_the_sentence_transformers_files() {
    let pooling_of = |layout: &Layout| {
        let (dir, _) = checkpoint(Kind::Gemma3, layout);
        let plan = bitnet_convert::plan(&dir, &opts(TensorType::I2_S)).unwrap();
        let key = plan.meta.get("gemma3.pooling_type").cloned();
        (key, plan.notes.join("\n"), plan.config.pooling_type)
    };
    for (flag, want) in [
        ("pooling_mode_mean_tokens", 1u32),
        ("pooling_mode_cls_token", 2),
        ("pooling_mode_lasttoken", 3),
    ] {
        let layout = Layout {
            pooling: Some(flag),
            ..Layout::default()
        };
        let (key, notes, cfg) = pooling_of(&layout);
        assert_eq!((key, cfg), (Some(Value::U32(want)), Some(want)), "{flag}");
        assert!(!notes.contains("pooling"), "{flag}: {notes}");
    }
    for flag in [None, Some("pooling_mode_max_tokens")] {
        let layout = Layout {
            pooling: flag,
            ..Layout::default()
        };
        let (key, notes, cfg) = pooling_of(&layout);
        assert_eq!((key, cfg), (None, None), "{flag:?}");
        assert!(
            notes.contains("no pooling_type is written") && notes.contains("last token"),
            "{flag:?}: {notes}"
        );
    }
}

/// What the conversion says about the checkpoint: Gemma's sliding window (not written, as
/// the reference writes none), the skipped lm_head, `<|endoftext|>` off its real id.
#[test]
fn departures_from_the_checkpoint_are_said() {
    let (dir, _) = checkpoint(Kind::Gemma3, &Layout::default());
    let plan = bitnet_convert::plan(&dir, &opts(TensorType::I2_S)).unwrap();
    let notes = plan.notes.join("\n");
    assert!(
        notes.contains("512-token sliding window on 2 of its 2 layers"),
        "{notes}"
    );
    let (dir, _) = checkpoint(Kind::Qwen3, &Layout::default());
    let plan = bitnet_convert::plan(&dir, &opts(TensorType::I2_S)).unwrap();
    assert!(
        plan.notes
            .iter()
            .any(|n| n.contains("lm_head.weight skipped"))
    );
    let warnings = plan.vocab.warnings.join("\n");
    assert!(warnings.contains("<|endoftext|> has id 300"), "{warnings}");
}

/// The tokenizer the file carries tokenizes as the checkpoint's: Qwen3 appends
/// `<|endoftext|>`, Gemma3 prepends `<bos>` and merges by the scores.
#[test]
fn the_converted_tokenizers_tokenize() {
    let tokenizer = |kind| {
        let (dir, _) = checkpoint(kind, &Layout::default());
        let (out, _) = convert(&dir, TensorType::I2_S);
        let f = GgufFile::open(&out, LoadMode::Read).unwrap();
        Tokenizer::from_spec(VocabSpec::from_metadata(f.metadata()).unwrap()).unwrap()
    };
    let q = tokenizer(Kind::Qwen3);
    assert_eq!(q.encode(" the", true, false), [258, 300]);
    assert_eq!(q.encode("the", false, false), [116, 257]);
    let g = tokenizer(Kind::Gemma3);
    assert_eq!(g.encode(" hello", true, false), [2, 275]);
    assert_eq!(
        g.encode("hello ab", true, false),
        [2, 267, 272, 273, 263, 276]
    );
}
