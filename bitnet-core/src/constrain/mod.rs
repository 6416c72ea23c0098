//! Structured output: a constraint that masks the logits at every step so that only tokens
//! continuing a valid output can be sampled (JSON, a JSON Schema, a regular expression, a
//! GBNF or Lark grammar).
//!
//! The masks come from llguidance (the engine llama.cpp, vLLM and SGLang use): an Earley
//! parser over a derivative-based lexer, walking the vocabulary's byte trie once per step,
//! which costs tens of microseconds on a 128k vocabulary, far under a decode step.
//! llguidance has no GBNF reader, so GBNF (llama.cpp's grammar format) is translated to its
//! Lark dialect here ([`gbnf_to_lark`]).
//!
//! - [`ConstraintSpec`]: what a request asks for;
//! - [`ConstraintVocab`]: a model's vocabulary as llguidance sees it (built once per model);
//! - [`Constraint`]: a spec compiled against a vocabulary, shared by every request using it;
//! - [`ConstraintState`]: one sequence's position in it (forked with the sequence).
//!
//! A request carries its constraint in [`crate::GenParams::constraint`]; the scheduler masks
//! every sample and ends the request when the output is complete:
//!
//! ```
//! use std::sync::Arc;
//!
//! use bitnet_core::constrain::{Constraint, ConstraintSpec};
//! use bitnet_core::{Engine, EngineOptions, GenParams, LoadOptions, Model, Scheduler, generate};
//!
//! # fn main() -> Result<(), bitnet_core::CoreError> {
//! # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/shakespeare.gguf");
//! let model = Arc::new(Model::load(path, &LoadOptions::default())?);
//! let schema = serde_json::json!({
//!     "type": "object",
//!     "properties": {"who": {"type": "string", "maxLength": 12}, "act": {"enum": [1, 2, 3]}},
//!     "required": ["who", "act"]
//! });
//! let constraint = Constraint::compile(&ConstraintSpec::JsonSchema(schema), &model.constraint_vocab()?)?;
//! let prompt = model.tokenizer().unwrap().encode("ROMEO:", true, false);
//! let mut sched = Scheduler::new(Engine::new(model, &EngineOptions::default())?, Default::default());
//! let params = GenParams { max_tokens: 100, constraint: Some(constraint), ..GenParams::default() };
//! let mut text = String::new();
//! generate(&mut sched, &prompt, params, |piece| {
//!     text.push_str(piece);
//!     true
//! })?;
//! let answer: serde_json::Value = serde_json::from_str(&text).expect("the schema holds");
//! assert!([1, 2, 3].contains(&answer["act"].as_i64().unwrap()));
//! # Ok(())
//! # }
//! ```

mod closing;
mod error;
mod gbnf;
mod state;
mod vocab;

use std::sync::{Arc, Mutex};

use llguidance::Matcher;
use llguidance::api::TopLevelGrammar;

pub use closing::CLOSE_WINDOW;
pub use error::ConstraintError;
use error::first_lines;
pub use gbnf::{GbnfError, gbnf_to_lark};
pub use state::ConstraintState;
pub use vocab::ConstraintVocab;

/// What a generation must produce.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstraintSpec {
    /// Any JSON value (OpenAI's `json_object` asks for an object: use a schema
    /// `{"type": "object"}` for that).
    Json,
    /// A value valid under a JSON Schema.
    JsonSchema(serde_json::Value),
    /// Text matching a regular expression (whole).
    Regex(String),
    /// A grammar in llama.cpp's GBNF (the `root` rule).
    Gbnf(String),
    /// A grammar in llguidance's Lark dialect (the `start` rule).
    Lark(String),
}

impl ConstraintSpec {
    /// A grammar as llama.cpp takes one (`--grammar`, the server's `grammar`): GBNF, or
    /// llguidance's Lark when the text starts with `%llguidance`.
    pub fn grammar(text: impl Into<String>) -> ConstraintSpec {
        let text = text.into();
        if text.trim_start().starts_with("%llguidance") {
            ConstraintSpec::Lark(text)
        } else {
            ConstraintSpec::Gbnf(text)
        }
    }

    /// A short name for messages and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            ConstraintSpec::Json => "JSON",
            ConstraintSpec::JsonSchema(_) => "JSON schema",
            ConstraintSpec::Regex(_) => "regular expression",
            ConstraintSpec::Gbnf(_) => "GBNF grammar",
            ConstraintSpec::Lark(_) => "Lark grammar",
        }
    }
}

/// A compiled constraint: cheap to clone and share between requests; each sequence that
/// follows it gets its own [`ConstraintState`] from [`Constraint::start`].
#[derive(Clone)]
pub struct Constraint {
    kind: &'static str,
    /// The matcher at the start of an output; cloned for each sequence. llguidance's
    /// matcher is `Send` but not `Sync`, hence the lock (taken only to clone).
    initial: Arc<Mutex<Matcher>>,
    vocab: Arc<ConstraintVocab>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// Characters between JSON items and between a key and its value: one space after each, as
/// Python's `json.dumps` and most models' training data write them. Fixed rather than free
/// whitespace, so that a weak model cannot spend its tokens on blanks.
const JSON_ITEM_SEPARATOR: &str = ", ";
const JSON_KEY_SEPARATOR: &str = ": ";

impl Constraint {
    /// Compiles `spec` for `vocab`; a spec llguidance refuses comes back as
    /// [`ConstraintError::Invalid`], a schema keyword it cannot enforce as
    /// [`ConstraintError::UnsupportedKeyword`].
    pub fn compile(
        spec: &ConstraintSpec,
        vocab: &Arc<ConstraintVocab>,
    ) -> Result<Constraint, ConstraintError> {
        let kind = spec.kind();
        let invalid = |detail: String| ConstraintError::Invalid { kind, detail };
        let grammar = match spec {
            ConstraintSpec::Json => {
                TopLevelGrammar::from_json_schema(prepare_json_schema(serde_json::json!({})))
            }
            ConstraintSpec::JsonSchema(schema) => {
                if !schema.is_object() && !schema.is_boolean() {
                    return Err(invalid(format!(
                        "a JSON schema is an object (or true/false), not {}",
                        json_type_name(schema)
                    )));
                }
                TopLevelGrammar::from_json_schema(prepare_json_schema(schema.clone()))
            }
            ConstraintSpec::Regex(rx) => TopLevelGrammar::from_regex(rx),
            ConstraintSpec::Gbnf(src) => {
                let lark = gbnf_to_lark(src).map_err(|e| invalid(e.to_string()))?;
                TopLevelGrammar::from_lark(lark)
            }
            ConstraintSpec::Lark(src) => TopLevelGrammar::from_lark(src.clone()),
        };
        let parser = vocab.factory().create_parser(grammar).map_err(|e| {
            let msg = e.to_string();
            match unimplemented_keyword(&msg) {
                Some(keyword) => ConstraintError::UnsupportedKeyword { keyword },
                None => invalid(first_lines(&msg)),
            }
        })?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(invalid(first_lines(&e)));
        }
        Ok(Constraint {
            kind,
            initial: Arc::new(Mutex::new(matcher)),
            vocab: vocab.clone(),
        })
    }

    /// What kind of spec this was compiled from.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// A fresh state: the start of an output.
    pub fn start(&self) -> ConstraintState {
        let matcher = self
            .initial
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .deep_clone();
        ConstraintState::new(self.kind, matcher, self.vocab.clone())
    }
}

/// A JSON schema as generation follows it (also for Lark's inline `%json`):
/// - an object schema that lists `properties` and says nothing of `additionalProperties`
///   admits no other keys, as in llama.cpp's schema converter and OpenAI's strict mode (the
///   output still validates against the schema as given; without this, a weak model
///   invents keys without end);
/// - a number or integer without bounds gets 16 digits at most ([`NUMBER_BOUND`]);
/// - our JSON layout options (llguidance reads them from `x-guidance`), unless the caller
///   set their own; `oneOf` is enforced as `anyOf`, as llama.cpp does.
pub fn prepare_json_schema(mut schema: serde_json::Value) -> serde_json::Value {
    if schema == serde_json::Value::Bool(true) {
        schema = serde_json::json!({});
    }
    close_objects(&mut schema, 0);
    if let Some(obj) = schema.as_object_mut()
        && !obj.contains_key("x-guidance")
    {
        obj.insert(
            "x-guidance".into(),
            serde_json::json!({
                "whitespace_flexible": false,
                "item_separator": JSON_ITEM_SEPARATOR,
                "key_separator": JSON_KEY_SEPARATOR,
                // As llama.cpp's converter: branches that exclude each other (a tagged
                // union, what pydantic writes) are enforced exactly; overlapping ones could
                // let an output match two.
                "coerce_one_of": true,
            }),
        );
    }
    schema
}

/// See [`prepare_json_schema`]. Values that are data, not schemas (`const`, `enum`,
/// `default`, `examples`), are left alone; depth is bounded (a schema is untrusted input).
fn close_objects(v: &mut serde_json::Value, depth: usize) {
    const MAX_DEPTH: usize = 256;
    if depth > MAX_DEPTH {
        return;
    }
    match v {
        serde_json::Value::Object(o) => {
            let open = [
                "additionalProperties",
                "unevaluatedProperties",
                "patternProperties",
            ];
            if o.get("properties").is_some_and(|p| p.is_object())
                && !open.iter().any(|k| o.contains_key(*k))
            {
                o.insert(
                    "additionalProperties".into(),
                    serde_json::Value::Bool(false),
                );
            }
            bound_numbers(o);
            for (k, child) in o.iter_mut() {
                if !matches!(k.as_str(), "const" | "enum" | "default" | "examples") {
                    close_objects(child, depth + 1);
                }
            }
        }
        serde_json::Value::Array(a) => {
            for child in a {
                close_objects(child, depth + 1);
            }
        }
        _ => {}
    }
}

/// The largest magnitude of a number or integer a schema leaves unbounded: 16 digits before
/// the point, as llama.cpp's converter allows. llguidance's unbounded number admits any
/// count of digits and any exponent: a weak model then writes `6E+6728` (which no JSON
/// reader takes as a number) or `3333...` until `max_tokens`.
const NUMBER_BOUND: i64 = 9_999_999_999_999_999;

/// Bounds the numbers of a schema that says `"type": "number"` or `"integer"` (alone or in a
/// list) without a bound on a side (see [`NUMBER_BOUND`]).
fn bound_numbers(o: &mut serde_json::Map<String, serde_json::Value>) {
    let numeric = |t: &serde_json::Value| matches!(t.as_str(), Some("number" | "integer"));
    let is_numeric = match o.get("type") {
        Some(serde_json::Value::Array(types)) => types.iter().any(numeric),
        Some(t) => numeric(t),
        None => false,
    };
    if !is_numeric {
        return;
    }
    if !o.contains_key("minimum") && !o.contains_key("exclusiveMinimum") {
        o.insert("minimum".into(), serde_json::json!(-NUMBER_BOUND));
    }
    if !o.contains_key("maximum") && !o.contains_key("exclusiveMaximum") {
        o.insert("maximum".into(), serde_json::json!(NUMBER_BOUND));
    }
}

fn json_type_name(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// The first keyword of llguidance's "Unimplemented keys: [\"a\", \"b\"]" message.
fn unimplemented_keyword(msg: &str) -> Option<String> {
    let rest = &msg[msg.find("Unimplemented keys: [")? + "Unimplemented keys: [".len()..];
    let first = rest.split([',', ']']).next()?.trim().trim_matches('"');
    (!first.is_empty()).then(|| first.to_owned())
}

#[cfg(test)]
mod tests;
