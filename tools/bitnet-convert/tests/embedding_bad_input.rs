//! The embedding route's bad input: each case starts from a valid tiny qwen3 / gemma3
//! checkpoint (`embedding_ckpt`) and breaks one thing; the error must name what is wrong
//! (the tensor, the key, the file), and no output file may be left behind.

mod common;
mod embedding_ckpt;

use std::path::{Path, PathBuf};

use bitnet_convert::{ConvertError, Options, TypeOptions};
use bitnet_gguf::TensorType;
use common::{Tensors, safetensors_bytes, tmp_dir};
use embedding_ckpt::*;
use serde_json::{Value, json};

/// A checkpoint of `kind` with its config and tensors edited.
fn variant(
    kind: Kind,
    layout: &Layout,
    edit_config: impl FnOnce(&mut Value),
    edit_tensors: impl FnOnce(&mut Tensors),
) -> PathBuf {
    let dir = tmp_dir("embedding-bad").join(kind.arch());
    std::fs::create_dir_all(&dir).unwrap();
    write_side_files(kind, layout, &dir);
    let mut cfg = kind.config();
    edit_config(&mut cfg);
    std::fs::write(dir.join("config.json"), serde_json::to_vec(&cfg).unwrap()).unwrap();
    let mut t = tensors(kind, layout.norm_in);
    edit_tensors(&mut t);
    std::fs::write(dir.join("model.safetensors"), safetensors_bytes(&t)).unwrap();
    dir
}

fn config_edit(kind: Kind, edit: impl FnOnce(&mut Value)) -> PathBuf {
    variant(kind, &Layout::default(), edit, |_| {})
}

/// Converts with `types`, expecting an error that mentions each of `must_contain`, and no
/// file left in the output directory.
fn expect_err_with(dir: &Path, types: TypeOptions, must_contain: &[&str]) -> ConvertError {
    let out_dir = tmp_dir("embedding-bad-out");
    let opts = Options {
        types,
        ..Options::default()
    };
    let e = bitnet_convert::convert(dir, &out_dir.join("m.gguf"), &opts, &mut |_| {})
        .map(|_| ())
        .expect_err("conversion should fail");
    let msg = e.to_string();
    for s in must_contain {
        assert!(msg.contains(s), "error {msg:?} does not mention {s:?}");
    }
    let empty = std::fs::read_dir(&out_dir).unwrap().next().is_none();
    assert!(empty, "a failed conversion left files behind ({msg})");
    e
}

fn i2s() -> TypeOptions {
    TypeOptions {
        weights: TensorType::I2_S,
        embd: None,
        head: None,
    }
}

fn expect_err(dir: &Path, must_contain: &[&str]) -> ConvertError {
    expect_err_with(dir, i2s(), must_contain)
}

#[test]
fn a_layer_without_one_input_norm_is_named() {
    let dir = variant(
        Kind::Qwen3,
        &Layout::default(),
        |_| {},
        |t| {
            t.remove("model.layers.1.mlp.down_proj.norm.weight");
        },
    );
    let e = expect_err(
        &dir,
        &[
            "missing tensor model.layers.1.mlp.down_proj.norm.weight",
            "blk.1.ffn_down_norm_in.weight",
        ],
    );
    assert!(matches!(e, ConvertError::MissingTensor { .. }));
}

#[test]
fn an_unknown_model_type_lists_what_is_converted() {
    let dir = config_edit(Kind::Qwen3, |c| {
        c["model_type"] = json!("qwen2");
        c["architectures"] = json!(["Qwen2Model"]);
    });
    let e = expect_err(&dir, &["Qwen2Model", "qwen2", "qwen3", "gemma3_text"]);
    assert!(matches!(e, ConvertError::UnknownArch { .. }));
    // Multimodal Gemma3 (model_type gemma3, no architectures): said as a model_type.
    let dir = config_edit(Kind::Gemma3, |c| {
        c["model_type"] = json!("gemma3");
        c.as_object_mut().unwrap().remove("architectures");
    });
    let e = expect_err(&dir, &["model_type \"gemma3\"", "gemma3_text"]);
    assert!(matches!(e, ConvertError::UnknownArch { .. }));
}

#[test]
fn a_head_dim_the_weights_disagree_with_is_named() {
    let dir = config_edit(Kind::Qwen3, |c| c["head_dim"] = json!(64));
    let e = expect_err(
        &dir,
        &[
            "model.layers.0.self_attn.q_proj.weight",
            "[256, 256]",
            "head_dim 64",
        ],
    );
    assert!(matches!(e, ConvertError::ShapeMismatch { .. }));
    // Without head_dim, hidden / heads = 64 for Qwen3 here: the same disagreement.
    let dir = config_edit(Kind::Qwen3, |c| {
        c.as_object_mut().unwrap().remove("head_dim");
    });
    expect_err(&dir, &["q_proj.weight", "head_dim 64"]);
    // Gemma3 scales scores by query_pre_attn_scalar^-0.5, the runtime by head_dim^-0.5.
    let dir = config_edit(Kind::Gemma3, |c| c["query_pre_attn_scalar"] = json!(128));
    let e = expect_err(&dir, &["query_pre_attn_scalar", "head_dim 256"]);
    assert!(matches!(e, ConvertError::BadValue { .. }));
}

#[test]
fn gemma3_without_tokenizer_json_is_refused() {
    let dir = config_edit(Kind::Gemma3, |_| {});
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    let e = expect_err(&dir, &["tokenizer.json", "not found"]);
    assert!(matches!(e, ConvertError::Tokenizer { .. }));
}

#[test]
fn qwen3_without_endoftext_is_refused() {
    let dir = config_edit(Kind::Qwen3, |_| {});
    let path = dir.join("tokenizer.json");
    let mut tj: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    tj["added_tokens"].as_array_mut().unwrap().remove(0);
    std::fs::write(&path, serde_json::to_vec(&tj).unwrap()).unwrap();
    expect_err(&dir, &["<|endoftext|>", "tokenizer.json"]);
}

#[test]
fn settings_the_runtime_cannot_run_are_refused() {
    let cases: [(Kind, &str, Value, &[&str]); 5] = [
        (
            Kind::Gemma3,
            "use_bidirectional_attention",
            json!(true),
            &["use_bidirectional_attention", "causal"],
        ),
        (
            Kind::Qwen3,
            "attention_bias",
            json!(true),
            &["attention_bias", "biases"],
        ),
        (
            Kind::Qwen3,
            "rope_scaling",
            json!({"rope_type": "yarn", "factor": 4.0}),
            &["rope_scaling", "yarn"],
        ),
        (
            Kind::Gemma3,
            "hidden_activation",
            json!("gelu"),
            &["hidden_activation", "\"gelu\""],
        ),
        (
            Kind::Gemma3,
            "attn_logit_softcapping",
            json!(50.0),
            &["attn_logit_softcapping"],
        ),
    ];
    for (kind, key, value, words) in cases {
        let dir = config_edit(kind, |c| c[key] = value);
        let e = expect_err(&dir, words);
        assert!(matches!(e, ConvertError::BadValue { .. }), "{key}: {e}");
    }
}

#[test]
fn i2s_of_a_teacher_model_is_refused() {
    let layout = Layout {
        norm_in: false,
        ..Layout::default()
    };
    let dir = variant(Kind::Gemma3, &layout, |_| {}, |_| {});
    expect_err(
        &dir,
        &[
            "layers.0.self_attn.q_proj.weight",
            "full-precision",
            "--outtype f16",
        ],
    );
}

#[test]
fn types_the_route_does_not_write_are_refused() {
    let dir = config_edit(Kind::Qwen3, |_| {});
    let with = |weights, head| TypeOptions {
        weights,
        embd: None,
        head,
    };
    expect_err_with(
        &dir,
        with(TensorType::TQ2_0, None),
        &["TQ2_0", "i2_s, f16 or f32"],
    );
    expect_err_with(
        &dir,
        with(TensorType::I2_S, Some(TensorType::F16)),
        &["no output head"],
    );
    // And the other way: float projections are the embedding route's only.
    let golden = common::golden_hf();
    expect_err_with(golden, with(TensorType::F16, None), &["F16", "tq2_0"]);
}
