//! Hugging Face `tokenizer.json` with a byte-level BPE model (GPT-2 style: Llama 3, Falcon3,
//! Qwen2, StarCoder...): the vocabulary, the merges, the added tokens, and the
//! pre-tokenizer, recognised from its structure and regex and named as llama.cpp names it
//! in `tokenizer.ggml.pre`.
//!
//! The pre-tokenizer decides how text is cut into words before merging, so a wrong name
//! tokenizes differently without any error. An unrecognised one is therefore refused
//! unless the user names it (`--pre`).

use std::path::Path;

use serde_json::Value;

use crate::error::ConvertError;

/// Llama 3's split regex (also Falcon3's; llama.cpp runs both as its `llama3` type).
const LLAMA3_RE: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's: Llama 3's with single digits.
const QWEN2_RE: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// GPT-2's (what a ByteLevel pre-tokenizer with `use_regex` applies).
const GPT2_RE: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// GGUF token types.
pub const TYPE_NORMAL: i64 = 1;
/// Control token.
pub const TYPE_CONTROL: i64 = 3;
/// User-defined token.
pub const TYPE_USER_DEFINED: i64 = 4;

/// A parsed byte-level BPE tokenizer.
#[derive(Clone, Debug)]
pub struct BpeJson {
    /// Token text by id (`None` = a gap in the ids).
    pub tokens: Vec<Option<String>>,
    /// GGUF token type by id.
    pub types: Vec<i64>,
    /// Merges, `"left right"`, best first.
    pub merges: Vec<String>,
    /// The recognised pre-tokenizer name, or why none was recognised.
    pub pre: Result<&'static str, String>,
    /// The BOS text of a `TemplateProcessing` post-processor that starts with one.
    pub template_bos: Option<String>,
    /// The EOS text of a post-processor that ends with one.
    pub template_eos: Option<String>,
    /// Conversions the file allows but that may be mistakes (an added token replacing
    /// another), for the converter's report.
    pub warnings: Vec<String>,
}

fn bad(path: &Path, reason: impl Into<String>) -> ConvertError {
    ConvertError::Tokenizer {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// Parses an already-read `tokenizer.json` for a vocabulary of `n_vocab` ids (config.json's
/// `vocab_size`, the embedding's rows): an id at or past it is refused as it is read, before
/// the token table grows to it (a hostile id of millions would otherwise cost seconds and
/// hundreds of MiB before the size check refused it).
pub fn parse(path: &Path, v: &Value, n_vocab: usize) -> Result<BpeJson, ConvertError> {
    let model = v.get("model").ok_or_else(|| bad(path, "no \"model\""))?;
    let ty = model.get("type").and_then(Value::as_str).unwrap_or("BPE");
    if ty != "BPE" {
        return Err(bad(
            path,
            format!(
                "model type {ty} is not supported (byte-level BPE only; SentencePiece needs tokenizer.model)"
            ),
        ));
    }
    let byte_level =
        has_type(v.get("pre_tokenizer"), "ByteLevel") || has_type(v.get("decoder"), "ByteLevel");
    if !byte_level {
        return Err(bad(
            path,
            "a BPE model without a ByteLevel pre-tokenizer or decoder (SentencePiece-style byte fallback): \
             convert from the checkpoint's tokenizer.model instead",
        ));
    }
    let vocab = model
        .get("vocab")
        .and_then(Value::as_object)
        .ok_or_else(|| bad(path, "model.vocab is not an object"))?;
    // Without base tokens nothing but the added tokens could ever be produced: every other
    // text would tokenize to nothing, and the file would still "convert" (into pads).
    if vocab.is_empty() {
        return Err(bad(
            path,
            "model.vocab is empty: ordinary text would have no tokens",
        ));
    }
    let mut tokens: Vec<Option<String>> = Vec::new();
    let mut types: Vec<i64> = Vec::new();
    // Where each token came from, for the message about a reused id.
    let mut added_at: Vec<bool> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    let mut put = |id: u64, text: &str, ty: i64, added: bool| -> Result<(), ConvertError> {
        let id = usize::try_from(id)
            .ok()
            .filter(|&i| i < (1 << 24))
            .ok_or_else(|| bad(path, format!("token {text:?} has id {id}, out of range")))?;
        if id >= n_vocab {
            return Err(bad(
                path,
                format!(
                    "token {text:?} has id {id}, but config.json vocab_size (the embedding's \
                     rows) is {n_vocab}"
                ),
            ));
        }
        if id >= tokens.len() {
            tokens.resize(id + 1, None);
            types.resize(id + 1, TYPE_USER_DEFINED);
            added_at.resize(id + 1, false);
        }
        if let Some(prev) = &tokens[id]
            && prev != text
        {
            let from = |a: bool| {
                if a {
                    "added token"
                } else {
                    "model.vocab entry"
                }
            };
            let what = format!(
                "{} {prev:?} and {} {text:?} both have id {id}",
                from(added_at[id]),
                from(added)
            );
            if !added {
                // Two vocabulary strings for one id: one of them would be lost.
                return Err(bad(path, what));
            }
            // An added token over another token is how Hugging Face tokenizers repurpose an
            // id (the added token wins), so it is converted that way, but said: it may also
            // be a mistake (an added token taking the EOS id).
            warnings.push(format!("{what}: the added token replaces it"));
        }
        tokens[id] = Some(text.to_owned());
        types[id] = ty;
        added_at[id] = added;
        Ok(())
    };
    for (text, id) in vocab {
        let id = id
            .as_u64()
            .ok_or_else(|| bad(path, format!("model.vocab[{text:?}] is not an id")))?;
        put(id, text, TYPE_NORMAL, false)?;
    }
    if let Some(added) = v.get("added_tokens").and_then(Value::as_array) {
        for a in added {
            let id = a.get("id").and_then(Value::as_u64);
            let content = a.get("content").and_then(Value::as_str);
            let (Some(id), Some(content)) = (id, content) else {
                return Err(bad(path, format!("added token {a} lacks an id or content")));
            };
            let special = a.get("special").and_then(Value::as_bool).unwrap_or(false);
            put(
                id,
                content,
                if special {
                    TYPE_CONTROL
                } else {
                    TYPE_USER_DEFINED
                },
                true,
            )?;
        }
    }
    let merges = match model.get("merges") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => {
            let mut out = Vec::with_capacity(a.len());
            for (i, m) in a.iter().enumerate() {
                match m {
                    Value::String(s) => out.push(s.clone()),
                    // Newer files store each merge as a pair, which allows spaces in tokens;
                    // GGUF's format is "left right", so a space inside is refused.
                    Value::Array(p) if p.len() == 2 => {
                        let (Some(l), Some(r)) = (p[0].as_str(), p[1].as_str()) else {
                            return Err(bad(path, format!("merge #{i} is not two strings")));
                        };
                        if l.contains(' ') || r.contains(' ') {
                            return Err(bad(
                                path,
                                format!(
                                    "merge #{i} [{l:?}, {r:?}] contains a space, which GGUF merges cannot express"
                                ),
                            ));
                        }
                        out.push(format!("{l} {r}"));
                    }
                    _ => {
                        return Err(bad(
                            path,
                            format!("merge #{i} is neither \"a b\" nor [a, b]"),
                        ));
                    }
                }
            }
            out
        }
        Some(_) => return Err(bad(path, "model.merges is not an array")),
    };
    let (template_bos, template_eos) = template_specials(v.get("post_processor"));
    Ok(BpeJson {
        tokens,
        types,
        merges,
        pre: detect_pre(v.get("pre_tokenizer"), v.get("normalizer")),
        template_bos,
        template_eos,
        warnings,
    })
}

/// Whether `v` is, or is a `Sequence` containing, a component of type `ty`.
fn has_type(v: Option<&Value>, ty: &str) -> bool {
    let Some(v) = v else { return false };
    if v.get("type").and_then(Value::as_str) == Some(ty) {
        return true;
    }
    ["pretokenizers", "decoders", "processors"]
        .iter()
        .filter_map(|k| v.get(*k).and_then(Value::as_array))
        .flatten()
        .any(|c| has_type(Some(c), ty))
}

/// The components of a pre-tokenizer (a `Sequence` flattened).
fn components(v: &Value) -> Vec<&Value> {
    match v.get("pretokenizers").and_then(Value::as_array) {
        Some(list) if v.get("type").and_then(Value::as_str) == Some("Sequence") => {
            list.iter().collect()
        }
        _ => vec![v],
    }
}

fn describe(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 300 {
        format!(
            "{}...",
            &s[..s
                .char_indices()
                .take_while(|(i, _)| *i < 300)
                .last()
                .map_or(0, |(i, _)| i)]
        )
    } else {
        s
    }
}

/// Recognises the pre-tokenizer; the error says what was found.
fn detect_pre(pre: Option<&Value>, normalizer: Option<&Value>) -> Result<&'static str, String> {
    let Some(pre) = pre.filter(|p| !p.is_null()) else {
        return Err("tokenizer.json has no pre_tokenizer".into());
    };
    if let Some(n) = normalizer.filter(|n| !n.is_null()) {
        // Qwen2 normalizes to NFC, which llama.cpp also ignores; anything else changes text.
        if n.get("type").and_then(Value::as_str) != Some("NFC") {
            return Err(format!("unsupported normalizer {}", describe(n)));
        }
    }
    let comps = components(pre);
    let kind = |c: &Value| {
        c.get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let byte_level_regex = |c: &Value| c.get("use_regex").and_then(Value::as_bool).unwrap_or(true);
    let prefix_space = |c: &Value| {
        c.get("add_prefix_space")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    let found = || format!("unrecognised pre-tokenizer {}", describe(pre));
    match comps.as_slice() {
        [c] if kind(c) == "ByteLevel" && byte_level_regex(c) && !prefix_space(c) => Ok("gpt-2"),
        [d, b]
            if kind(d) == "Digits"
                && d.get("individual_digits").and_then(Value::as_bool) == Some(true)
                && kind(b) == "ByteLevel"
                && byte_level_regex(b)
                && !prefix_space(b) =>
        {
            Ok("starcoder")
        }
        [s, b]
            if kind(s) == "Split"
                && kind(b) == "ByteLevel"
                && !byte_level_regex(b)
                && !prefix_space(b) =>
        {
            let regex = s
                .get("pattern")
                .and_then(|p| p.get("Regex"))
                .and_then(Value::as_str);
            let isolated = s.get("behavior").and_then(Value::as_str) == Some("Isolated")
                && s.get("invert").and_then(Value::as_bool) != Some(true);
            match (regex, isolated) {
                (Some(LLAMA3_RE), true) => Ok("llama-bpe"),
                (Some(QWEN2_RE), true) => Ok("qwen2"),
                (Some(GPT2_RE), true) => Ok("gpt-2"),
                _ => Err(found()),
            }
        }
        _ => Err(found()),
    }
}

/// The special-token texts a `TemplateProcessing` post-processor puts around a single
/// sequence (first and last item), e.g. Llama 3's `<|begin_of_text|> $A`.
fn template_specials(pp: Option<&Value>) -> (Option<String>, Option<String>) {
    let Some(pp) = pp else { return (None, None) };
    let tp = if pp.get("type").and_then(Value::as_str) == Some("TemplateProcessing") {
        Some(pp)
    } else {
        pp.get("processors")
            .and_then(Value::as_array)
            .and_then(|l| {
                l.iter()
                    .find(|p| p.get("type").and_then(Value::as_str) == Some("TemplateProcessing"))
            })
    };
    let Some(single) = tp.and_then(|t| t.get("single")).and_then(Value::as_array) else {
        return (None, None);
    };
    let special = |item: Option<&Value>| {
        item.and_then(|i| i.get("SpecialToken"))
            .and_then(|s| s.get("id"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let first = special(single.first());
    let last = if single.len() > 1 {
        special(single.last())
    } else {
        None
    };
    (first, last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn recognises_the_known_pre_tokenizers() {
        let split = |re: &str| {
            json!({"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": re}, "behavior": "Isolated", "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
            ]})
        };
        assert_eq!(detect_pre(Some(&split(LLAMA3_RE)), None), Ok("llama-bpe"));
        assert_eq!(
            detect_pre(Some(&split(QWEN2_RE)), Some(&json!({"type": "NFC"}))),
            Ok("qwen2")
        );
        let gpt2 = json!({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true});
        assert_eq!(detect_pre(Some(&gpt2), Some(&Value::Null)), Ok("gpt-2"));
        let sc = json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}]});
        assert_eq!(detect_pre(Some(&sc), None), Ok("starcoder"));
        // A regex we do not know is an error, never a default.
        assert!(detect_pre(Some(&split(r"\w+|\s+")), None).is_err());
        assert!(detect_pre(None, None).is_err());
        let prefixed = json!({"type": "ByteLevel", "add_prefix_space": true, "use_regex": true});
        assert!(detect_pre(Some(&prefixed), None).is_err());
    }

    /// Fuzz finding (convert_config, 2026-12-07): one vocabulary id of 9,999,255 in a
    /// 1,024-token checkpoint grew the token table to ten million entries (12 s under ASan)
    /// before the size check refused it. Now the id is refused as it is read, and a bad added
    /// token's id too.
    #[test]
    fn an_id_past_the_vocab_size_is_refused_as_it_is_read() {
        let tj = |vocab: Value, added: Value| {
            json!({"model": {"type": "BPE", "vocab": vocab, "merges": []},
                   "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
                   "added_tokens": added})
        };
        let path = Path::new("tokenizer.json");
        let ok = parse(path, &tj(json!({"a": 0, "b": 1}), json!([])), 2).unwrap();
        assert_eq!(ok.tokens.len(), 2);
        let t0 = std::time::Instant::now();
        let e = parse(
            path,
            &tj(json!({"a": 0, "\u{0140}": 9_999_255}), json!([])),
            1024,
        )
        .map(|_| ())
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("has id 9999255, but config.json vocab_size") && e.contains("1024"),
            "{e}"
        );
        assert!(
            t0.elapsed().as_secs() < 1,
            "refused before growing the table"
        );
        let added = json!([{"id": 4096, "content": "<x>", "special": true}]);
        let e = parse(path, &tj(json!({"a": 0}), added), 1024)
            .map(|_| ())
            .unwrap_err();
        assert!(e.to_string().contains("has id 4096"), "{e}");
    }

    #[test]
    fn reads_the_template_bos() {
        let pp = json!({"type": "Sequence", "processors": [
            {"type": "ByteLevel"},
            {"type": "TemplateProcessing", "single": [
                {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}}]}]});
        assert_eq!(
            template_specials(Some(&pp)),
            (Some("<|begin_of_text|>".into()), None)
        );
    }
}
