//! The checkpoint's tokenizer as GGUF `tokenizer.ggml.*` metadata: a SentencePiece
//! `tokenizer.model` (preferred when present, as llama.cpp's converter does: the 1bitLLM
//! models ship both) or a byte-level BPE `tokenizer.json`, plus the special tokens,
//! `add_bos` / `add_eos` and the chat template from `tokenizer_config.json`.
//!
//! The result is a [`VocabSpec`], the runtime's own description of a vocabulary, so the
//! converter can build the runtime tokenizer from it and refuse anything it would not load.
//! The BitNet embedding models' tokenizers follow bitnet.cpp's embedding converter instead
//! ([`embedding`]).

mod bpe_json;
pub mod embedding;
mod gemma_json;
mod special_vocab;
pub mod spm;

use std::path::{Path, PathBuf};

use bitnet_core::tokenizer::VocabSpec;
use serde_json::Value;

use crate::error::ConvertError;
use crate::hf::{self, HfConfig};
use bpe_json::{TYPE_CONTROL, TYPE_USER_DEFINED};

/// GGUF token type of an unused slot.
const TYPE_UNUSED: i64 = 5;
/// GGUF token type of the unknown token.
const TYPE_UNKNOWN: i64 = 2;

/// Largest `chat_template.jinja` we read (real templates are a few KB).
const MAX_TEMPLATE_BYTES: u64 = 16 << 20;

/// End-of-turn texts written as `tokenizer.ggml.eot_token_id` when present.
const EOT_TEXTS: &[&str] = &["<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"];

/// The pre-tokenizer names `--pre` accepts (those the runtime and llama.cpp implement
/// under these names).
pub const PRE_NAMES: &[&str] = &[
    "llama-bpe",
    "llama3",
    "falcon3",
    "gpt-2",
    "qwen2",
    "starcoder",
    "default",
    "falcon",
    "refact",
    "smollm",
];

/// A converted vocabulary and what goes with it.
#[derive(Clone, Debug)]
pub struct ConvertedVocab {
    /// The `tokenizer.ggml.*` values.
    pub spec: VocabSpec,
    /// The file the vocabulary came from.
    pub source: PathBuf,
    /// Chat templates: `(None, t)` is `tokenizer.chat_template`, `(Some(name), t)`
    /// `tokenizer.chat_template.NAME`.
    pub chat_templates: Vec<(Option<String>, String)>,
    /// Things the user should know (ignored or dropped values).
    pub warnings: Vec<String>,
    /// Every file read to build this (the output must not replace one of them).
    pub inputs: Vec<PathBuf>,
    /// Special-token ids the runtime does not read but the file carries, `(GGUF key, id)`
    /// (the separator, CLS and mask ids gguf-py writes on the embedding route).
    pub extra_ids: Vec<(&'static str, u32)>,
}

/// Reads the tokenizer of the checkpoint in `dir`, padded to `cfg.n_vocab` tokens.
pub fn convert(
    dir: &Path,
    cfg: &HfConfig,
    pre_override: Option<&str>,
) -> Result<ConvertedVocab, ConvertError> {
    let mut inputs = Vec::new();
    let tc_path = dir.join("tokenizer_config.json");
    let tc = read_json_opt(&tc_path, &mut inputs)?;
    let gc = read_json_opt(&dir.join("generation_config.json"), &mut inputs)?;
    let spm_path = dir.join("tokenizer.model");
    let json_path = dir.join("tokenizer.json");
    let mut warnings = Vec::new();

    // `is_present` rather than `is_file`: a directory or FIFO named tokenizer.model is
    // reported as such, not skipped (nor waited on).
    let (mut spec, source, trainer_ids, template) = if crate::files::is_present(&spm_path)? {
        inputs.push(spm_path.clone());
        let m = spm::read(&spm_path)?;
        let mut spec = VocabSpec {
            model: "llama".into(),
            pre: Some(pre_override.unwrap_or("default").into()),
            tokens: m.pieces.iter().map(|p| p.text.clone()).collect(),
            scores: Some(m.pieces.iter().map(|p| p.score).collect()),
            token_types: Some(m.pieces.iter().map(|p| i64::from(p.ty)).collect()),
            add_space_prefix: Some(m.add_dummy_prefix),
            ..VocabSpec::default()
        };
        add_spm_extras(
            dir,
            tc.as_ref(),
            &tc_path,
            &mut spec,
            &mut warnings,
            &mut inputs,
        )?;
        let ids = [m.bos_id, m.eos_id, m.unk_id, m.pad_id];
        (spec, spm_path, ids, (None, None))
    } else if crate::files::is_present(&json_path)? {
        inputs.push(json_path.clone());
        let v = hf::read_json(&json_path)?;
        let b = bpe_json::parse(&json_path, &v, cfg.n_vocab)?;
        warnings.extend(b.warnings.iter().cloned());
        let pre = match (pre_override, &b.pre) {
            (Some(p), _) => p.to_owned(),
            (None, Ok(p)) => (*p).to_owned(),
            (None, Err(why)) => {
                return Err(ConvertError::Tokenizer {
                    path: json_path,
                    reason: format!(
                        "{why}; name it with --pre NAME ({}) if you know which it is",
                        PRE_NAMES.join(", ")
                    ),
                });
            }
        };
        let mut types = b.types;
        let tokens: Vec<String> = b
            .tokens
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                t.unwrap_or_else(|| {
                    types[i] = TYPE_USER_DEFINED;
                    format!("[PAD{i}]")
                })
            })
            .collect();
        let spec = VocabSpec {
            model: "gpt2".into(),
            pre: Some(pre),
            tokens,
            token_types: Some(types),
            merges: Some(b.merges),
            ..VocabSpec::default()
        };
        (spec, json_path, [None; 4], (b.template_bos, b.template_eos))
    } else {
        return Err(ConvertError::Tokenizer {
            path: dir.to_owned(),
            reason: "no tokenizer.model or tokenizer.json in the checkpoint directory".into(),
        });
    };

    let n = cfg.n_vocab;
    if spec.tokens.len() > n {
        return Err(ConvertError::Tokenizer {
            path: source,
            reason: format!(
                "{} tokens, but config.json vocab_size (the embedding's rows) is {n}",
                spec.tokens.len()
            ),
        });
    }
    // Ids the embedding has but the tokenizer never produces: named and typed as llama.cpp
    // pads them, so every id has a token.
    let pad_type = if spec.model == "llama" {
        TYPE_UNUSED
    } else {
        TYPE_USER_DEFINED
    };
    for i in spec.tokens.len()..n {
        spec.tokens.push(format!("[PAD{i}]"));
        if let Some(s) = spec.scores.as_mut() {
            s.push(-1000.0);
        }
        if let Some(t) = spec.token_types.as_mut() {
            t.push(pad_type);
        }
    }

    let (bos, eos, unk, pad, eot) = {
        let tokens = &spec.tokens;
        let lookup = |text: &str| tokens.iter().position(|t| t == text).map(|i| i as u32);
        let [t_bos, t_eos, t_unk, t_pad] = trainer_ids;
        let mut resolve = |kind: &str, from_cfg: Option<u32>, fallback: Option<u32>| {
            let key = format!("{kind}_token");
            if let Some(text) = tc.as_ref().and_then(|t| token_text(t.get(&key))) {
                match lookup(&text) {
                    Some(id) => return Some(id),
                    None => warnings.push(format!(
                        "tokenizer_config.json {key} {text:?} is not in the vocabulary; ignored"
                    )),
                }
            }
            let from_gc = gc
                .as_ref()
                .and_then(|g| g.get(format!("{kind}_token_id")))
                .and_then(first_id);
            let id = from_cfg.or(from_gc).or(fallback)?;
            if (id as usize) < n {
                Some(id)
            } else {
                warnings.push(format!(
                    "{kind} id {id} is outside the vocabulary of {n}; dropped"
                ));
                None
            }
        };
        (
            resolve("bos", cfg.bos_id, t_bos),
            resolve("eos", cfg.eos_id, t_eos),
            resolve("unk", None, t_unk),
            resolve("pad", cfg.pad_id, t_pad),
            EOT_TEXTS.iter().find_map(|t| lookup(t)),
        )
    };
    spec.bos_id = bos;
    spec.eos_id = eos;
    spec.unk_id = unk;
    spec.pad_id = pad;
    spec.eot_id = eot;

    let flag = |key: &str| {
        tc.as_ref()
            .and_then(|t| t.get(key))
            .and_then(Value::as_bool)
    };
    let (tpl_bos, tpl_eos) = template;
    let is_text = |id: Option<u32>, text: &Option<String>| matches!((id, text), (Some(i), Some(t)) if spec.tokens[i as usize] == *t);
    spec.add_bos = Some(flag("add_bos_token").unwrap_or(if spec.model == "llama" {
        true
    } else {
        is_text(spec.bos_id, &tpl_bos)
    }));
    spec.add_eos = Some(flag("add_eos_token").unwrap_or(is_text(spec.eos_id, &tpl_eos)));

    let chat_templates = chat_templates(dir, tc.as_ref(), &tc_path, &mut inputs)?;
    Ok(ConvertedVocab {
        spec,
        source,
        chat_templates,
        warnings,
        inputs,
        extra_ids: Vec::new(),
    })
}

/// Reads an optional JSON file, noting it in `inputs` if it exists.
fn read_json_opt(path: &Path, inputs: &mut Vec<PathBuf>) -> Result<Option<Value>, ConvertError> {
    let v = hf::read_json_opt(path)?;
    if v.is_some() {
        inputs.push(path.to_owned());
    }
    Ok(v)
}

/// A token given as a string or as an `AddedToken` object (`{"content": ...}`).
fn token_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

/// An id, or the first of a list of ids.
fn first_id(v: &Value) -> Option<u32> {
    let x = match v {
        Value::Array(a) => a.first()?,
        x => x,
    };
    x.as_u64().and_then(|n| u32::try_from(n).ok())
}

/// Tokens a SentencePiece checkpoint adds beyond `tokenizer.model`: `added_tokens.json`
/// (`{text: id}`) and `tokenizer_config.json`'s `added_tokens_decoder`.
fn add_spm_extras(
    dir: &Path,
    tc: Option<&Value>,
    tc_path: &Path,
    spec: &mut VocabSpec,
    warnings: &mut Vec<String>,
    inputs: &mut Vec<PathBuf>,
) -> Result<(), ConvertError> {
    let mut extras: Vec<(usize, String, bool)> = Vec::new();
    let at_path = dir.join("added_tokens.json");
    if let Some(v) = read_json_opt(&at_path, inputs)? {
        let Some(o) = v.as_object() else {
            return Err(ConvertError::Tokenizer {
                path: at_path,
                reason: "not an object of token -> id".into(),
            });
        };
        for (text, id) in o {
            let id = id.as_u64().ok_or_else(|| ConvertError::Tokenizer {
                path: at_path.clone(),
                reason: format!("{text:?} has no integer id"),
            })?;
            extras.push((id as usize, text.clone(), false));
        }
    }
    if let Some(o) = tc
        .and_then(|t| t.get("added_tokens_decoder"))
        .and_then(Value::as_object)
    {
        for (id, data) in o {
            let (Ok(id), Some(text)) = (id.parse::<usize>(), token_text(Some(data))) else {
                return Err(ConvertError::Tokenizer {
                    path: tc_path.to_owned(),
                    reason: format!("added_tokens_decoder entry {id} is malformed"),
                });
            };
            let special = data
                .get("special")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            extras.push((id, text, special));
        }
    }
    let types = spec.token_types.get_or_insert_with(Vec::new);
    let scores = spec.scores.get_or_insert_with(Vec::new);
    for (id, text, special) in extras {
        if id >= 1 << 24 {
            return Err(ConvertError::Tokenizer {
                path: tc_path.to_owned(),
                reason: format!("added token {text:?} has id {id}, out of range"),
            });
        }
        if id < spec.tokens.len() {
            let ty = types[id];
            // The model's own control and unknown pieces keep their type (an
            // added_tokens_decoder entry for <s> or <unk> restates them).
            if spec.tokens[id] == text && (ty == TYPE_CONTROL || ty == TYPE_UNKNOWN) {
                continue;
            }
            if spec.tokens[id] != text && ty != TYPE_UNUSED {
                warnings.push(format!(
                    "added token {id} {text:?} replaces the piece {:?}",
                    spec.tokens[id]
                ));
            }
        }
        while spec.tokens.len() <= id {
            let i = spec.tokens.len();
            spec.tokens.push(format!("[PAD{i}]"));
            types.push(TYPE_UNUSED);
            scores.push(-1000.0);
        }
        spec.tokens[id] = text;
        types[id] = if special {
            TYPE_CONTROL
        } else {
            TYPE_USER_DEFINED
        };
        scores[id] = -1000.0;
    }
    Ok(())
}

/// `chat_template` of `tokenizer_config.json` (a string, or a list of named templates), or
/// the `chat_template.jinja` file newer checkpoints ship.
fn chat_templates(
    dir: &Path,
    tc: Option<&Value>,
    tc_path: &Path,
    inputs: &mut Vec<PathBuf>,
) -> Result<Vec<(Option<String>, String)>, ConvertError> {
    let mut out = Vec::new();
    match tc.and_then(|t| t.get("chat_template")) {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => out.push((None, s.clone())),
        Some(Value::Array(list)) => {
            for t in list {
                let name = t.get("name").and_then(Value::as_str);
                let tpl = t.get("template").and_then(Value::as_str);
                let (Some(name), Some(tpl)) = (name, tpl) else {
                    return Err(ConvertError::Tokenizer {
                        path: tc_path.to_owned(),
                        reason: "chat_template list entries need a name and a template".into(),
                    });
                };
                let name = (name != "default").then(|| name.to_owned());
                out.push((name, tpl.to_owned()));
            }
        }
        Some(_) => {
            return Err(ConvertError::Tokenizer {
                path: tc_path.to_owned(),
                reason: "chat_template is neither a string nor a list".into(),
            });
        }
    }
    let jinja = dir.join("chat_template.jinja");
    if out.is_empty() && crate::files::is_present(&jinja)? {
        inputs.push(jinja.clone());
        let bytes = crate::files::read_capped(&jinja, MAX_TEMPLATE_BYTES)?;
        let s = String::from_utf8(bytes).map_err(|_| ConvertError::Tokenizer {
            path: jinja.clone(),
            reason: "the chat template is not UTF-8 text".into(),
        })?;
        out.push((None, s));
    }
    Ok(out)
}
