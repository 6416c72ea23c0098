//! Special-token ids and the add-BOS / add-EOS flags as gguf-py's `SpecialVocab` reads them,
//! the class through which bitnet.cpp's embedding converter writes them:
//! 1. `tokenizer_config.json`'s `{bos,eos,unk,sep,pad,cls,mask}_token` texts (a string or an
//!    `AddedToken` object), each matched against `tokenizer.json`'s `added_tokens` only (a
//!    text that is no added token gives no id); a missing BOS falls back to the CLS text,
//!    a missing EOS to the SEP text;
//! 2. then, for the kinds still unset, `config.json`'s `{kind}_token_id` when it is an
//!    integer (a list of ids is ignored, as `SpecialVocab` ignores it);
//! 3. `add_bos_token` / `add_eos_token` from `tokenizer_config.json` when they are booleans;
//!    otherwise from a `TemplateProcessing` post-processor whose single-sequence template
//!    starts with the BOS (or CLS) text / ends with the EOS text (the crude parse gguf-py
//!    does); otherwise not written.
//!
//! An id outside the vocabulary is dropped with a warning: gguf-py writes it, and the
//! runtime (like llama.cpp) would refuse the file.

use serde_json::Value;

/// Whether a token is written like a special one (gguf-py's `_does_token_look_special`).
pub(super) fn looks_special(t: &str) -> bool {
    (t.starts_with('<') || t.starts_with('[')) && (t.ends_with('>') || t.ends_with(']'))
}

/// The special-token kinds, in `SpecialVocab`'s order, with the GGUF key of each id
/// (gguf-py spells the separator `seperator`).
pub(super) const KINDS: [(&str, &str); 7] = [
    ("bos", "tokenizer.ggml.bos_token_id"),
    ("eos", "tokenizer.ggml.eos_token_id"),
    ("unk", "tokenizer.ggml.unknown_token_id"),
    ("sep", "tokenizer.ggml.seperator_token_id"),
    ("pad", "tokenizer.ggml.padding_token_id"),
    ("cls", "tokenizer.ggml.cls_token_id"),
    ("mask", "tokenizer.ggml.mask_token_id"),
];

/// What `SpecialVocab` would write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Specials {
    /// `(kind, id)` for each kind found, in [`KINDS`] order.
    pub ids: Vec<(&'static str, u32)>,
    /// `tokenizer.ggml.add_bos_token`, if anything says.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`, if anything says.
    pub add_eos: Option<bool>,
}

impl Specials {
    /// The id of `kind`.
    pub fn id(&self, kind: &str) -> Option<u32> {
        self.ids.iter().find(|(k, _)| *k == kind).map(|&(_, id)| id)
    }
}

/// A token given as a string or as an `AddedToken` object (`{"content": ...}`).
fn text_of(v: Option<&Value>) -> Option<&str> {
    match v? {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("content")?.as_str(),
        _ => None,
    }
}

/// Reads the special tokens from `tokenizer.json` (`tj`), `tokenizer_config.json` (`tc`)
/// and `config.json` (`config`), for a vocabulary of `n_vocab` ids.
pub(super) fn read(
    tj: &Value,
    tc: Option<&Value>,
    config: Option<&Value>,
    n_vocab: usize,
    warnings: &mut Vec<String>,
) -> Specials {
    let mut out = Specials::default();
    let added: &[Value] = tj
        .get("added_tokens")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    // gguf-py treats an empty tokenizer_config.json as none.
    let tc = tc.filter(|t| t.as_object().is_some_and(|o| !o.is_empty()));
    let text = |kind: &str| tc.and_then(|t| text_of(t.get(format!("{kind}_token"))));
    let cls = text("cls");
    let bos = text("bos").filter(|s| !s.is_empty()).or(cls);
    let eos = text("eos").filter(|s| !s.is_empty()).or(text("sep"));

    let (first, last) = template_ends(tj.get("post_processor"));
    if let Some(first) = first {
        out.add_bos = Some(match tc {
            None => true,
            Some(_) => Some(first) == bos || Some(first) == cls,
        });
    }
    if let Some(last) = last {
        out.add_eos = Some(tc.is_none() || Some(last) == eos);
    }
    let mut set = |out: &mut Specials, kind: &'static str, id: Option<i64>, from: &str| {
        let Some(id) = id else { return };
        if out.id(kind).is_some() {
            return;
        }
        match u32::try_from(id).ok().filter(|&i| (i as usize) < n_vocab) {
            Some(i) => out.ids.push((kind, i)),
            None => warnings.push(format!(
                "{from}: {kind} id {id} is outside the vocabulary of {n_vocab}; not written"
            )),
        }
    };
    if let Some(t) = tc {
        for (kind, _) in KINDS {
            let flag = t.get(format!("add_{kind}_token")).and_then(Value::as_bool);
            match (kind, flag) {
                ("bos", Some(f)) => out.add_bos = Some(f),
                ("eos", Some(f)) => out.add_eos = Some(f),
                _ => {}
            }
            let wanted = match kind {
                "bos" => bos,
                "eos" => eos,
                _ => text(kind),
            };
            let Some(wanted) = wanted else { continue };
            // The first added token with that text.
            let id = added
                .iter()
                .find(|a| a.get("content").and_then(Value::as_str) == Some(wanted))
                .and_then(|a| a.get("id"))
                .and_then(Value::as_i64);
            set(&mut out, kind, id, "tokenizer_config.json");
        }
    }
    if let Some(c) = config {
        for (kind, _) in KINDS {
            let id = match c.get(format!("{kind}_token_id")) {
                Some(Value::Number(n)) => n.as_i64(),
                _ => None,
            };
            set(&mut out, kind, id, "config.json");
        }
    }
    out.ids
        .sort_by_key(|(k, _)| KINDS.iter().position(|(kk, _)| kk == k));
    out
}

/// The special-token texts at the start and the end of a `TemplateProcessing`
/// post-processor's single-sequence template with more than one item.
fn template_ends(pp: Option<&Value>) -> (Option<&str>, Option<&str>) {
    let Some(pp) = pp.filter(|p| p.is_object()) else {
        return (None, None);
    };
    let list: Vec<&Value> = match pp.get("processors").and_then(Value::as_array) {
        Some(l) => l.iter().collect(),
        None => vec![pp],
    };
    let (mut first, mut last) = (None, None);
    for p in list {
        if p.get("type").and_then(Value::as_str) != Some("TemplateProcessing") {
            continue;
        }
        let Some(single) = p.get("single").and_then(Value::as_array) else {
            continue;
        };
        if single.len() < 2 {
            continue;
        }
        first = special_token_id(&single[0]).or(first);
        last = special_token_id(&single[single.len() - 1]).or(last);
    }
    (first, last)
}

/// The text of a template item `{"SpecialToken": {"id": TEXT}}`.
fn special_token_id(item: &Value) -> Option<&str> {
    item.get("SpecialToken")?.get("id")?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn texts_are_matched_against_added_tokens_then_config_ids() {
        let tj = json!({"added_tokens": [
            {"id": 0, "content": "<pad>"}, {"id": 1, "content": "<eos>"},
            {"id": 2, "content": "<bos>"}]});
        let tc = json!({"bos_token": "<bos>", "eos_token": {"content": "<eos>"},
            "pad_token": "<pad>", "unk_token": "<unk>", "add_bos_token": true,
            "add_eos_token": false});
        // <unk> is no added token: its id comes from config.json, a list id is ignored.
        let config = json!({"unk_token_id": 3, "eos_token_id": [1, 106], "mask_token_id": 900});
        let mut w = Vec::new();
        let s = read(&tj, Some(&tc), Some(&config), 512, &mut w);
        assert_eq!(
            s.ids,
            [("bos", 2), ("eos", 1), ("unk", 3), ("pad", 0)],
            "{w:?}"
        );
        assert_eq!((s.add_bos, s.add_eos), (Some(true), Some(false)));
        assert_eq!(w.len(), 1, "the out-of-range mask id is said: {w:?}");
    }

    #[test]
    fn a_template_sets_the_flags_the_config_does_not() {
        let tj = json!({"added_tokens": [{"id": 2, "content": "<bos>"}],
            "post_processor": {"type": "TemplateProcessing", "single": [
                {"SpecialToken": {"id": "<bos>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}}]}});
        let tc = json!({"bos_token": "<bos>"});
        let s = read(&tj, Some(&tc), None, 8, &mut Vec::new());
        assert_eq!((s.add_bos, s.add_eos), (Some(true), None));
        assert_eq!(s.ids, [("bos", 2)]);
    }
}
