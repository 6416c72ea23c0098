//! Every tool-call grammar compiled against a vocabulary and followed to the end: at each
//! step a token the mask allows is taken (by a fixed preference, or at random from a seed)
//! until the constraint finishes; the text must parse into calls of allowed tools whose
//! arguments follow the tool's schema. Vocabularies with and without the formats' markers
//! as control tokens: a control marker must come out as that token.

use std::sync::Arc;

use serde_json::{Value, json};

use super::super::*;
use super::{add, weather};
use crate::constrain::{Constraint, ConstraintSpec, ConstraintVocab};
use crate::synth::splitmix64;
use crate::tokenizer::{Tokenizer, VocabSpec};

const MARKERS: [&str; 4] = [
    "<tool_call>",
    "</tool_call>",
    "[TOOL_CALLS]",
    "<|python_tag|>",
];

/// A small SentencePiece-style vocabulary: unk, BOS, EOS, the 256 bytes, every printable
/// character and a few words; with `controls`, the format markers as control tokens.
fn vocab(controls: bool) -> Tokenizer {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types: Vec<i64> = vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let words = [
        "\"name\"",
        "\"arguments\"",
        "\"parameters\"",
        "city",
        "unit",
        "celsius",
        "add",
    ];
    for w in (b'!'..=b'~')
        .map(|c| char::from(c).to_string())
        .chain(words.map(String::from))
    {
        tokens.push(w);
        types.push(1);
    }
    tokens.push("\u{2581}".into());
    types.push(1);
    if controls {
        for m in MARKERS {
            tokens.push(m.into());
            types.push(3);
        }
    }
    let scores = (0..tokens.len()).map(|i| -(i as f32)).collect();
    Tokenizer::from_spec(VocabSpec {
        model: "llama".into(),
        tokens,
        scores: Some(scores),
        token_types: Some(types),
        bos_id: Some(1),
        eos_id: Some(2),
        unk_id: Some(0),
        ..VocabSpec::default()
    })
    .unwrap()
}

/// How the next token is chosen among those allowed.
#[derive(Clone, Copy, Debug)]
enum Pick {
    /// End when allowed, else close a string, object or list, else the lowest id: short
    /// outputs from always the same choices.
    Closing,
    /// Half the time as `Closing`, else any allowed token, from a seed.
    Random(u64),
}

/// Follows `spec` to the end; the text (control tokens as their text) and the token ids.
fn drive(spec: &ConstraintSpec, tok: &Tokenizer, pick: Pick) -> (String, Vec<u32>) {
    let voc = Arc::new(ConstraintVocab::new(tok, tok.n_vocab()).unwrap());
    let c = Constraint::compile(spec, &voc).unwrap_or_else(|e| panic!("{e}\n{spec:?}"));
    let mut st = c.start();
    let closers: Vec<u32> = ["\"", "}", "]"]
        .iter()
        .filter_map(|t| tok.token_id(t))
        .collect();
    let mut rng = match pick {
        Pick::Random(seed) => seed,
        Pick::Closing => 0,
    };
    let (mut bytes, mut ids) = (Vec::new(), Vec::new());
    for _ in 0..4000 {
        let mask = st.compute_mask().unwrap().to_vec();
        let allowed: Vec<u32> = (0..tok.n_vocab() as u32)
            .filter(|&t| mask[t as usize / 32] >> (t % 32) & 1 == 1)
            .collect();
        let preferred = || {
            if allowed.contains(&2) {
                return 2;
            }
            closers
                .iter()
                .copied()
                .find(|t| allowed.contains(t))
                .unwrap_or(allowed[0])
        };
        let t = match pick {
            Pick::Closing => preferred(),
            Pick::Random(_) => {
                let r = splitmix64(&mut rng);
                if r.is_multiple_of(2) {
                    preferred()
                } else {
                    allowed[(r >> 8) as usize % allowed.len()]
                }
            }
        };
        if t == 2 {
            assert!(st.is_accepting());
            return (String::from_utf8(bytes).unwrap(), ids);
        }
        st.accept(t).unwrap();
        ids.push(t);
        bytes.extend_from_slice(tok.token_to_piece_special(t, true));
        if st.is_finished() {
            return (String::from_utf8(bytes).unwrap(), ids);
        }
    }
    panic!(
        "no end after 4000 tokens: {:?}",
        String::from_utf8_lossy(&bytes)
    );
}

/// The parts of JSON Schema our test tools use.
fn valid(v: &Value, schema: &Value) -> bool {
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        return e.contains(v);
    }
    match schema.get("type").and_then(Value::as_str) {
        // `-0` is an integer to JSON Schema, and reads back as the float -0.0.
        Some("integer") => return v.as_f64().is_some_and(|f| f.fract() == 0.0),
        Some("string") => {
            let max = schema
                .get("maxLength")
                .and_then(Value::as_u64)
                .unwrap_or(u64::MAX);
            return v.as_str().is_some_and(|s| s.chars().count() as u64 <= max);
        }
        Some("object") => {}
        _ => return true,
    }
    let Some(o) = v.as_object() else {
        return false;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let required = schema.get("required").and_then(Value::as_array);
    let closed = schema.get("additionalProperties") == Some(&json!(false));
    required
        .into_iter()
        .flatten()
        .all(|k| o.contains_key(k.as_str().unwrap_or("")))
        && o.iter().all(|(k, x)| match props.and_then(|p| p.get(k)) {
            Some(s) => valid(x, s),
            None => !closed,
        })
}

#[test]
fn forced_calls_parse_and_validate_in_every_format() {
    let now = Tool::new("now", Tool::default_parameters());
    let tools = [weather(), add(), now];
    let formats = [
        ToolFormat::Hermes,
        ToolFormat::Llama31,
        ToolFormat::Mistral,
        ToolFormat::Generic,
    ];
    let choices = [
        ToolChoice::Required,
        ToolChoice::Named("add".into()),
        ToolChoice::Named("get_weather".into()),
    ];
    let (mut runs, mut several) = (0, 0);
    for controls in [false, true] {
        let tok = vocab(controls);
        for format in formats {
            for choice in &choices {
                for parallel in [false, true] {
                    let spec = tool_call_constraint(format, &tools, choice, parallel, Some(&tok))
                        .unwrap()
                        .expect("a forced call is constrained");
                    let ctx = format!(
                        "{} {choice:?} parallel={parallel} controls={controls}",
                        format.name()
                    );
                    if let ConstraintSpec::Lark(src) = &spec {
                        // A control marker is asked for as the token, never as text.
                        assert_eq!(
                            src.contains("\"<tool_call>\""),
                            !controls && format == ToolFormat::Hermes,
                            "{ctx}\n{src}"
                        );
                        assert_eq!(
                            src.contains("\"[TOOL_CALLS]\""),
                            !controls && format == ToolFormat::Mistral,
                            "{ctx}\n{src}"
                        );
                    }
                    for pick in [
                        Pick::Closing,
                        Pick::Random(1),
                        Pick::Random(2),
                        Pick::Random(3),
                    ] {
                        let (text, ids) = drive(&spec, &tok, pick);
                        runs += 1;
                        let p = parse_tool_calls(format, &text);
                        let ctx = format!("{ctx} {pick:?}: {text:?} -> {p:?}");
                        assert!(!p.tool_calls.is_empty(), "{ctx}");
                        assert!(parallel || p.tool_calls.len() == 1, "{ctx}");
                        several += usize::from(p.tool_calls.len() > 1);
                        assert_eq!(p.content, "", "{ctx}");
                        for c in &p.tool_calls {
                            if let ToolChoice::Named(n) = choice {
                                assert_eq!(&c.name, n, "{ctx}");
                            }
                            let t = tools.iter().find(|t| t.name == c.name).expect(&ctx);
                            let args = c.arguments_json().expect(&ctx);
                            assert!(valid(&args, &t.parameters), "{ctx}");
                        }
                        let marker = match format {
                            ToolFormat::Hermes => Some("<tool_call>"),
                            ToolFormat::Mistral => Some("[TOOL_CALLS]"),
                            _ => None,
                        };
                        if let (true, Some(m)) = (controls, marker) {
                            let id = tok.token_id(m).unwrap();
                            assert!(ids.contains(&id), "{ctx}");
                        }
                    }
                }
            }
        }
    }
    assert_eq!(runs, 2 * 4 * 3 * 2 * 4);
    // Parallel calls were taken up at random, not only allowed.
    assert!(several > 0);
}

#[test]
fn auto_is_free_text_except_in_the_generic_format_and_none_is_never_constrained() {
    let tok = vocab(true);
    let tools = [weather(), add()];
    for format in [ToolFormat::Hermes, ToolFormat::Llama31, ToolFormat::Mistral] {
        let spec = tool_call_constraint(format, &tools, &ToolChoice::Auto, true, Some(&tok));
        assert_eq!(spec, Ok(None), "{}", format.name());
    }
    for format in [ToolFormat::Hermes, ToolFormat::Generic] {
        let spec = tool_call_constraint(format, &tools, &ToolChoice::None, false, Some(&tok));
        assert_eq!(spec, Ok(None));
        // Auto without tools is free text too.
        let spec = tool_call_constraint(format, &[], &ToolChoice::Auto, false, Some(&tok));
        assert_eq!(spec, Ok(None));
    }
    let spec = tool_call_constraint(ToolFormat::Generic, &tools, &ToolChoice::Auto, false, None)
        .unwrap()
        .unwrap();
    let (mut calls, mut responses) = (0, 0);
    for seed in 0..24 {
        let (text, _) = drive(&spec, &tok, Pick::Random(seed));
        let p = parse_tool_calls(ToolFormat::Generic, &text);
        let v: Value = serde_json::from_str(&text).unwrap();
        if p.tool_calls.is_empty() {
            responses += 1;
            assert_eq!(v["response"].as_str(), Some(p.content.as_str()), "{text}");
        } else {
            calls += 1;
            assert_eq!(p.tool_calls.len(), 1, "{text}");
        }
    }
    assert!(
        calls > 0 && responses > 0,
        "{calls} calls, {responses} responses"
    );
    // A bad choice is an error, not a guess.
    let e = tool_call_constraint(
        ToolFormat::Hermes,
        &tools,
        &ToolChoice::Named("x".into()),
        false,
        None,
    );
    assert!(matches!(e, Err(ToolError::UnknownTool { .. })), "{e:?}");
    let e = tool_call_constraint(ToolFormat::Generic, &[], &ToolChoice::Required, false, None);
    assert_eq!(e, Err(ToolError::NoTools));
}

#[test]
fn a_schema_keyword_the_engine_cannot_enforce_is_named_at_compile_time() {
    let tok = vocab(false);
    let voc = Arc::new(ConstraintVocab::new(&tok, tok.n_vocab()).unwrap());
    let odd = Tool::new(
        "odd",
        json!({"type": "object", "properties": {"n": {"not": {"type": "integer"}}}}),
    );
    let spec = tool_call_constraint(
        ToolFormat::Hermes,
        &[odd],
        &ToolChoice::Required,
        false,
        Some(&tok),
    )
    .unwrap()
    .unwrap();
    let e = Constraint::compile(&spec, &voc).unwrap_err();
    assert_eq!(
        e,
        crate::constrain::ConstraintError::UnsupportedKeyword {
            keyword: "not".into()
        }
    );
}
