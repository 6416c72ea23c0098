//! llama.cpp's own tokenizer expectations (`tests/test-tokenizer-0` format), reproduced
//! exactly on the four vocabularies of the test data (`testdata/vocab`): for `ggml-vocab-NAME.gguf`, `.inp` holds the
//! test strings separated by `\n__ggml_vocab_test__\n` and `.out` one line of ids per
//! string, tokenized with `add_special = false, parse_special = false`.

use bitnet_core::tokenizer::{Tokenizer, TokenizerKind};
use bitnet_gguf::{GgufFile, LoadMode};

fn load(name: &str) -> Tokenizer {
    let path = bitnet_testdata::path(&format!("vocab/ggml-vocab-{name}.gguf"));
    let file = GgufFile::open(&path, LoadMode::Read).expect("open vocab gguf");
    Tokenizer::from_metadata(file.metadata()).expect("build tokenizer")
}

/// The test cases, split exactly as test-tokenizer-0's `read_tests` does.
fn cases(name: &str) -> Vec<(String, Vec<u32>)> {
    let read = |ext: &str| {
        let path = bitnet_testdata::path(&format!("vocab/ggml-vocab-{name}.gguf.{ext}"));
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
    assert_eq!(
        texts.len(),
        ids.len(),
        "{name}: .inp and .out disagree on the case count"
    );
    texts.into_iter().zip(ids).collect()
}

fn check(name: &str, kind: TokenizerKind, min_cases: usize) {
    let tok = load(name);
    assert_eq!(tok.kind(), kind);
    let cases = cases(name);
    assert!(
        cases.len() >= min_cases,
        "{name}: only {} cases",
        cases.len()
    );
    let mut failed = Vec::new();
    for (text, want) in &cases {
        let got = tok.encode(text, false, false);
        if &got != want {
            failed.push(format!("{text:?}\n   want {want:?}\n   got  {got:?}"));
        }
    }
    eprintln!(
        "{name}: {}/{} cases pass",
        cases.len() - failed.len(),
        cases.len()
    );
    assert!(
        failed.is_empty(),
        "{name}: {} failed:\n{}",
        failed.len(),
        failed.join("\n")
    );

    // Decoding the expected ids gives back the input whenever the vocabulary can spell it.
    let mut round_trips = 0;
    for (text, want) in &cases {
        if tok.decode(want) == *text {
            round_trips += 1;
        }
    }
    assert!(
        round_trips * 10 >= cases.len() * 9,
        "{name}: {round_trips} round trips"
    );
}

#[test]
fn llama_spm() {
    check("llama-spm", TokenizerKind::Spm, 30);
}

#[test]
fn llama_bpe() {
    check("llama-bpe", TokenizerKind::Bpe, 30);
}

#[test]
fn gpt_2() {
    check("gpt-2", TokenizerKind::Bpe, 30);
}

#[test]
fn starcoder() {
    check("starcoder", TokenizerKind::Bpe, 30);
}
