//! The BitNet embedding models' tokenizers as GGUF metadata, as bitnet.cpp's embedding
//! converter writes them (`set_vocab`), both read from `tokenizer.json`:
//! - Qwen3: byte-level BPE (`gpt2`), the pre-tokenizer recognised from its regex (`qwen2`
//!   for Qwen's; the reference recognises it by a hash of the tokenization of a test text),
//!   the merges; ids without a token are `[PADi]` (UNUSED); an added token is CONTROL when
//!   special or written like one (`<...>`, `[...]`), else USER_DEFINED with `▁` read as a
//!   space. EOS is `<|endoftext|>` (the text Qwen3-Embedding's tokenizer appends, id 151643
//!   in the real vocabulary) and `add_eos_token` is true: last-token pooling reads the
//!   state at that token.
//! - Gemma3: a SentencePiece vocabulary (`llama`, pre `default`, no space prefix) built in
//!   `gemma_json.rs`; the special tokens and flags as `tokenizer_config.json` says.
//!
//! The special ids and flags come from `special_vocab.rs` (gguf-py's rules); the chat
//! template from `tokenizer_config.json` or `chat_template.jinja`, as on the other routes.

use std::path::Path;

use bitnet_core::config::Arch;
use bitnet_core::tokenizer::VocabSpec;

use super::bpe_json::{self, TYPE_CONTROL, TYPE_USER_DEFINED};
use super::{ConvertedVocab, PRE_NAMES, TYPE_UNUSED, chat_templates, gemma_json, special_vocab};
use crate::error::ConvertError;
use crate::hf::{self, HfConfig};

/// The EOS text the Qwen3 embedding models end every input with, and its id in their
/// vocabulary (the reference writes this id).
const QWEN3_EOS_TEXT: &str = "<|endoftext|>";
const QWEN3_EOS_ID: u32 = 151_643;

/// Reads the tokenizer of the embedding model in `dir`.
pub fn convert(
    dir: &Path,
    cfg: &HfConfig,
    pre_override: Option<&str>,
) -> Result<ConvertedVocab, ConvertError> {
    let json_path = dir.join("tokenizer.json");
    if !crate::files::is_present(&json_path)? {
        return Err(ConvertError::Tokenizer {
            path: json_path,
            reason: format!(
                "not found: the {} embedding route reads the vocabulary from tokenizer.json \
                 (as bitnet.cpp's converter does)",
                cfg.arch.canonical_name()
            ),
        });
    }
    let mut inputs = vec![json_path.clone()];
    let tc_path = dir.join("tokenizer_config.json");
    let tc = hf::read_json_opt(&tc_path)?;
    if tc.is_some() {
        inputs.push(tc_path.clone());
    }
    let config = hf::read_json(&dir.join("config.json"))?;
    let tj = hf::read_json(&json_path)?;
    let mut warnings = Vec::new();
    let n = cfg.n_vocab;
    let specials = special_vocab::read(&tj, tc.as_ref(), Some(&config), n, &mut warnings);
    let mut spec = match cfg.arch {
        Arch::Qwen3 => qwen3_vocab(&json_path, &tj, n, pre_override, &mut warnings)?,
        _ => {
            let added = gemma_json::added_tokens(&tj, tc.as_ref(), &json_path)?;
            let v = gemma_json::parse(&json_path, &tj, &added, n)?;
            VocabSpec {
                model: "llama".into(),
                pre: Some("default".into()),
                tokens: v.tokens,
                scores: Some(v.scores),
                token_types: Some(v.types),
                add_space_prefix: Some(false),
                ..VocabSpec::default()
            }
        }
    };
    spec.bos_id = specials.id("bos");
    spec.eos_id = specials.id("eos");
    spec.unk_id = specials.id("unk");
    spec.pad_id = specials.id("pad");
    spec.add_bos = specials.add_bos;
    spec.add_eos = specials.add_eos;
    if cfg.arch == Arch::Qwen3 {
        spec.eos_id = Some(qwen3_eos(&json_path, &spec.tokens, &mut warnings)?);
        spec.add_eos = Some(true);
    }
    let extra_ids = special_vocab::KINDS
        .iter()
        .filter(|(kind, _)| matches!(*kind, "sep" | "cls" | "mask"))
        .filter_map(|&(kind, key)| specials.id(kind).map(|id| (key, id)))
        .collect();
    let chat_templates = chat_templates(dir, tc.as_ref(), &tc_path, &mut inputs)?;
    Ok(ConvertedVocab {
        spec,
        source: json_path,
        chat_templates,
        warnings,
        inputs,
        extra_ids,
    })
}

/// Qwen3's byte-level BPE vocabulary, typed and padded as the reference's `_set_vocab_bpe`.
fn qwen3_vocab(
    path: &Path,
    tj: &serde_json::Value,
    n: usize,
    pre_override: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<VocabSpec, ConvertError> {
    let b = bpe_json::parse(path, tj, n)?;
    warnings.extend(b.warnings.iter().cloned());
    let pre = match (pre_override, &b.pre) {
        (Some(p), _) => p.to_owned(),
        (None, Ok(p)) => (*p).to_owned(),
        (None, Err(why)) => {
            return Err(ConvertError::Tokenizer {
                path: path.to_owned(),
                reason: format!(
                    "{why}; name it with --pre NAME ({}) if you know which it is",
                    PRE_NAMES.join(", ")
                ),
            });
        }
    };
    if b.tokens.len() > n {
        return Err(ConvertError::Tokenizer {
            path: path.to_owned(),
            reason: format!(
                "{} tokens, but config.json vocab_size (the embedding's rows) is {n}",
                b.tokens.len()
            ),
        });
    }
    let mut tokens = Vec::with_capacity(n);
    let mut types = Vec::with_capacity(n);
    for i in 0..n {
        match b.tokens.get(i).cloned().flatten() {
            None => {
                tokens.push(format!("[PAD{i}]"));
                types.push(TYPE_UNUSED);
            }
            // bpe_json types a non-special added token USER_DEFINED.
            Some(t) if b.types[i] == TYPE_USER_DEFINED => {
                if special_vocab::looks_special(&t) {
                    tokens.push(t);
                    types.push(TYPE_CONTROL);
                } else {
                    tokens.push(t.replace('\u{2581}', " "));
                    types.push(TYPE_USER_DEFINED);
                }
            }
            Some(t) => {
                tokens.push(t);
                types.push(b.types[i]);
            }
        }
    }
    Ok(VocabSpec {
        model: "gpt2".into(),
        pre: Some(pre),
        tokens,
        token_types: Some(types),
        merges: Some(b.merges),
        ..VocabSpec::default()
    })
}

/// The id of `<|endoftext|>`, Qwen3's EOS whatever the tokenizer files name.
fn qwen3_eos(
    path: &Path,
    tokens: &[String],
    warnings: &mut Vec<String>,
) -> Result<u32, ConvertError> {
    let Some(id) = tokens.iter().position(|t| t == QWEN3_EOS_TEXT) else {
        return Err(ConvertError::Tokenizer {
            path: path.to_owned(),
            reason: format!(
                "no {QWEN3_EOS_TEXT} token: the Qwen3 embedding models end every input with it \
                 and pool the state there (bitnet.cpp's converter forces EOS to id \
                 {QWEN3_EOS_ID}, {QWEN3_EOS_TEXT})"
            ),
        });
    };
    let id = id as u32;
    if id != QWEN3_EOS_ID {
        warnings.push(format!(
            "{QWEN3_EOS_TEXT} has id {id}: it is written as EOS (bitnet.cpp's converter writes \
             the id {QWEN3_EOS_ID}, the token's id in the Qwen3 vocabulary)"
        ));
    }
    Ok(id)
}
