//! The JSON shapes OpenAI's API gives tools, calls and message contents, and their
//! conversion to ours: what lets `Message`, `Tool` and `ToolCall` deserialize straight
//! from a request's JSON.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::{Tool, ToolCall};

#[derive(Serialize, Deserialize)]
pub(super) struct WireFunction {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
}

/// `{"type": "function", "function": {...}}`, or the bare function object.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum WireTool {
    Wrapped {
        #[serde(rename = "type", default = "function_type")]
        kind: String,
        function: WireFunction,
    },
    Bare(WireFunction),
}

fn function_type() -> String {
    "function".to_owned()
}

impl TryFrom<WireTool> for Tool {
    type Error = String;

    fn try_from(w: WireTool) -> Result<Tool, String> {
        let f = match w {
            WireTool::Wrapped { kind, function } => {
                if kind != "function" {
                    return Err(format!(
                        "a tool of type {kind:?}: only \"function\" tools are supported"
                    ));
                }
                function
            }
            WireTool::Bare(f) => f,
        };
        if f.name.is_empty() {
            return Err("a tool without a name".into());
        }
        let parameters = match f.parameters {
            None | Some(Value::Null) => Tool::default_parameters(),
            Some(p @ (Value::Object(_) | Value::Bool(_))) => p,
            Some(other) => {
                return Err(format!(
                    "the parameters of {:?} are {other}, not a JSON schema object",
                    f.name
                ));
            }
        };
        Ok(Tool {
            name: f.name,
            description: f.description,
            parameters,
            strict: f.strict.unwrap_or(false),
        })
    }
}

impl From<Tool> for WireTool {
    fn from(t: Tool) -> WireTool {
        WireTool::Wrapped {
            kind: function_type(),
            function: WireFunction {
                name: t.name,
                description: t.description,
                parameters: Some(t.parameters),
                strict: t.strict.then_some(true),
            },
        }
    }
}

#[derive(Serialize, Deserialize)]
pub(super) struct WireCallFunction {
    name: String,
    #[serde(default)]
    arguments: Value,
}

#[derive(Serialize, Deserialize)]
pub(super) struct WireCall {
    #[serde(default)]
    id: String,
    #[serde(rename = "type", default = "function_type")]
    kind: String,
    function: WireCallFunction,
}

impl TryFrom<WireCall> for ToolCall {
    type Error = String;

    fn try_from(w: WireCall) -> Result<ToolCall, String> {
        if w.kind != "function" {
            return Err(format!(
                "a tool call of type {:?}: only \"function\" calls are supported",
                w.kind
            ));
        }
        Ok(ToolCall {
            id: w.id,
            name: w.function.name,
            arguments: arguments_text(w.function.arguments),
        })
    }
}

impl From<ToolCall> for WireCall {
    fn from(c: ToolCall) -> WireCall {
        WireCall {
            id: c.id,
            kind: function_type(),
            function: WireCallFunction {
                name: c.name,
                arguments: Value::String(c.arguments),
            },
        }
    }
}

/// Arguments as JSON text: OpenAI sends a string holding JSON; some clients and models
/// give the object itself; none at all is an empty object.
pub(super) fn arguments_text(v: Value) -> String {
    match v {
        Value::Null => "{}".to_owned(),
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// A message's `content`: a string, `null` (an assistant turn that only calls tools), or
/// OpenAI's list of parts, whose text parts are joined.
pub(crate) fn content_text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s),
        Value::Array(parts) => {
            let mut out = String::new();
            for p in parts {
                match p {
                    Value::String(s) => out.push_str(&s),
                    Value::Object(o) => match o.get("text").and_then(Value::as_str) {
                        Some(t) => out.push_str(t),
                        None => {
                            return Err(serde::de::Error::custom(
                                "a content part without text (only text parts are supported)",
                            ));
                        }
                    },
                    other => {
                        return Err(serde::de::Error::custom(format!(
                            "a content part {other}, not text"
                        )));
                    }
                }
            }
            Ok(out)
        }
        other => Err(serde::de::Error::custom(format!(
            "content is {other}, not a string"
        ))),
    }
}

/// `tool_calls` that may be `null`.
pub(crate) fn tool_calls_or_null<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<ToolCall>, D::Error> {
    Ok(Option::<Vec<ToolCall>>::deserialize(d)?.unwrap_or_default())
}
