//! The constraint engine on the shipped model's vocabulary: compile errors, masks that hold,
//! outputs that end, forks that go their own way, and the schema preparation.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::model::{LoadOptions, Model};
use crate::sampling::{Sampler, SamplerConfig};

fn model() -> Model {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/shakespeare.gguf");
    Model::load(path, &LoadOptions::default()).expect("the shipped model loads")
}

fn vocab(m: &Model) -> Arc<ConstraintVocab> {
    m.constraint_vocab()
        .expect("the shipped model has a tokenizer and an EOS")
}

/// Drives `state` to its end, picking each time the allowed token chosen by `pick` among
/// the allowed ids; returns the text.
fn drive(
    m: &Model,
    state: &mut ConstraintState,
    mut pick: impl FnMut(&[u32]) -> u32,
    max: usize,
) -> String {
    let tok = m.tokenizer().unwrap();
    let mut ids = Vec::new();
    for _ in 0..max {
        let mask = state.compute_mask().expect("a mask");
        let allowed: Vec<u32> = (0..m.n_vocab() as u32)
            .filter(|&t| mask[t as usize / 32] & (1 << (t % 32)) != 0)
            .collect();
        assert!(!allowed.is_empty());
        let t = pick(&allowed);
        assert!(state.allows(t));
        if tok.is_eog(t) {
            break;
        }
        state.accept(t).expect("an allowed token is accepted");
        ids.push(t);
        if state.is_finished() {
            break;
        }
    }
    tok.decode(&ids)
}

/// A step of a 64-bit linear congruential generator; the high bits as a pick.
fn next_random(seed: &mut u64) -> usize {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (*seed >> 33) as usize
}

#[test]
fn a_regex_constraint_yields_only_matching_text() {
    let m = model();
    let c = Constraint::compile(
        &ConstraintSpec::Regex("(yes|no|maybe), [0-9]{2}".into()),
        &vocab(&m),
    )
    .unwrap();
    let re = fancy_regex::Regex::new("^(yes|no|maybe), [0-9]{2}$").unwrap();
    let mut seed = 7u64;
    for round in 0..20 {
        let mut state = c.start();
        let text = drive(
            &m,
            &mut state,
            |allowed| {
                let r = next_random(&mut seed);
                if round == 0 {
                    allowed[0]
                } else {
                    allowed[r % allowed.len()]
                }
            },
            64,
        );
        assert!(re.is_match(&text).unwrap(), "{text:?}");
    }
}

#[test]
fn end_of_generation_is_allowed_only_when_the_output_may_end() {
    let m = model();
    let tok = m.tokenizer().unwrap();
    let eos = tok.eos_id().unwrap();
    let c = Constraint::compile(&ConstraintSpec::Regex("a+".into()), &vocab(&m)).unwrap();
    let mut s = c.start();
    s.compute_mask().unwrap();
    assert!(!s.allows(eos), "nothing matched yet");
    let a = tok.encode("a", false, false);
    assert_eq!(a.len(), 1);
    s.accept(a[0]).unwrap();
    s.compute_mask().unwrap();
    assert!(s.allows(eos), "\"a\" is a whole match");
    assert!(s.allows(a[0]), "and may go on");
    assert!(s.is_accepting());
}

#[test]
fn a_fork_goes_its_own_way() {
    let m = model();
    let tok = m.tokenizer().unwrap();
    let c = Constraint::compile(&ConstraintSpec::Regex("(ab|ac)d".into()), &vocab(&m)).unwrap();
    let ids = |s: &str| tok.encode(s, false, false);
    let mut s = c.start();
    s.compute_mask().unwrap();
    s.accept(ids("a")[0]).unwrap();
    let mut f = s.fork();
    s.compute_mask().unwrap();
    f.compute_mask().unwrap();
    s.accept(ids("b")[0]).unwrap();
    f.accept(ids("c")[0]).unwrap();
    s.compute_mask().unwrap();
    f.compute_mask().unwrap();
    assert!(s.allows(ids("d")[0]) && f.allows(ids("d")[0]));
    // The fork is at "ac", the original at "ab": neither may take the other's letter.
    assert!(!s.allows(ids("c")[0]));
    assert!(!f.allows(ids("b")[0]));
}

#[test]
fn a_token_outside_the_mask_is_refused() {
    let m = model();
    let tok = m.tokenizer().unwrap();
    let c = Constraint::compile(&ConstraintSpec::Regex("[0-9]+".into()), &vocab(&m)).unwrap();
    let mut s = c.start();
    s.compute_mask().unwrap();
    let x = tok.encode("x", false, false)[0];
    assert!(!s.allows(x));
    assert!(matches!(s.accept(x), Err(ConstraintError::Failed { .. })));
}

#[test]
fn json_mode_gives_json_that_parses_and_completes() {
    let m = model();
    let c = Constraint::compile(&ConstraintSpec::Json, &vocab(&m)).unwrap();
    let mut s = c.start();
    // The end when allowed, else a token that closes something, else the lowest id: a
    // short, odd, but valid value.
    let tok = m.tokenizer().unwrap();
    let closing = |t: u32| {
        let p = tok.token_to_piece(t);
        !p.is_empty() && p.iter().all(|b| b"\"}]0123456789".contains(b))
    };
    let text = drive(
        &m,
        &mut s,
        |a| {
            a.iter()
                .copied()
                .find(|&t| tok.is_eog(t))
                .or_else(|| a.iter().copied().find(|&t| closing(t)))
                .unwrap_or(a[0])
        },
        200,
    );
    assert!(s.is_finished() || s.is_accepting(), "{text:?}");
    serde_json::from_str::<serde_json::Value>(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
}

#[test]
fn refusals_name_what_is_wrong() {
    let m = model();
    let v = vocab(&m);
    let e = Constraint::compile(
        &ConstraintSpec::JsonSchema(json!({"type": "object", "not": {"type": "string"}})),
        &v,
    )
    .unwrap_err();
    assert_eq!(
        e,
        ConstraintError::UnsupportedKeyword {
            keyword: "not".into()
        }
    );
    assert!(e.to_string().contains("\"not\""), "{e}");
    let e = Constraint::compile(&ConstraintSpec::JsonSchema(json!([1, 2])), &v).unwrap_err();
    assert!(matches!(e, ConstraintError::Invalid { .. }), "{e}");
    let e = Constraint::compile(&ConstraintSpec::Regex("(unclosed".into()), &v).unwrap_err();
    assert!(
        matches!(
            e,
            ConstraintError::Invalid {
                kind: "regular expression",
                ..
            }
        ),
        "{e}"
    );
    let e =
        Constraint::compile(&ConstraintSpec::Lark("start: undefined_rule".into()), &v).unwrap_err();
    assert!(matches!(e, ConstraintError::Invalid { .. }), "{e}");
    let e = Constraint::compile(&ConstraintSpec::Gbnf("root ::= missing".into()), &v).unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
}

#[test]
fn object_schemas_are_closed_unless_they_say_otherwise() {
    let s = prepare_json_schema(json!({
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"b": {"type": "integer"}}},
            "open": {"type": "object", "properties": {}, "additionalProperties": true},
            "data": {"const": {"properties": {"x": 1}}}
        },
        "$defs": {"n": {"properties": {"c": {}}}}
    }));
    assert_eq!(s["additionalProperties"], json!(false));
    assert_eq!(s["properties"]["a"]["additionalProperties"], json!(false));
    assert_eq!(s["properties"]["open"]["additionalProperties"], json!(true));
    assert_eq!(s["$defs"]["n"]["additionalProperties"], json!(false));
    // Data is data: a const value is never rewritten.
    assert_eq!(
        s["properties"]["data"]["const"],
        json!({"properties": {"x": 1}})
    );
    assert_eq!(s["x-guidance"]["key_separator"], json!(": "));
    let n = prepare_json_schema(json!({"type": "integer", "minimum": 0}));
    assert_eq!(n["minimum"], json!(0));
    assert_eq!(n["maximum"], json!(NUMBER_BOUND));
    // A caller's own layout wins.
    let own = prepare_json_schema(json!({"x-guidance": {"whitespace_flexible": true}}));
    assert_eq!(own["x-guidance"], json!({"whitespace_flexible": true}));
}

#[test]
fn unbounded_numbers_parse_whatever_the_picks() {
    let m = model();
    let tok = m.tokenizer().unwrap();
    let schema = json!({"type": "object", "properties": {
        "x": {"type": "number"}, "n": {"type": "integer"}, "y": {"type": ["number", "null"]}},
        "required": ["x", "n", "y"]});
    let c = Constraint::compile(&ConstraintSpec::JsonSchema(schema), &vocab(&m)).unwrap();
    let mut seed = 3u64;
    let mut ended = 0;
    for round in 0..40 {
        let mut s = c.start();
        // Random picks, leaning towards digits and exponents: what a random model does.
        let text = drive(
            &m,
            &mut s,
            |a| {
                let r = next_random(&mut seed);
                let digits: Vec<u32> = a
                    .iter()
                    .copied()
                    .filter(|&t| {
                        let p = tok.token_to_piece(t);
                        !p.is_empty() && p.iter().all(|b| b"0123456789eE+".contains(b))
                    })
                    .collect();
                let pool = if round % 2 == 0 && !digits.is_empty() && !r.is_multiple_of(8) {
                    &digits
                } else {
                    a
                };
                pool[(r >> 3) % pool.len()]
            },
            400,
        );
        if s.is_finished() {
            ended += 1;
            let v: serde_json::Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            for k in ["x", "n"] {
                let x = v[k].as_f64().unwrap_or_else(|| panic!("{text}"));
                assert!(x.abs() < 1e16, "{text}");
            }
        }
    }
    assert!(ended >= 20, "only {ended} of 40 outputs ended");
}

#[test]
fn the_masked_sampler_picks_only_allowed_tokens() {
    let n: usize = 100;
    let logits: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut mask = vec![0u32; n.div_ceil(32)];
    for t in [3usize, 40, 77] {
        mask[t / 32] |= 1 << (t % 32);
    }
    let mut greedy = Sampler::new(SamplerConfig::greedy(), n).unwrap();
    assert_eq!(greedy.sample_masked(&logits, &[], &mask), 77);
    let mut hot = Sampler::new(
        SamplerConfig {
            temperature: 5.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..SamplerConfig::default()
        },
        n,
    )
    .unwrap();
    for _ in 0..200 {
        let t = hot.sample_masked(&logits, &[], &mask);
        assert!([3, 40, 77].contains(&t), "{t}");
    }
    // Every allowed logit impossible: the lowest allowed token, never a banned one.
    let mut broken = logits.clone();
    for t in [3usize, 40, 77] {
        broken[t] = f32::NEG_INFINITY;
    }
    assert_eq!(greedy.sample_masked(&broken, &[], &mask), 3);
}
