//! Structured output in a request: OpenAI's `response_format` (`text`, `json_object`,
//! `json_schema`) and llama.cpp's `json_schema` and `grammar` fields, read into a
//! constraint compiled for the model. Every fault is a 400 naming the field, a schema
//! keyword that cannot be enforced included.

use std::sync::Arc;

use bitnet_core::constrain::{Constraint, ConstraintError, ConstraintSpec, ConstraintVocab};
use serde_json::{Map, Value, json};

use super::error::{ApiError, ApiResult};

/// What a request asks its output to be, and the field that asked.
#[derive(Debug, Clone)]
pub struct OutputSpec {
    pub spec: ConstraintSpec,
    pub param: &'static str,
}

/// Reads `response_format`, `json_schema` and `grammar`; at most one may constrain.
pub fn output_spec(obj: &Map<String, Value>) -> ApiResult<Option<OutputSpec>> {
    let mut found: Vec<OutputSpec> = Vec::new();
    if let Some(spec) = response_format(obj)? {
        found.push(OutputSpec {
            spec,
            param: "response_format",
        });
    }
    if let Some(v) = obj.get("json_schema").filter(|v| !v.is_null()) {
        if !v.is_object() && !v.is_boolean() {
            return Err(ApiError::bad_field("json_schema", "a JSON schema object"));
        }
        found.push(OutputSpec {
            spec: ConstraintSpec::JsonSchema(v.clone()),
            param: "json_schema",
        });
    }
    if let Some(v) = obj.get("grammar").filter(|v| !v.is_null()) {
        let text = v
            .as_str()
            .ok_or_else(|| ApiError::bad_field("grammar", "a GBNF grammar as a string"))?;
        if !text.trim().is_empty() {
            found.push(OutputSpec {
                spec: ConstraintSpec::grammar(text),
                param: "grammar",
            });
        }
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(ApiError::invalid(
            format!(
                "give one of {}: each constrains the whole output",
                found
                    .iter()
                    .map(|f| format!("'{}'", f.param))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
            Some(found[1].param),
        )),
    }
}

/// OpenAI's `response_format`: `{"type": "text"}`, `{"type": "json_object"}` (llama.cpp
/// also takes a `schema` beside it), `{"type": "json_schema", "json_schema": {"name",
/// "schema", "strict"}}`.
fn response_format(obj: &Map<String, Value>) -> ApiResult<Option<ConstraintSpec>> {
    let Some(rf) = obj.get("response_format").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let rf = rf
        .as_object()
        .ok_or_else(|| ApiError::bad_field("response_format", "an object with a 'type'"))?;
    let kind = rf.get("type").and_then(Value::as_str).ok_or_else(|| {
        ApiError::bad_field(
            "response_format.type",
            "one of \"text\", \"json_object\", \"json_schema\"",
        )
    })?;
    match kind {
        "text" => Ok(None),
        "json_object" => match rf.get("schema").filter(|v| !v.is_null()) {
            Some(s) if s.is_object() => Ok(Some(ConstraintSpec::JsonSchema(s.clone()))),
            Some(_) => Err(ApiError::bad_field(
                "response_format.schema",
                "a JSON schema object",
            )),
            None => Ok(Some(ConstraintSpec::JsonSchema(json!({"type": "object"})))),
        },
        "json_schema" => {
            let js = rf
                .get("json_schema")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    ApiError::bad_field(
                        "response_format.json_schema",
                        "an object with 'name' and 'schema'",
                    )
                })?;
            if let Some(name) = js.get("name").filter(|v| !v.is_null())
                && !name.is_string()
            {
                return Err(ApiError::bad_field(
                    "response_format.json_schema.name",
                    "a string",
                ));
            }
            if let Some(strict) = js.get("strict").filter(|v| !v.is_null())
                && !strict.is_boolean()
            {
                return Err(ApiError::bad_field(
                    "response_format.json_schema.strict",
                    "true or false",
                ));
            }
            // Strict or not, the schema is enforced: a weak model needs it more.
            match js.get("schema").filter(|v| !v.is_null()) {
                Some(s) if s.is_object() || s.is_boolean() => {
                    Ok(Some(ConstraintSpec::JsonSchema(s.clone())))
                }
                Some(_) => Err(ApiError::bad_field(
                    "response_format.json_schema.schema",
                    "a JSON schema object",
                )),
                // OpenAI requires a schema; llama.cpp takes its absence as any JSON.
                None => Ok(Some(ConstraintSpec::JsonSchema(json!({"type": "object"})))),
            }
        }
        other => Err(ApiError::invalid(
            format!(
                "'response_format.type' {other:?} is not supported: give \"text\", \"json_object\" or \"json_schema\""
            ),
            Some("response_format.type"),
        )),
    }
}

/// Compiles `out` for the model's vocabulary; a refusal is a 400 on the field that asked.
pub fn compile(out: &OutputSpec, vocab: &Arc<ConstraintVocab>) -> ApiResult<Constraint> {
    Constraint::compile(&out.spec, vocab).map_err(|e| constraint_error(&e, out.param))
}

/// A constraint the server cannot build: the request's fault unless the model lacks what
/// structured output needs.
pub fn constraint_error(e: &ConstraintError, param: &str) -> ApiError {
    let mut err = ApiError::invalid(e.to_string(), Some(param));
    err.code = Some(match e {
        ConstraintError::UnsupportedKeyword { .. } => "unsupported_schema_keyword",
        _ => "invalid_value",
    });
    err
}
