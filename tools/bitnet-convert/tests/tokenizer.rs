//! The converted tokenizer tokenizes like the source: for each test data vocabulary with
//! llama.cpp's expectations (`vocab/ggml-vocab-NAME.gguf.inp` / `.out`), a source tokenizer
//! file is built (the golden checkpoint's own `tokenizer.model` for Llama-2 SPM; a
//! `tokenizer.json` written from the vocabulary's tokens and merges for the byte-level BPE
//! ones), converted, loaded in the runtime's tokenizer, and must give the expected ids.

mod common;

use std::path::Path;

use bitnet_convert::HfConfig;
use bitnet_convert::tokenizer::{self, ConvertedVocab};
use bitnet_core::tokenizer::Tokenizer;
use bitnet_gguf::{GgufFile, LoadMode};
use common::*;
use serde_json::{Value, json};

/// The test cases, split as llama.cpp's test-tokenizer-0 does.
fn cases(name: &str) -> Vec<(String, Vec<u32>)> {
    let read = |ext: &str| {
        let path = testdata(&format!("vocab/ggml-vocab-{name}.gguf.{ext}"));
        std::fs::read_to_string(path).unwrap()
    };
    let (inp, out) = (read("inp"), read("out"));
    let sep = "\n__ggml_vocab_test__\n";
    let mut texts = Vec::new();
    let mut rest = inp.as_str();
    while !rest.is_empty() {
        match rest.find(sep) {
            Some(p) => {
                texts.push(rest[..p].to_owned());
                rest = &rest[p + sep.len()..];
            }
            None => {
                texts.push(rest.to_owned());
                rest = "";
            }
        }
    }
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(texts.len(), ids.len(), "{name}: case count");
    texts.into_iter().zip(ids).collect()
}

fn check_cases(name: &str, v: &ConvertedVocab) {
    let cases = cases(name);
    let tok = Tokenizer::from_spec(v.spec.clone()).unwrap();
    let mut failed = 0;
    for (text, want) in &cases {
        let got = tok.encode(text, false, false);
        if &got != want {
            failed += 1;
            eprintln!("{name}: {text:?}\n  want {want:?}\n  got  {got:?}");
        }
    }
    eprintln!("{name}: {}/{} cases", cases.len() - failed, cases.len());
    assert!(cases.len() >= 10 && failed == 0);
}

/// A config.json for a vocabulary of `n` tokens (the model shape does not matter here).
fn config(dir: &Path, n: usize) -> HfConfig {
    let v = json!({
        "architectures": ["BitNetForCausalLM"], "hidden_act": "relu2", "hidden_size": 256,
        "intermediate_size": 768, "num_hidden_layers": 1, "num_attention_heads": 4,
        "vocab_size": n
    });
    HfConfig::from_value(&dir.join("config.json"), &v).unwrap()
}

#[test]
fn sentencepiece_model_converts_to_the_llama_spm_vocab() {
    let dir = golden_hf();
    let reference = testdata("vocab/ggml-vocab-llama-spm.gguf");
    let cfg = HfConfig::read(dir).unwrap();
    let v = tokenizer::convert(dir, &cfg, None).unwrap();
    let f = GgufFile::open(&reference, LoadMode::Read).unwrap();
    let md = f.metadata();
    assert_eq!(v.spec.model, "llama");
    assert_eq!(
        v.spec.tokens,
        md.get_str_array("tokenizer.ggml.tokens").unwrap()
    );
    assert_eq!(
        v.spec.scores.as_deref().unwrap(),
        md.get_f32_array("tokenizer.ggml.scores").unwrap()
    );
    let types: Vec<i64> = md
        .get_i32_array("tokenizer.ggml.token_type")
        .unwrap()
        .iter()
        .map(|&x| i64::from(x))
        .collect();
    assert_eq!(v.spec.token_types.as_deref().unwrap(), &types[..]);
    assert_eq!(
        (v.spec.bos_id, v.spec.eos_id, v.spec.unk_id),
        (Some(1), Some(2), Some(0))
    );
    assert_eq!((v.spec.add_bos, v.spec.add_eos), (Some(true), Some(false)));
    check_cases("llama-spm", &v);
    // The golden prompt tokenizes to the golden ids, BOS included.
    let tok = Tokenizer::from_spec(v.spec.clone()).unwrap();
    let prompt = std::fs::read_to_string(testdata("golden/tools/prompt.txt")).unwrap();
    assert_eq!(
        tok.encode(prompt.trim_end_matches('\n'), true, false),
        golden_tokens()
    );
}

/// Writes a `tokenizer.json` (and `tokenizer_config.json`) with the vocabulary of a vocab
/// GGUF and the given pre-tokenizer, as Hugging Face's `tokenizers` lays them out.
fn bpe_source(vocab: &Path, pre_tokenizer: Value, dir: &Path) -> usize {
    let f = GgufFile::open(vocab, LoadMode::Read).unwrap();
    let md = f.metadata();
    let tokens = md.get_str_array("tokenizer.ggml.tokens").unwrap();
    let types = md.get_i32_array("tokenizer.ggml.token_type").unwrap();
    let merges = md.get_str_array("tokenizer.ggml.merges").unwrap();
    let mut vocab_map = serde_json::Map::new();
    let mut added = Vec::new();
    for (i, (t, &ty)) in tokens.iter().zip(types).enumerate() {
        if ty == 1 {
            vocab_map.insert(t.clone(), i.into());
        } else {
            added.push(
                json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": ty != 3, "special": ty == 3}),
            );
        }
    }
    let tj = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null, "pre_tokenizer": pre_tokenizer,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab_map, "merges": merges}
    });
    std::fs::write(dir.join("tokenizer.json"), serde_json::to_vec(&tj).unwrap()).unwrap();
    let id = |k: &str| md.get_opt_u32(k).unwrap();
    let mut tc = json!({"tokenizer_class": "PreTrainedTokenizerFast"});
    if let Some(b) = id("tokenizer.ggml.bos_token_id") {
        tc["bos_token"] = tokens[b as usize].clone().into();
    }
    if let Some(e) = id("tokenizer.ggml.eos_token_id") {
        tc["eos_token"] = tokens[e as usize].clone().into();
    }
    if let Ok(Some(b)) = md.get_opt_bool("tokenizer.ggml.add_bos_token") {
        tc["add_bos_token"] = b.into();
    }
    std::fs::write(dir.join("tokenizer_config.json"), tc.to_string()).unwrap();
    tokens.len()
}

fn split_regex(re: &str) -> Value {
    json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": re}, "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})
}

const LLAMA3_RE: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

fn bpe_round_trip(name: &str, pre: Value, want_pre: &str) {
    let vocab = testdata(&format!("vocab/ggml-vocab-{name}.gguf"));
    let dir = tmp_dir(name);
    let n = bpe_source(&vocab, pre, &dir);
    let v = tokenizer::convert(&dir, &config(&dir, n), None).unwrap();
    assert_eq!(v.spec.model, "gpt2");
    assert_eq!(v.spec.pre.as_deref(), Some(want_pre));
    let f = GgufFile::open(&vocab, LoadMode::Read).unwrap();
    let md = f.metadata();
    assert_eq!(
        v.spec.tokens,
        md.get_str_array("tokenizer.ggml.tokens").unwrap()
    );
    assert_eq!(
        v.spec.merges.as_deref().unwrap(),
        md.get_str_array("tokenizer.ggml.merges").unwrap()
    );
    assert_eq!(
        v.spec.bos_id,
        md.get_opt_u32("tokenizer.ggml.bos_token_id").unwrap()
    );
    check_cases(name, &v);
}

#[test]
fn llama3_tokenizer_json_converts_to_llama_bpe() {
    bpe_round_trip("llama-bpe", split_regex(LLAMA3_RE), "llama-bpe");
}

#[test]
fn gpt2_tokenizer_json_converts_to_gpt_2() {
    bpe_round_trip(
        "gpt-2",
        json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}),
        "gpt-2",
    );
}

#[test]
fn starcoder_tokenizer_json_converts_to_starcoder() {
    bpe_round_trip(
        "starcoder",
        json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}]}),
        "starcoder",
    );
}

#[test]
fn unrecognised_pre_tokenizer_is_an_error_unless_named() {
    let vocab = testdata("vocab/ggml-vocab-gpt-2.gguf");
    let dir = tmp_dir("unknown-pre");
    let n = bpe_source(&vocab, split_regex(r"\w+|[^\w\s]+|\s+"), &dir);
    let cfg = config(&dir, n);
    let err = tokenizer::convert(&dir, &cfg, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tokenizer.json") && err.contains("--pre"),
        "{err}"
    );
    let v = tokenizer::convert(&dir, &cfg, Some("gpt-2")).unwrap();
    assert_eq!(v.spec.pre.as_deref(), Some("gpt-2"));
    // A name the runtime does not implement is refused when the model is planned.
    let v = tokenizer::convert(&dir, &cfg, Some("no-such-pre")).unwrap();
    assert!(Tokenizer::from_spec(v.spec).is_err());
}

#[test]
fn chat_template_and_padding_are_carried_over() {
    let vocab = testdata("vocab/ggml-vocab-gpt-2.gguf");
    let dir = tmp_dir("template");
    let n = bpe_source(
        &vocab,
        json!({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}),
        &dir,
    );
    let mut tc: Value =
        serde_json::from_slice(&std::fs::read(dir.join("tokenizer_config.json")).unwrap()).unwrap();
    tc["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}".into();
    std::fs::write(dir.join("tokenizer_config.json"), tc.to_string()).unwrap();
    // The embedding has 7 more rows than the tokenizer has tokens.
    let v = tokenizer::convert(&dir, &config(&dir, n + 7), None).unwrap();
    assert_eq!(v.spec.tokens.len(), n + 7);
    assert_eq!(v.spec.tokens[n + 6], format!("[PAD{}]", n + 6));
    assert_eq!(
        v.chat_templates,
        vec![(
            None,
            "{% for m in messages %}{{ m['content'] }}{% endfor %}".to_owned()
        )]
    );
    // Fewer embedding rows than tokens cannot work.
    assert!(tokenizer::convert(&dir, &config(&dir, n - 1), None).is_err());
}
