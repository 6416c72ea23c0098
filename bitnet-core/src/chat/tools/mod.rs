//! Tool calls in OpenAI's shape: the tools a request offers ([`Tool`]), which of them the
//! model must call ([`ToolChoice`]), the calls in an answer ([`ToolCall`]), and the syntax a
//! model family writes them in ([`ToolFormat`], told by its chat template).
//!
//! - rendering: [`super::ChatTemplate::render_with_tools`] gives a tools-aware template the
//!   tools and the calls in OpenAI's shape; a template that knows nothing of tools gets
//!   llama.cpp's generic fallback instead (a system message listing the tools and asking
//!   for a JSON answer, past calls and tool results written as text) ([`render`]);
//! - enforcing: [`tool_call_constraint`] builds the grammar that makes a `required` or named
//!   call parse whatever the model's weights say ([`grammar`]);
//! - reading: [`parse_tool_calls`] splits a reply into its text and its calls ([`parse`]).

mod grammar;
mod parse;
pub(super) mod render;
mod request;
mod wire;

#[cfg(test)]
mod tests;

use serde_json::Value;
use thiserror::Error;

pub use grammar::tool_call_constraint;
pub use parse::{ParsedReply, parse_tool_calls};
pub use request::{MAX_TOOLS, ToolRequest, ToolRequestError};
pub(super) use wire::{content_text as wire_content, tool_calls_or_null as wire_tool_calls};

/// A function the model may call (OpenAI's `{"type": "function", "function": {...}}`;
/// deserializes from that or from the bare function object).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "wire::WireTool", into = "wire::WireTool")]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// A JSON Schema for the arguments object (`{"type": "object"}` when the request gave
    /// none).
    pub parameters: Value,
    /// OpenAI's `strict`: kept for the record; a constrained call always follows the schema.
    pub strict: bool,
}

impl Tool {
    /// A tool with a parameters schema and no description.
    pub fn new(name: impl Into<String>, parameters: Value) -> Tool {
        Tool {
            name: name.into(),
            description: None,
            parameters,
            strict: false,
        }
    }

    /// The schema of an arguments object when the request gives none.
    pub fn default_parameters() -> Value {
        serde_json::json!({"type": "object"})
    }

    /// OpenAI's wire shape: `{"type": "function", "function": {"name", "description",
    /// "parameters"}}` (what tools-aware templates iterate over).
    pub fn to_openai(&self) -> Value {
        let mut f = serde_json::Map::new();
        f.insert("name".into(), Value::String(self.name.clone()));
        if let Some(d) = &self.description {
            f.insert("description".into(), Value::String(d.clone()));
        }
        f.insert("parameters".into(), self.parameters.clone());
        if self.strict {
            f.insert("strict".into(), Value::Bool(true));
        }
        serde_json::json!({"type": "function", "function": f})
    }
}

/// One call in an answer or in the history. Serializes as OpenAI's
/// `{"id", "type": "function", "function": {"name", "arguments"}}`, and reads that back with
/// `arguments` either a JSON text (OpenAI) or an object (some clients).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "wire::WireCall", into = "wire::WireCall")]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments object as JSON text (compact when we produced it).
    pub arguments: String,
}

impl ToolCall {
    /// `arguments` parsed, when it is JSON.
    pub fn arguments_json(&self) -> Option<Value> {
        serde_json::from_str(&self.arguments).ok()
    }
}

/// Which tools the model may or must call (OpenAI's `tool_choice`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// Text or calls, as the model decides.
    #[default]
    Auto,
    /// Text only, even when tools are offered.
    None,
    /// At least one call, of any offered tool.
    Required,
    /// A call of this tool.
    Named(String),
}

impl ToolChoice {
    /// Reads OpenAI's `tool_choice`: `"auto"`, `"none"`, `"required"` (or `"any"`, Mistral's
    /// word for it), or `{"type": "function", "function": {"name": ...}}`; `null` is `auto`.
    pub fn from_openai(v: &Value) -> Result<ToolChoice, ToolError> {
        match v {
            Value::Null => Ok(ToolChoice::Auto),
            Value::String(s) => match s.as_str() {
                "auto" => Ok(ToolChoice::Auto),
                "none" => Ok(ToolChoice::None),
                "required" | "any" => Ok(ToolChoice::Required),
                other => Err(ToolError::BadChoice(format!(
                    "{other:?} is not one of \"auto\", \"none\", \"required\""
                ))),
            },
            Value::Object(o) => {
                let name = o
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .or_else(|| o.get("name"))
                    .and_then(Value::as_str);
                match name {
                    Some(n) if !n.is_empty() => Ok(ToolChoice::Named(n.to_owned())),
                    _ => Err(ToolError::BadChoice(
                        "an object tool_choice names a function: {\"type\": \"function\", \"function\": {\"name\": ...}}".into(),
                    )),
                }
            }
            other => Err(ToolError::BadChoice(format!(
                "a string or an object, not {other}"
            ))),
        }
    }

    /// Checks the choice against the offered tools: `required` needs one, a named tool must
    /// be among them.
    pub fn check(&self, tools: &[Tool]) -> Result<(), ToolError> {
        match self {
            ToolChoice::Auto | ToolChoice::None => Ok(()),
            ToolChoice::Required if tools.is_empty() => Err(ToolError::NoTools),
            ToolChoice::Required => Ok(()),
            ToolChoice::Named(n) => {
                if tools.iter().any(|t| &t.name == n) {
                    Ok(())
                } else {
                    Err(ToolError::UnknownTool {
                        name: n.clone(),
                        offered: tools.iter().map(|t| t.name.clone()).collect(),
                    })
                }
            }
        }
    }
}

/// Why tools or a tool choice cannot be used.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum ToolError {
    /// `tool_choice` names a function that `tools` does not offer.
    #[error("tool_choice names the function {name:?}, which is not among the tools ({})", offered.join(", "))]
    UnknownTool { name: String, offered: Vec<String> },
    /// `tool_choice` is `required` or named, and no tools were given.
    #[error("tool_choice asks for a tool call, but the request offers no tools")]
    NoTools,
    /// A `tool_choice` value we cannot read.
    #[error("tool_choice is {0}")]
    BadChoice(String),
    /// A tool definition we cannot read.
    #[error("invalid tool: {0}")]
    BadTool(String),
}

/// The syntax a model family writes its calls in, which decides the grammar, the parser
/// and how past calls are rendered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ToolFormat {
    /// Llama 3.1+: a bare JSON object `{"name": ..., "parameters": {...}}`.
    Llama31,
    /// Hermes 2 Pro, Qwen 2.5 and others: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`.
    Hermes,
    /// Mistral Nemo / Small: `[TOOL_CALLS][{"name": ..., "arguments": {...}}]`.
    Mistral,
    /// llama.cpp's fallback for any other template: the whole answer is one JSON object,
    /// `{"tool_calls": [{"name", "arguments"}]}` or `{"response": "..."}`.
    Generic,
}

/// A chat template as [`ToolFormat::detect`] reads it: its source text. A trait rather
/// than the template type so that tools need not import the template, which renders with
/// them.
pub trait TemplateSource {
    fn template_source(&self) -> &str;
}

impl ToolFormat {
    /// The format `template` is written for, told by the markers in its source.
    pub fn detect(template: &impl TemplateSource) -> ToolFormat {
        Self::detect_source(template.template_source())
    }

    /// [`ToolFormat::detect`] on a template's source text.
    pub fn detect_source(src: &str) -> ToolFormat {
        if src.contains("[TOOL_CALLS]") {
            ToolFormat::Mistral
        } else if src.contains("<tool_call>") {
            ToolFormat::Hermes
        } else if src.contains("<|python_tag|>")
            || src.contains("ipython")
            || (src.contains("<|start_header_id|>") && src.contains("tools"))
        {
            ToolFormat::Llama31
        } else {
            ToolFormat::Generic
        }
    }

    /// A short name for logs and messages.
    pub fn name(&self) -> &'static str {
        match self {
            ToolFormat::Llama31 => "llama3.1",
            ToolFormat::Hermes => "hermes",
            ToolFormat::Mistral => "mistral",
            ToolFormat::Generic => "generic",
        }
    }

    /// The key a call object holds its arguments under.
    pub(crate) fn arguments_key(&self) -> &'static str {
        match self {
            ToolFormat::Llama31 => "parameters",
            _ => "arguments",
        }
    }

    /// The calls as this format writes them in an answer (how past calls are shown to a
    /// template that cannot render `tool_calls`, and the canonical text the parser reads).
    pub fn render_calls(&self, calls: &[ToolCall]) -> String {
        let key = self.arguments_key();
        let objects: Vec<Value> = calls
            .iter()
            .map(|c| {
                let args = c
                    .arguments_json()
                    .unwrap_or_else(|| Value::String(c.arguments.clone()));
                let mut o = serde_json::Map::new();
                o.insert("name".into(), Value::String(c.name.clone()));
                o.insert(key.into(), args);
                Value::Object(o)
            })
            .collect();
        match self {
            ToolFormat::Hermes => objects
                .iter()
                .map(|o| format!("<tool_call>\n{}\n</tool_call>", spaced_json(o)))
                .collect::<Vec<_>>()
                .join("\n"),
            ToolFormat::Llama31 => objects
                .iter()
                .map(spaced_json)
                .collect::<Vec<_>>()
                .join("\n"),
            ToolFormat::Mistral => format!("[TOOL_CALLS]{}", spaced_json(&Value::Array(objects))),
            ToolFormat::Generic => spaced_json(&serde_json::json!({ "tool_calls": objects })),
        }
    }
}

/// JSON with `", "` and `": "` between items, as the constraint's JSON is laid out and as
/// Python's `json.dumps` writes (what models were trained on).
pub(crate) fn spaced_json(v: &Value) -> String {
    let mut out = String::new();
    write_spaced(v, &mut out);
    out
}

fn write_spaced(v: &Value, out: &mut String) {
    match v {
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_spaced(x, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, x)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push_str(": ");
                write_spaced(x, out);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Fresh call ids: `call_` and 24 letters and digits (Mistral's templates insist on 9
/// letters and digits, so its calls get those), distinct within a process.
pub(crate) fn new_call_id(format: ToolFormat) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    const MASK: u64 = (1 << 53) - 1; // 62^9 > 2^53: nine characters hold it
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let salt = u64::from(std::process::id()).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // An odd multiplier and an offset permute the 53-bit numbers: distinct counters give
    // distinct ids, which still look random.
    let mut x = (n.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ salt) & MASK;
    let mut id = String::with_capacity(29);
    if format != ToolFormat::Mistral {
        id.push_str("call_");
    }
    for _ in 0..9 {
        id.push(ALPHABET[(x % 62) as usize] as char);
        x /= 62;
    }
    if format != ToolFormat::Mistral {
        let mut state = n ^ salt;
        let mut word = 0u64;
        for i in 0..15 {
            if i % 8 == 0 {
                word = crate::synth::splitmix64(&mut state);
            }
            id.push(ALPHABET[(word % 62) as usize] as char);
            word /= 62;
        }
    }
    id
}
