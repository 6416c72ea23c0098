//! Gemma3's `tokenizer.json` (a SentencePiece-style BPE: `▁` for spaces, `<0xHH>` byte
//! fallback) as a GGUF `llama` (SentencePiece) vocabulary, built as bitnet.cpp's embedding
//! converter builds it (`_set_vocab_gemma3`), so that the SPM code path tokenizes CJK and
//! spaces as the model was trained:
//! - token `i` is `model.vocab`'s entry with id `i` (added tokens that are not in
//!   `model.vocab` leave a gap), padded with `[PADi]` to the config's vocabulary size;
//! - scores: a token that some merge produces gets minus the rank of its first such merge
//!   (earlier merges win in SPM's bigram loop); an added token -1000; a gap -10000; any
//!   other token 0;
//! - types, first match: an added token is CONTROL when special or written like one
//!   (`<...>`, `[...]`), else USER_DEFINED; `<0xHH>` BYTE; `<unk>` UNKNOWN; else NORMAL;
//!   a gap UNUSED.
//!
//! No merges are written: the scores carry them.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::special_vocab::looks_special;
use crate::error::ConvertError;

/// GGUF token types (llama.cpp's `llama_token_type`).
const TYPE_NORMAL: i64 = 1;
const TYPE_UNKNOWN: i64 = 2;
const TYPE_CONTROL: i64 = 3;
const TYPE_USER_DEFINED: i64 = 4;
const TYPE_UNUSED: i64 = 5;
const TYPE_BYTE: i64 = 6;

/// The reference's scores for added tokens and for ids without a token.
const ADDED_SCORE: f32 = -1000.0;
const GAP_SCORE: f32 = -10000.0;

/// The vocabulary, one entry per id.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SpmVocab {
    /// Token texts.
    pub tokens: Vec<String>,
    /// Scores.
    pub scores: Vec<f32>,
    /// GGUF token types.
    pub types: Vec<i64>,
}

fn bad(path: &Path, reason: impl Into<String>) -> ConvertError {
    ConvertError::Tokenizer {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// The added tokens, `id -> (text, special)`: `tokenizer.json`'s `added_tokens`, then
/// `tokenizer_config.json`'s `added_tokens_decoder` for ids the first does not have (what
/// a transformers tokenizer's `added_tokens_decoder` holds).
pub(super) fn added_tokens(
    tj: &Value,
    tc: Option<&Value>,
    path: &Path,
) -> Result<BTreeMap<u64, (String, bool)>, ConvertError> {
    let mut out = BTreeMap::new();
    for a in tj
        .get("added_tokens")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let id = a.get("id").and_then(Value::as_u64);
        let content = a.get("content").and_then(Value::as_str);
        let (Some(id), Some(content)) = (id, content) else {
            return Err(bad(path, format!("added token {a} lacks an id or content")));
        };
        let special = a.get("special").and_then(Value::as_bool).unwrap_or(false);
        out.insert(id, (content.to_owned(), special));
    }
    let decoder = tc
        .and_then(|t| t.get("added_tokens_decoder"))
        .and_then(Value::as_object);
    for (id, data) in decoder.into_iter().flatten() {
        let (Ok(id), Some(content)) = (
            id.parse::<u64>(),
            data.get("content").and_then(Value::as_str),
        ) else {
            continue;
        };
        let special = data
            .get("special")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        out.entry(id).or_insert((content.to_owned(), special));
    }
    Ok(out)
}

/// The merge result (`left + right`) -> score of its first merge, `-rank`.
fn merge_scores(path: &Path, model: &Value) -> Result<BTreeMap<String, f32>, ConvertError> {
    let mut scores = BTreeMap::new();
    let merges = match model.get("merges") {
        None | Some(Value::Null) => return Ok(scores),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(bad(path, "model.merges is not an array")),
    };
    for (rank, m) in merges.iter().enumerate() {
        let result = match m {
            // "a b": split at the first space, as the reference does.
            Value::String(s) => s.replacen(' ', "", 1),
            Value::Array(p) => {
                let parts: Option<Vec<&str>> = p.iter().map(Value::as_str).collect();
                match parts {
                    Some(parts) => parts.concat(),
                    None => return Err(bad(path, format!("merge #{rank} is not strings"))),
                }
            }
            _ => {
                return Err(bad(
                    path,
                    format!("merge #{rank} is neither \"a b\" nor [a, b]"),
                ));
            }
        };
        scores.entry(result).or_insert(-(rank as f32));
    }
    Ok(scores)
}

/// Whether `t` is a byte-fallback token `<0xHH>` (by the reference's test: six characters
/// with that start and end).
fn is_byte_token(t: &str) -> bool {
    t.starts_with("<0x") && t.ends_with('>') && t.chars().count() == 6
}

/// Builds the vocabulary of `n_vocab` ids from an already-read `tokenizer.json`.
pub(super) fn parse(
    path: &Path,
    tj: &Value,
    added: &BTreeMap<u64, (String, bool)>,
    n_vocab: usize,
) -> Result<SpmVocab, ConvertError> {
    let model = tj.get("model").ok_or_else(|| bad(path, "no \"model\""))?;
    let vocab = model
        .get("vocab")
        .and_then(Value::as_object)
        .ok_or_else(|| bad(path, "model.vocab is not an object of token -> id"))?;
    if vocab.is_empty() {
        return Err(bad(
            path,
            "model.vocab is empty: ordinary text would have no tokens",
        ));
    }
    let mut by_id: BTreeMap<u64, &str> = BTreeMap::new();
    for (text, id) in vocab {
        let id = id
            .as_u64()
            .ok_or_else(|| bad(path, format!("model.vocab[{text:?}] is not an id")))?;
        if id >= n_vocab as u64 {
            return Err(bad(
                path,
                format!(
                    "token {text:?} has id {id}, but config.json vocab_size (the embedding's \
                     rows) is {n_vocab}"
                ),
            ));
        }
        if let Some(prev) = by_id.insert(id, text) {
            return Err(bad(
                path,
                format!("model.vocab entries {prev:?} and {text:?} both have id {id}"),
            ));
        }
    }
    let merge_scores = merge_scores(path, model)?;
    let mut out = SpmVocab {
        tokens: Vec::with_capacity(n_vocab),
        scores: Vec::with_capacity(n_vocab),
        types: Vec::with_capacity(n_vocab),
    };
    for i in 0..n_vocab as u64 {
        let Some(&text) = by_id.get(&i) else {
            out.tokens.push(format!("[PAD{i}]"));
            out.scores.push(GAP_SCORE);
            out.types.push(TYPE_UNUSED);
            continue;
        };
        let (ty, score) = if let Some((_, special)) = added.get(&i) {
            let ty = if *special || looks_special(text) {
                TYPE_CONTROL
            } else {
                TYPE_USER_DEFINED
            };
            (ty, ADDED_SCORE)
        } else if is_byte_token(text) {
            (TYPE_BYTE, 0.0)
        } else if text == "<unk>" {
            (TYPE_UNKNOWN, 0.0)
        } else {
            (TYPE_NORMAL, merge_scores.get(text).copied().unwrap_or(0.0))
        };
        out.tokens.push(text.to_owned());
        out.scores.push(score);
        out.types.push(ty);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scores_and_types_follow_the_reference() {
        let tj = json!({
            "model": {"type": "BPE", "vocab": {
                "<pad>": 0, "<unk>": 1, "<0x41>": 2, "a": 3, "b": 4, "ab": 5, "▁": 6,
                "▁ab": 7, "<mask>": 8, "extra": 9},
                "merges": ["a b", ["▁", "ab"], "a b"]},
            "added_tokens": [
                {"id": 0, "content": "<pad>", "special": true},
                {"id": 8, "content": "<mask>", "special": false},
                {"id": 9, "content": "extra", "special": false},
                {"id": 11, "content": "<only-added>", "special": true}]});
        let p = Path::new("tokenizer.json");
        let added = added_tokens(&tj, None, p).unwrap();
        let v = parse(p, &tj, &added, 12).unwrap();
        assert_eq!(v.tokens[5], "ab");
        assert_eq!(&v.tokens[10..], ["[PAD10]", "[PAD11]"]);
        assert_eq!(
            v.scores,
            [
                -1000.0, 0.0, 0.0, 0.0, 0.0, -0.0, 0.0, -1.0, -1000.0, -1000.0, -10000.0, -10000.0
            ]
        );
        assert_eq!(v.types, [3, 2, 6, 1, 1, 1, 1, 1, 3, 4, 5, 5]);
    }

    #[test]
    fn an_id_beyond_the_vocabulary_is_refused() {
        let tj = json!({"model": {"vocab": {"a": 0, "b": 7}}});
        let p = Path::new("tokenizer.json");
        let e = parse(p, &tj, &BTreeMap::new(), 4).unwrap_err();
        assert!(e.to_string().contains("vocab_size"), "{e}");
    }
}
