//! The constraint that makes a reply a valid call: the format's call syntax around a JSON
//! object whose `name` is one of the allowed tools and whose arguments follow that tool's
//! parameters schema. Free text (`auto` in a format with its own call syntax) is not
//! constrained: the reply is parsed afterwards.

use serde_json::{Value, json};

use super::{Tool, ToolChoice, ToolError, ToolFormat};
use crate::constrain::{ConstraintSpec, prepare_json_schema};
use crate::tokenizer::Tokenizer;

/// The constraint for a reply offering `tools` under `choice`, in `format`; `parallel`
/// (OpenAI's `parallel_tool_calls`) allows more than one call. `tok` decides how the
/// format's markers are matched: a marker that is a control token of the vocabulary
/// (`<tool_call>` in Hermes 2 Pro, `[TOOL_CALLS]` in Mistral's) must be produced as that
/// token, any other as text.
///
/// - `none`, or `auto` without tools: no constraint;
/// - `auto` in the Llama 3.1, Hermes and Mistral formats: no constraint (text or a call, told
///   apart by [`super::parse_tool_calls`]);
/// - `required` or a named tool: a Lark grammar for one call (or one or more with
///   `parallel`) in the format's syntax;
/// - the generic format, any choice but `none`: a JSON schema for
///   `{"tool_calls": [...]}` (or, under `auto`, `{"response": "..."}` instead).
///
/// A schema keyword the engine cannot enforce comes out when the spec is compiled
/// ([`crate::constrain::Constraint::compile`]), naming the keyword.
pub fn tool_call_constraint(
    format: ToolFormat,
    tools: &[Tool],
    choice: &ToolChoice,
    parallel: bool,
    tok: Option<&Tokenizer>,
) -> Result<Option<ConstraintSpec>, ToolError> {
    choice.check(tools)?;
    let allowed: Vec<&Tool> = match choice {
        ToolChoice::None => return Ok(None),
        ToolChoice::Auto if tools.is_empty() => return Ok(None),
        ToolChoice::Auto | ToolChoice::Required => tools.iter().collect(),
        ToolChoice::Named(n) => tools.iter().filter(|t| &t.name == n).take(1).collect(),
    };
    let auto = *choice == ToolChoice::Auto;
    if format == ToolFormat::Generic {
        return Ok(Some(ConstraintSpec::JsonSchema(generic_schema(
            &allowed, auto, parallel,
        ))));
    }
    if auto {
        return Ok(None);
    }
    let key = format.arguments_key();
    let lark = match format {
        ToolFormat::Hermes => {
            let open = marker("<tool_call>", tok);
            let close = marker("</tool_call>", tok);
            format!(
                "start: {}\ncall: {open} \"\\n\" body \"\\n\" {close}\nbody: %json {}\n",
                repeated("call", "\"\\n\"", parallel),
                json_for_lark(any_call(&allowed, key)),
            )
        }
        ToolFormat::Llama31 => format!(
            "start: {}\nbody: %json {}\n",
            repeated("body", "\"\\n\"", parallel),
            json_for_lark(any_call(&allowed, key)),
        ),
        ToolFormat::Mistral => {
            let mut list = json!({
                "type": "array",
                "items": any_call(&allowed, key),
                "minItems": 1,
            });
            list["maxItems"] = json!(if parallel { MAX_PARALLEL_CALLS } else { 1 });
            format!(
                "start: {} body\nbody: %json {}\n",
                marker("[TOOL_CALLS]", tok),
                json_for_lark(list),
            )
        }
        ToolFormat::Generic => unreachable!("returned above"),
    };
    Ok(Some(ConstraintSpec::Lark(lark)))
}

/// Calls in one answer at most: a weak model may never stop listing calls, and an answer
/// must end. Eight covers what parallel calls are used for (a few cities, a few files).
pub const MAX_PARALLEL_CALLS: usize = 8;

/// `item`, or with `parallel` one to [`MAX_PARALLEL_CALLS`] `item`s separated by `sep`.
fn repeated(item: &str, sep: &str, parallel: bool) -> String {
    if parallel {
        format!("{item} ({sep} {item}){{0,{}}}", MAX_PARALLEL_CALLS - 1)
    } else {
        item.to_owned()
    }
}

/// How a Lark grammar asks for `text`: as the control token when the vocabulary has one by
/// that text (llguidance matches `<name>` by a control token's text, `<[id]>` by its id,
/// which serves texts such as `[TOOL_CALLS]` that are not written in angle brackets), else
/// as a string.
fn marker(text: &str, tok: Option<&Tokenizer>) -> String {
    let control = tok.and_then(|t| t.token_id(text).filter(|&id| t.is_control(id)));
    match control {
        Some(_)
            if text.starts_with('<')
                && !text.starts_with("<[")
                && text.ends_with('>')
                && !text[1..text.len() - 1].contains(['<', '>'])
                && !text.contains(char::is_whitespace) =>
        {
            text.to_owned()
        }
        Some(id) => format!("<[{id}]>"),
        None => Value::String(text.to_owned()).to_string(),
    }
}

/// The call object of one tool: its name as a constant, its arguments under `key`.
fn call_schema(t: &Tool, key: &str) -> Value {
    let mut props = serde_json::Map::new();
    props.insert("name".into(), json!({ "const": t.name }));
    props.insert(key.into(), t.parameters.clone());
    json!({
        "type": "object",
        "properties": props,
        "required": ["name", key],
        "additionalProperties": false,
    })
}

/// A call of any of `tools`.
fn any_call(tools: &[&Tool], key: &str) -> Value {
    match tools {
        [one] => call_schema(one, key),
        many => json!({ "anyOf": many.iter().map(|t| call_schema(t, key)).collect::<Vec<_>>() }),
    }
}

/// llama.cpp's generic tool-call answer: `{"tool_calls": [...]}`, or under `auto`
/// `{"response": "..."}`.
fn generic_schema(tools: &[&Tool], auto: bool, parallel: bool) -> Value {
    let mut list = json!({
        "type": "array",
        "items": any_call(tools, "arguments"),
        "minItems": 1,
    });
    list["maxItems"] = json!(if parallel { MAX_PARALLEL_CALLS } else { 1 });
    let calls = json!({
        "type": "object",
        "properties": { "tool_calls": list },
        "required": ["tool_calls"],
        "additionalProperties": false,
    });
    if !auto {
        return calls;
    }
    json!({
        "anyOf": [
            calls,
            {
                "type": "object",
                "properties": { "response": { "type": "string" } },
                "required": ["response"],
                "additionalProperties": false,
            },
        ]
    })
}

/// A schema for Lark's inline `%json`, prepared as every other constraint's (one space after
/// `,` and `:`, no free whitespace, no keys a schema does not list), which `%json` does not
/// get by itself.
fn json_for_lark(schema: Value) -> String {
    prepare_json_schema(schema).to_string()
}
