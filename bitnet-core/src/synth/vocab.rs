//! The tokenizer part of a generated model: either every `tokenizer.*` key copied from a
//! vocab GGUF, or a built-in SentencePiece-style vocabulary of any size, so a generated model
//! runs end to end without external files.
//!
//! The built-in vocab (`tokenizer.ggml.model = "llama"`): `<unk>`, `<s>`, `</s>` (control),
//! the 256 byte tokens `<0x00>`..`<0xFF>`, then filler pieces: every printable ASCII
//! character, then lower-case letter strings of growing length, each plain and with the SPM
//! word-start mark `▁` (U+2581), scored so that shorter pieces rank first.

use std::path::Path;

use bitnet_gguf::{Array, GgufFile, LoadMode, Metadata, Value};

use super::error::SynthError;

/// Tokens before the filler: unk, bos, eos and 256 byte tokens.
pub const SPECIAL_AND_BYTES: usize = 3 + 256;

/// llama.cpp token types.
const TYPE_NORMAL: i32 = 1;
const TYPE_UNKNOWN: i32 = 2;
const TYPE_CONTROL: i32 = 3;
const TYPE_BYTE: i32 = 6;

/// Copies every `tokenizer.*` key of the GGUF at `path` into `meta`; returns the number of
/// tokens (`tokenizer.ggml.tokens`).
pub fn copy_vocab(path: &Path, meta: &mut Metadata) -> Result<usize, SynthError> {
    let file = GgufFile::open(path, LoadMode::Read).map_err(|source| SynthError::Vocab {
        path: path.to_owned(),
        reason: source.to_string(),
    })?;
    let md = file.metadata();
    let n = match md.get("tokenizer.ggml.tokens") {
        Some(Value::Array(Array::String(t))) if !t.is_empty() => t.len(),
        _ => {
            return Err(SynthError::Vocab {
                path: path.to_owned(),
                reason: "no tokenizer.ggml.tokens string array".into(),
            });
        }
    };
    for (k, v) in md.iter() {
        if k.starts_with("tokenizer.") {
            meta.insert(k, v.clone());
        }
    }
    Ok(n)
}

/// The `n`-th filler piece (n >= 0): printable ASCII first, then letter strings.
fn filler_piece(mut n: usize) -> String {
    const PRINTABLE: std::ops::RangeInclusive<u8> = b'!'..=b'~';
    let n_printable = PRINTABLE.count();
    if n < n_printable {
        return char::from(b'!' + n as u8).to_string();
    }
    n -= n_printable;
    // Then, for length 1, 2, 3, ...: all 26^len letter strings, each as "▁s" then "s"
    // (length-1 plain letters are already among the printable characters, so only "▁s").
    let mut len = 1usize;
    loop {
        let count = 26usize.pow(len as u32);
        let per = if len == 1 { 1 } else { 2 };
        if n < count * per {
            let (idx, plain) = (n / per, per == 2 && n % 2 == 1);
            let mut s: Vec<u8> = Vec::with_capacity(len);
            let mut x = idx;
            for _ in 0..len {
                s.push(b'a' + (x % 26) as u8);
                x /= 26;
            }
            s.reverse();
            let body = String::from_utf8(s).unwrap_or_default();
            return if plain {
                body
            } else {
                format!("\u{2581}{body}")
            };
        }
        n -= count * per;
        len += 1;
    }
}

/// Writes a built-in vocabulary of exactly `n_vocab` tokens into `meta`.
pub fn synthetic_vocab(n_vocab: usize, meta: &mut Metadata) -> Result<(), SynthError> {
    if n_vocab < SPECIAL_AND_BYTES + 1 {
        return Err(SynthError::Spec(format!(
            "the built-in vocabulary needs at least {} tokens, asked for {n_vocab}",
            SPECIAL_AND_BYTES + 1
        )));
    }
    let mut tokens = Vec::with_capacity(n_vocab);
    let mut scores = Vec::with_capacity(n_vocab);
    let mut types = Vec::with_capacity(n_vocab);
    for (t, ty) in [
        ("<unk>", TYPE_UNKNOWN),
        ("<s>", TYPE_CONTROL),
        ("</s>", TYPE_CONTROL),
    ] {
        tokens.push(t.to_string());
        scores.push(0.0f32);
        types.push(ty);
    }
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        scores.push(0.0);
        types.push(TYPE_BYTE);
    }
    for i in 0..n_vocab - SPECIAL_AND_BYTES {
        let piece = filler_piece(i);
        // shorter pieces first: the score falls with the index
        scores.push(-(i as f32));
        tokens.push(piece);
        types.push(TYPE_NORMAL);
    }
    meta.insert("tokenizer.ggml.model", "llama");
    meta.insert("tokenizer.ggml.pre", "default");
    meta.insert("tokenizer.ggml.tokens", tokens);
    meta.insert("tokenizer.ggml.scores", scores);
    meta.insert("tokenizer.ggml.token_type", types);
    meta.insert("tokenizer.ggml.bos_token_id", 1u32);
    meta.insert("tokenizer.ggml.eos_token_id", 2u32);
    meta.insert("tokenizer.ggml.unknown_token_id", 0u32);
    meta.insert("tokenizer.ggml.add_bos_token", true);
    meta.insert("tokenizer.ggml.add_eos_token", false);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn filler_pieces_are_unique_and_ordered() {
        let n = 130_000;
        let mut seen = HashSet::with_capacity(n);
        for i in 0..n {
            let p = filler_piece(i);
            assert!(!p.is_empty());
            assert!(seen.insert(p.clone()), "duplicate piece {p:?} at {i}");
        }
        assert_eq!(filler_piece(0), "!");
        assert_eq!(filler_piece(94), "\u{2581}a");
        assert_eq!(filler_piece(94 + 26), "\u{2581}aa");
        assert_eq!(filler_piece(94 + 27), "aa");
    }

    #[test]
    fn synthetic_vocab_has_the_requested_size() {
        let mut m = Metadata::new();
        synthetic_vocab(1000, &mut m).unwrap();
        let toks = m.get_str_array("tokenizer.ggml.tokens").unwrap();
        assert_eq!(toks.len(), 1000);
        assert_eq!(&toks[..3], ["<unk>", "<s>", "</s>"]);
        assert_eq!(toks[3 + 0x41], "<0x41>");
        assert_eq!(
            m.get_f32_array("tokenizer.ggml.scores").unwrap().len(),
            1000
        );
        assert_eq!(
            m.get_i32_array("tokenizer.ggml.token_type").unwrap()[5],
            TYPE_BYTE
        );
        assert!(synthetic_vocab(100, &mut m).is_err());
    }
}
