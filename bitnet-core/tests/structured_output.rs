//! Structured output end to end, through the library API: every schema of
//! `tests/data/schemas/` enforced on the shipped model and on a random-weight model, greedy
//! and sampled hot, with each finished output checked by an independent validator (the
//! `jsonschema` crate, formats included); a grammar that admits everything changes nothing;
//! constrained, free and follower requests share a batch; refused specs come back as errors.
//!
//! Each (schema, model, temperature) cell runs `BITNET_STRUCTURED_N` generations (default
//! 24, for a debug build on two cores; 6 in the suite's scalar-kernel pass). The by-hand run, 1,000 per cell, in release mode:
//!
//! ```text
//! BITNET_STRUCTURED_N=1000 cargo test --release -j1 -p bitnet-core \
//!     --test structured_output -- --nocapture
//! ```
//!
//! prints a table of finished / valid / cut-by-length counts per cell.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bitnet_core::constrain::{Constraint, ConstraintError, ConstraintSpec, ConstraintVocab};
use bitnet_core::kv::SeqId;
use bitnet_core::model::{LoadOptions, Model};
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::scheduler::{Event, GenParams, GenStats, Scheduler, StopReason, SubmitOptions};
use bitnet_kernels::Isa;
use common::models::{synth_model, tiny};
use serde_json::{Value, json};

/// Every schema file, by name.
const SCHEMAS: [&str; 7] = [
    "flat",
    "nested",
    "enums",
    "arrays",
    "anyof",
    "recursive",
    "formats",
];

const TEMPERATURES: [f32; 3] = [0.0, 0.8, 1.5];

/// Far more than any schema's longest output needs (strings are bounded by `maxLength`,
/// arrays by `maxItems`) except the recursive one, whose trees can grow without bound.
const MAX_TOKENS: usize = 320;

/// Requests decoded together.
const MAX_RUNNING: usize = 16;

/// Prompt openings, varied per request so that greedy outputs differ too.
const OPENINGS: [&str; 6] = [
    "ROMEO:",
    "First Citizen:\nWe are",
    "JULIET:\nO",
    "Answer in JSON.",
    "KING RICHARD III:\nNow is the",
    "{",
];

/// `BITNET_STRUCTURED_N`, else 24; in the suite's second pass with the scalar kernels
/// (which checks the kernels, not the constraint), 6.
fn generations_per_cell() -> usize {
    let scalar_pass = std::env::var("BITNET_KERNEL").is_ok_and(|k| k == "scalar");
    std::env::var("BITNET_STRUCTURED_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if scalar_pass { 6 } else { 24 })
}

fn shipped_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/shakespeare.gguf")
}

fn load(path: &Path, isa: Option<Isa>) -> Arc<Model> {
    let opts = LoadOptions {
        isa,
        ..LoadOptions::default()
    };
    Arc::new(Model::load(path, &opts).expect("load the model"))
}

/// The shipped model (a byte-level BPE vocabulary of 1,024 tokens).
fn shipped(isa: Option<Isa>) -> Arc<Model> {
    load(&shipped_path(), isa)
}

/// A random-weight model with the built-in synthetic vocabulary (SentencePiece style, 512
/// tokens: byte tokens, printable ASCII, `▁`-words; `</s>` ends a generation).
fn random(tag: &str, isa: Option<Isa>) -> Arc<Model> {
    synth_model(tag, &tiny(2), isa).0
}

fn schema(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/schemas")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The independent check: draft 2020-12, formats asserted (they are annotations only unless
/// asked for).
fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(schema)
        .expect("the validator takes the schema")
}

fn compile(spec: &ConstraintSpec, vocab: &Arc<ConstraintVocab>) -> Constraint {
    Constraint::compile(spec, vocab).unwrap_or_else(|e| panic!("{}: {e}", spec.kind()))
}

fn prompt(model: &Model, i: usize) -> Vec<u32> {
    let text = format!("{} {}", OPENINGS[i % OPENINGS.len()], i / OPENINGS.len());
    model.tokenizer().unwrap().encode(&text, true, false)
}

/// Temperature 0 is greedy; above it, plain sampling from the whole distribution (no
/// top-k, top-p or min-p), the hardest case for a constraint: every allowed token can come.
fn sampler(temperature: f32, seed: u64) -> SamplerConfig {
    SamplerConfig {
        temperature,
        seed,
        ..SamplerConfig::greedy()
    }
}

fn params(temperature: f32, seed: u64, max_tokens: usize, c: Option<&Constraint>) -> GenParams {
    GenParams {
        max_tokens,
        sampler: sampler(temperature, seed),
        constraint: c.cloned(),
        ..GenParams::default()
    }
}

/// How a request ended: its stats and text, or the error it failed with.
type Outcome = Result<(GenStats, String), String>;

/// Steps until idle; each request's outcome.
fn run_all(s: &mut Scheduler) -> HashMap<SeqId, Outcome> {
    let mut text: HashMap<SeqId, String> = HashMap::new();
    let mut out = HashMap::new();
    let mut steps = 0;
    while !s.is_idle() {
        s.step(&mut |ev| match ev {
            Event::Text { seq, text: t } => text.entry(seq).or_default().push_str(t),
            Event::Done { seq, stats } => {
                out.insert(seq, Ok((stats, text.remove(&seq).unwrap_or_default())));
            }
            Event::Error { seq, error } => {
                out.insert(seq, Err(error.to_string()));
            }
            Event::Token { .. } | Event::Embedding { .. } => {}
        })
        .expect("a scheduler step");
        steps += 1;
        assert!(steps < 1_000_000, "the scheduler does not finish");
    }
    out
}

/// A scheduler over `model` with room for `MAX_RUNNING` requests of `MAX_TOKENS` each.
fn scheduler(model: &Arc<Model>) -> Scheduler {
    common::models::sched(model, MAX_RUNNING * (MAX_TOKENS + 32), 64, MAX_RUNNING, 1)
}

/// What one output is.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// Ended by the constraint (or an end-of-generation token) and valid.
    Valid,
    /// Cut by `max_tokens`, and not a complete valid document.
    Cut,
    /// Anything else: why, for the failure message.
    Bad(String),
}

fn judge(outcome: &Outcome, check: &jsonschema::Validator, model: &Model) -> Verdict {
    let (stats, text) = match outcome {
        Ok(o) => o,
        Err(e) => return Verdict::Bad(format!("failed: {e}")),
    };
    let decoded = model.tokenizer().unwrap().decode(&stats.tokens);
    if decoded != *text {
        return Verdict::Bad(format!(
            "streamed {text:?} but the tokens decode to {decoded:?}"
        ));
    }
    let valid =
        serde_json::from_str::<Value>(text).map(|v| check.validate(&v).map_err(|e| e.to_string()));
    match stats.stop_reason {
        StopReason::Eog => match valid {
            Ok(Ok(())) => Verdict::Valid,
            Ok(Err(e)) => Verdict::Bad(format!("{text:?} does not validate: {e}")),
            Err(e) => Verdict::Bad(format!("{text:?} does not parse: {e}")),
        },
        StopReason::MaxTokens => match valid {
            Ok(Ok(())) => Verdict::Bad(format!("{text:?} is complete yet was cut by length")),
            _ if stats.gen_tokens != MAX_TOKENS => Verdict::Bad(format!(
                "cut by length after {} tokens of {MAX_TOKENS}",
                stats.gen_tokens
            )),
            _ => Verdict::Cut,
        },
        other => Verdict::Bad(format!("stopped by {other:?}: {text:?}")),
    }
}

/// Counts of one (schema, model, temperature) cell.
#[derive(Default)]
struct Cell {
    valid: usize,
    cut: usize,
    bad: Vec<String>,
    masks: u64,
    mask_secs: f64,
    /// The deepest nesting of arrays and objects among the valid outputs.
    depth: usize,
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(xs) => 1 + xs.iter().map(depth).max().unwrap_or(0),
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// `n` generations under `schema_name` at `temperature`, all submitted at once.
fn run_cell(
    model: &Arc<Model>,
    vocab: &Arc<ConstraintVocab>,
    schema_name: &str,
    temperature: f32,
    n: usize,
) -> Cell {
    let sch = schema(schema_name);
    let check = validator(&sch);
    let c = compile(&ConstraintSpec::JsonSchema(sch), vocab);
    let mut s = scheduler(model);
    for i in 0..n {
        let seed = 0x5EED_0000 + (i as u64) * 7919 + (temperature * 1000.0) as u64;
        s.submit(
            &prompt(model, i),
            params(temperature, seed, MAX_TOKENS, Some(&c)),
        )
        .unwrap();
    }
    let mut cell = Cell::default();
    for outcome in run_all(&mut s).values() {
        if let Ok((st, _)) = outcome {
            cell.masks += st.constraint_masks;
            cell.mask_secs += st.constraint_secs;
        }
        match judge(outcome, &check, model) {
            Verdict::Valid => {
                cell.valid += 1;
                let text = &outcome.as_ref().unwrap().1;
                let v: Value = serde_json::from_str(text).unwrap();
                cell.depth = cell.depth.max(depth(&v));
            }
            Verdict::Cut => cell.cut += 1,
            Verdict::Bad(why) => cell.bad.push(why),
        }
    }
    assert_eq!(
        cell.valid + cell.cut + cell.bad.len(),
        n,
        "every request reports its end"
    );
    cell
}

/// Every schema at every temperature on `model`; prints the table, then fails on any output
/// that ended but does not validate, and on too many cut by length.
fn schemas_hold(label: &str, model: &Arc<Model>) {
    // Rows of the two models' tests interleave in the output: each row names its model.
    let short = label.split_whitespace().next().unwrap_or(label);
    let n = generations_per_cell();
    let vocab = model.constraint_vocab().expect("a constraint vocabulary");
    let t0 = std::time::Instant::now();
    let mut bad = Vec::new();
    let (mut total, mut finished) = (0, 0);
    eprintln!("{label}: {n} generations per cell, max_tokens {MAX_TOKENS}");
    eprintln!(
        "{:<8} {:<10} {:>5} {:>8} {:>8} {:>8} {:>8} {:>6} {:>9}",
        "model", "schema", "temp", "finished", "valid", "cut", "bad", "depth", "us/mask"
    );
    for name in SCHEMAS {
        for t in TEMPERATURES {
            let cell = run_cell(model, &vocab, name, t, n);
            let us = cell.mask_secs * 1e6 / cell.masks.max(1) as f64;
            eprintln!(
                "{short:<8} {name:<10} {t:>5.1} {:>8} {:>8} {:>8} {:>8} {:>6} {us:>9.1}",
                cell.valid + cell.bad.len(),
                cell.valid,
                cell.cut,
                cell.bad.len(),
                cell.depth
            );
            total += n;
            finished += n - cell.cut;
            bad.extend(cell.bad.into_iter().map(|b| format!("{name} at {t}: {b}")));
        }
    }
    eprintln!(
        "{label}: {finished} of {total} finished in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(
        bad.is_empty(),
        "{} bad outputs, the first ones:\n{}",
        bad.len(),
        bad[..bad.len().min(10)].join("\n")
    );
    // max_tokens is far above what the bounded parts of the schemas need; what runs out of
    // tokens is a recursive tree grown deep, or an unbounded number (`"type": "number"`,
    // `"integer"` without bounds) whose digits a random model repeats greedily. Seen: 1%
    // cut on the shipped model, 9% on the random one.
    assert!(
        finished * 100 >= total * 85,
        "only {finished} of {total} outputs finished within {MAX_TOKENS} tokens"
    );
}

#[test]
fn every_schema_validates_on_the_shipped_model() {
    schemas_hold("shipped model", &shipped(None));
}

#[test]
fn every_schema_validates_on_a_random_weight_model() {
    schemas_hold("random-weight model", &random("so-random", None));
}

/// Runs each `(prompt, params)` alone on a fresh scheduler; their outcomes in order.
fn solo(model: &Arc<Model>, requests: &[(Vec<u32>, GenParams)]) -> Vec<Outcome> {
    requests
        .iter()
        .map(|(p, gp)| {
            let mut s = scheduler(model);
            let id = s.submit(p, gp.clone()).unwrap();
            run_all(&mut s).remove(&id).unwrap()
        })
        .collect()
}

fn tokens(outcome: &Outcome) -> &[u32] {
    &outcome.as_ref().expect("the request succeeds").0.tokens
}

/// How many of `toks` (from the start) spell a prefix of valid UTF-8: past that, no text
/// grammar admits them.
fn text_prefix(model: &Model, toks: &[u32]) -> usize {
    let tk = model.tokenizer().unwrap();
    let mut bytes = Vec::new();
    for (k, &t) in toks.iter().enumerate() {
        bytes.extend_from_slice(tk.token_to_piece(t));
        if let Err(e) = std::str::from_utf8(&bytes)
            && e.error_len().is_some()
        {
            return k;
        }
    }
    toks.len()
}

/// Greedy under `spec` (which admits every text) against greedy without a constraint, for
/// several prompts: the same tokens as long as the free output is text (UTF-8); where it
/// stops being text, the constraint must refuse its token. `all_text`: every free output
/// is expected to be text, so the whole outputs and their stop reasons are compared.
fn admits_everything_changes_nothing(model: &Arc<Model>, spec: &ConstraintSpec, all_text: bool) {
    let vocab = model.constraint_vocab().unwrap();
    let c = compile(spec, &vocab);
    for i in 0..6 {
        let p = prompt(model, i);
        let runs = solo(
            model,
            &[
                (p.clone(), params(0.0, 1, 64, None)),
                (p, params(0.0, 1, 64, Some(&c))),
            ],
        );
        let (free, held) = (tokens(&runs[0]), tokens(&runs[1]));
        assert!(!free.is_empty(), "prompt {i}: nothing generated");
        let k = text_prefix(model, free);
        assert!(
            k == free.len() || !all_text,
            "prompt {i}: {free:?} is not text"
        );
        assert_eq!(
            free[..k],
            held[..k.min(held.len())],
            "prompt {i}: the {} changed greedy output",
            spec.kind()
        );
        if k < free.len() {
            assert_ne!(
                held.get(k),
                Some(&free[k]),
                "prompt {i}: not text, yet allowed"
            );
            continue;
        }
        assert_eq!(
            free,
            held,
            "prompt {i}: the {} changed greedy output",
            spec.kind()
        );
        let (a, b) = (&runs[0].as_ref().unwrap().0, &runs[1].as_ref().unwrap().0);
        assert_eq!(a.stop_reason, b.stop_reason, "prompt {i}");
        assert!(b.constraint_masks > 0, "prompt {i}: no mask was computed");
    }
}

#[test]
fn greedy_under_a_grammar_that_admits_everything_is_greedy_without_one() {
    let m = shipped(Some(Isa::Scalar));
    admits_everything_changes_nothing(&m, &ConstraintSpec::Regex("(?s:.*)".into()), true);
    let lark = ConstraintSpec::Lark("start: /(?s:.*)/".into());
    admits_everything_changes_nothing(&m, &lark, true);
    // A random model spells byte sequences that are not UTF-8 (its vocabulary has a token
    // for each byte): compared as far as its output is text.
    let r = random("so-admit", Some(Isa::Scalar));
    admits_everything_changes_nothing(&r, &ConstraintSpec::Regex("(?s:.*)".into()), false);
}

/// Constrained, free and follower requests in one batch: the free ones generate what they
/// generate alone, every constrained one (followers included) validates.
fn mixed_batch(model: &Arc<Model>) {
    // A schema whose outputs are bounded (every string, array and integer is), so that
    // every constrained request must finish.
    let sch = schema("arrays");
    let check = validator(&sch);
    let vocab = model.constraint_vocab().unwrap();
    let c = compile(&ConstraintSpec::JsonSchema(sch), &vocab);
    let free: Vec<(Vec<u32>, GenParams)> = (0..4)
        .map(|i| (prompt(model, i), params(0.0, 0, 48, None)))
        .collect();
    let alone = solo(model, &free);

    let mut s = scheduler(model);
    let mut free_ids = Vec::new();
    let mut held_ids = Vec::new();
    for (i, (p, gp)) in free.iter().enumerate() {
        // Interleaved with constrained ones, greedy and sampled.
        free_ids.push(s.submit(p, gp.clone()).unwrap());
        let t = if i % 2 == 0 { 0.0 } else { 1.5 };
        held_ids.push(
            s.submit(
                &prompt(model, 10 + i),
                params(t, 40 + i as u64, MAX_TOKENS, Some(&c)),
            )
            .unwrap(),
        );
    }
    // OpenAI's `n`: a leader and followers that fork its prompt, each with its own seed and
    // its own constraint state.
    let p = prompt(model, 3);
    let leader = s
        .submit(&p, params(1.5, 100, MAX_TOKENS, Some(&c)))
        .unwrap();
    let mut followers = Vec::new();
    for k in 0..5u64 {
        let extra = SubmitOptions {
            after: Some(leader),
            ..SubmitOptions::default()
        };
        followers.push(
            s.submit_with(&p, params(1.5, 101 + k, MAX_TOKENS, Some(&c)), extra)
                .unwrap(),
        );
    }
    let mut out = run_all(&mut s);
    for (i, id) in free_ids.iter().enumerate() {
        let got = out.remove(id).unwrap();
        assert_eq!(
            tokens(&got),
            tokens(&alone[i]),
            "free request {i}: other tokens in the batch"
        );
    }
    let mut texts = Vec::new();
    for id in held_ids.iter().chain([&leader]).chain(&followers) {
        let got = out.remove(id).unwrap();
        assert_eq!(judge(&got, &check, model), Verdict::Valid, "request {id}");
        if followers.contains(id) {
            texts.push(got.unwrap().1);
        }
    }
    texts.sort();
    texts.dedup();
    assert!(
        texts.len() > 1,
        "followers with other seeds all wrote {texts:?}"
    );
}

#[test]
fn constrained_free_and_follower_requests_share_a_batch() {
    mixed_batch(&shipped(Some(Isa::Scalar)));
    mixed_batch(&random("so-mixed", Some(Isa::Scalar)));
}

#[test]
fn refused_specs_are_errors_that_name_the_cause() {
    let m = random("so-refused", None);
    let vocab = m.constraint_vocab().unwrap();
    let err = |spec: ConstraintSpec| match Constraint::compile(&spec, &vocab) {
        Ok(_) => panic!("{spec:?} compiled"),
        Err(e) => e,
    };
    // Keywords llguidance cannot enforce token by token, at the top and deep inside.
    for (keyword, sch) in [
        ("uniqueItems", json!({"type": "array", "uniqueItems": true})),
        ("not", json!({"not": {"type": "string"}})),
        (
            "contains",
            json!({"type": "array", "contains": {"const": 1}}),
        ),
        (
            "dependentRequired",
            json!({"type": "object", "properties": {"a": {"type": "integer"}},
                   "dependentRequired": {"a": ["b"]}}),
        ),
        (
            "uniqueItems",
            json!({"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": true}}}),
        ),
    ] {
        assert_eq!(
            err(ConstraintSpec::JsonSchema(sch.clone())),
            ConstraintError::UnsupportedKeyword {
                keyword: keyword.into()
            },
            "{sch}"
        );
    }
    // Specs that are not what they claim to be.
    for spec in [
        ConstraintSpec::Regex("(unclosed".into()),
        ConstraintSpec::Regex("a{3,1}".into()),
        ConstraintSpec::Lark("start: /[a-/".into()),
        ConstraintSpec::Lark("start: missing_rule".into()),
        ConstraintSpec::Gbnf("root ::= (".into()),
        ConstraintSpec::JsonSchema(json!(42)),
        ConstraintSpec::JsonSchema(json!({"$ref": "#/$defs/nowhere"})),
        ConstraintSpec::JsonSchema(json!({"type": "string", "format": "no-such-format"})),
        ConstraintSpec::JsonSchema(json!({"type": "strung"})),
    ] {
        match err(spec.clone()) {
            ConstraintError::Invalid { kind, detail } => {
                assert_eq!(kind, spec.kind(), "{spec:?}");
                assert!(!detail.is_empty(), "{spec:?}: no detail");
            }
            other => panic!("{spec:?}: {other:?}"),
        }
    }
}

/// A schema no value satisfies: refused when compiled, or, if it compiles, the request fails
/// with an error instead of producing something invalid or panicking.
#[test]
fn an_unsatisfiable_schema_never_yields_an_output() {
    let m = random("so-unsat", None);
    let vocab = m.constraint_vocab().unwrap();
    for sch in [
        json!({"type": "string", "minLength": 5, "maxLength": 2}),
        json!({"type": "integer", "minimum": 5, "maximum": 2}),
        json!({"allOf": [{"type": "string"}, {"type": "integer"}]}),
        json!(false),
    ] {
        let c = match Constraint::compile(&ConstraintSpec::JsonSchema(sch.clone()), &vocab) {
            Err(e) => {
                eprintln!("{sch}: refused: {e}");
                continue;
            }
            Ok(c) => c,
        };
        let mut s = scheduler(&m);
        let id = s
            .submit(&prompt(&m, 0), params(0.8, 7, 32, Some(&c)))
            .unwrap();
        match run_all(&mut s).remove(&id).unwrap() {
            Err(e) => eprintln!("{sch}: failed while generating: {e}"),
            Ok((st, text)) => panic!("{sch}: produced {text:?} ({:?})", st.stop_reason),
        }
    }
}

/// An output that cannot close within `max_tokens` (the nested schema's required keys take
/// more than 6 tokens) ends for that reason (OpenAI's `length`), with an unfinished document.
#[test]
fn max_tokens_cuts_an_output_with_reason_length() {
    let m = shipped(None);
    let vocab = m.constraint_vocab().unwrap();
    let c = compile(&ConstraintSpec::JsonSchema(schema("nested")), &vocab);
    let mut s = scheduler(&m);
    for i in 0..8 {
        s.submit(&prompt(&m, i), params(0.8, i as u64, 6, Some(&c)))
            .unwrap();
    }
    let out = run_all(&mut s);
    assert_eq!(out.len(), 8);
    for outcome in out.values() {
        let (st, text) = outcome.as_ref().expect("the request succeeds");
        assert_eq!(st.stop_reason, StopReason::MaxTokens, "{text:?}");
        assert_eq!(st.gen_tokens, 6, "{text:?}");
        assert!(text.starts_with('{'), "{text:?}");
        assert!(
            serde_json::from_str::<Value>(text).is_err(),
            "{text:?} parses"
        );
    }
}

/// Outputs whose grammar lets them grow past the budget (free strings, unbounded arrays, a
/// list of items) close inside it: near the end of `max_tokens` a token that would leave no
/// way to close gives way to one that closes (`constrain::closing`). Every one of these ends
/// complete and valid, at temperature 1.5 over the whole distribution; without the closing
/// rule most of them are cut by length (counted in the record of the change).
#[test]
fn constrained_outputs_close_inside_their_budget() {
    let m = shipped(None);
    let vocab = m.constraint_vocab().unwrap();
    let person = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "lines": {"type": "array", "items": {"type": "string"}},
            "act": {"type": "integer", "minimum": 1, "maximum": 5}
        },
        "required": ["name", "lines", "act"]
    });
    let check = validator(&person);
    let c = compile(&ConstraintSpec::JsonSchema(person), &vocab);
    // A list of calls, as a tool-call grammar repeats them: items until the model stops.
    let calls = compile(
        &ConstraintSpec::Gbnf(
            r#"root ::= call ("\n" call)*
call ::= "{\"city\": \"" [a-z ]+ "\"}"
"#
            .into(),
        ),
        &vocab,
    );
    // The shortest valid document, `{"name": "", "lines": [], "act": 1}`, is 29 tokens of
    // this model's vocabulary, the shortest list of calls 11.
    let mut s = scheduler(&m);
    let mut asked = HashMap::new();
    for i in 0..24 {
        let schema = i % 2 == 0;
        let budget = if schema {
            [36, 48, 64][i / 2 % 3]
        } else {
            [16, 24, 32][i / 2 % 3]
        };
        let seq = s
            .submit(
                &prompt(&m, i),
                params(
                    1.5,
                    0xC105E + i as u64,
                    budget,
                    Some(if schema { &c } else { &calls }),
                ),
            )
            .unwrap();
        asked.insert(seq, (schema, budget));
    }
    let out = run_all(&mut s);
    assert_eq!(out.len(), 24);
    for (seq, outcome) in &out {
        let (schema, budget) = asked[seq];
        let (st, text) = outcome.as_ref().expect("the request succeeds");
        assert_eq!(st.stop_reason, StopReason::Eog, "cut at {budget}: {text:?}");
        assert!(
            st.gen_tokens <= budget,
            "{} tokens of {budget}",
            st.gen_tokens
        );
        if schema {
            let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert!(check.validate(&v).is_ok(), "{text:?}");
        } else {
            for line in text.split('\n') {
                let v: Value =
                    serde_json::from_str(line).unwrap_or_else(|e| panic!("{text:?}: {e}"));
                assert!(v["city"].is_string(), "{text:?}");
            }
        }
    }
}
