//! Reading a reply: the calls it makes, in its format's syntax, and the text around them.
//! What does not parse as a call stays text: a reply is never lost, and no input panics.

use serde_json::Value;

use super::{ToolCall, ToolFormat, new_call_id, wire::arguments_text};

/// A reply split into its text and its calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedReply {
    /// The text outside the calls, trimmed (empty when the reply is only calls).
    pub content: String,
    /// The calls, each with a fresh id (`call_` and 24 letters and digits; 9 letters and
    /// digits in the Mistral format, whose templates insist on it) and its arguments as
    /// compact JSON text.
    pub tool_calls: Vec<ToolCall>,
}

/// Splits `text`, a whole reply in `format`, into text and calls.
///
/// - Hermes: each `<tool_call>{...}</tool_call>` block (the closing tag may be missing at
///   the end) is a call; the rest is text.
/// - Llama 3.1: a reply that is only call objects (`{"name", "parameters"}`, after an
///   optional `<|python_tag|>`, separated by `;` or whitespace) is calls; anything else is
///   text.
/// - Mistral: the JSON list after `[TOOL_CALLS]` is calls, the text before it is text.
/// - Generic: `{"tool_calls": [...]}` or `{"tool_call": {...}}` is calls, `{"response":
///   "x"}` is the text `x`, anything else is text.
///
/// In the first three, a reply that is exactly one call object is a call too: a decoder
/// that drops control tokens leaves only the object of a Hermes or Mistral call.
pub fn parse_tool_calls(format: ToolFormat, text: &str) -> ParsedReply {
    let found = match format {
        ToolFormat::Hermes => hermes(text),
        ToolFormat::Llama31 => llama(text),
        ToolFormat::Mistral => mistral(text),
        ToolFormat::Generic => generic(text),
    };
    let (content, calls) = match found {
        Some(f) => f,
        None => match bare_call(text) {
            Some(c) if format != ToolFormat::Generic => (String::new(), vec![c]),
            _ => (text.to_owned(), Vec::new()),
        },
    };
    ParsedReply {
        content: content.trim().to_owned(),
        tool_calls: calls
            .into_iter()
            .map(|(name, arguments)| ToolCall {
                id: new_call_id(format),
                name,
                arguments,
            })
            .collect(),
    }
}

/// A call without its id: name and arguments text.
type Call = (String, String);

/// The JSON value at the start of `s` (after whitespace) and the bytes it spans.
fn json_prefix(s: &str) -> Option<(Value, usize)> {
    let lead = s.len() - s.trim_start().len();
    let mut it = serde_json::Deserializer::from_str(&s[lead..]).into_iter::<Value>();
    match it.next() {
        Some(Ok(v)) => Some((v, lead + it.byte_offset())),
        _ => None,
    }
}

/// `{"name": ..., "arguments" or "parameters": {...}}` (or OpenAI's `{"function": {...}}`).
fn call_of(v: &Value) -> Option<Call> {
    let o = v.as_object()?;
    if let Some(f) = o.get("function").filter(|f| f.is_object()) {
        return call_of(f);
    }
    let name = o.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    let args = o
        .get("arguments")
        .or_else(|| o.get("parameters"))
        .cloned()
        .unwrap_or(Value::Null);
    Some((name.to_owned(), compact_arguments(args)))
}

/// Arguments as compact JSON text; a string holding JSON (arguments encoded twice) is that
/// JSON, any other string stays a JSON string.
fn compact_arguments(args: Value) -> String {
    match args {
        Value::String(s) => match serde_json::from_str::<Value>(&s) {
            Ok(v) => v.to_string(),
            Err(_) => Value::String(s).to_string(),
        },
        other => arguments_text(other),
    }
}

/// The whole of `text` as one call object with only call keys (the fallback of every
/// format but the generic one).
fn bare_call(text: &str) -> Option<Call> {
    let (v, n) = json_prefix(text)?;
    if !text[n..].trim().is_empty() {
        return None;
    }
    let o = v.as_object()?;
    let call_keys = ["name", "arguments", "parameters", "type", "id"];
    let args = o.contains_key("arguments") || o.contains_key("parameters");
    if !args || o.keys().any(|k| !call_keys.contains(&k.as_str())) {
        return None;
    }
    call_of(&v)
}

fn hermes(text: &str) -> Option<(String, Vec<Call>)> {
    const OPEN: &str = "<tool_call>";
    const CLOSE: &str = "</tool_call>";
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        content.push_str(&rest[..at]);
        let after = &rest[at + OPEN.len()..];
        match json_prefix(after).and_then(|(v, n)| Some((call_of(&v)?, n))) {
            Some((call, n)) => {
                calls.push(call);
                let tail = after[n..].trim_start();
                rest = tail.strip_prefix(CLOSE).unwrap_or(tail);
            }
            None => {
                // Not a call: the tag stays in the text.
                content.push_str(OPEN);
                rest = after;
            }
        }
    }
    content.push_str(rest);
    (!calls.is_empty()).then_some((content, calls))
}

fn llama(text: &str) -> Option<(String, Vec<Call>)> {
    let mut rest = text.trim_start();
    rest = rest.strip_prefix("<|python_tag|>").unwrap_or(rest);
    let mut calls = Vec::new();
    loop {
        let (v, n) = json_prefix(rest)?;
        let o = v.as_object()?;
        if !(o.contains_key("parameters") || o.contains_key("arguments")) {
            return None;
        }
        calls.push(call_of(&v)?);
        rest = rest[n..].trim_start();
        rest = rest.strip_prefix(';').unwrap_or(rest).trim_start();
        if rest.is_empty() {
            return Some((String::new(), calls));
        }
    }
}

fn mistral(text: &str) -> Option<(String, Vec<Call>)> {
    const OPEN: &str = "[TOOL_CALLS]";
    let (before, after) = match text.find(OPEN) {
        Some(at) => (&text[..at], &text[at + OPEN.len()..]),
        // A decoder that drops control tokens leaves the list alone.
        None if text.trim_start().starts_with("[{") => ("", text),
        None => return None,
    };
    let (v, n) = json_prefix(after)?;
    let calls: Vec<Call> = match &v {
        Value::Array(items) => items.iter().map(call_of).collect::<Option<_>>()?,
        obj @ Value::Object(_) => vec![call_of(obj)?],
        _ => return None,
    };
    if calls.is_empty() {
        return None;
    }
    Some((format!("{before}{}", &after[n..]), calls))
}

fn generic(text: &str) -> Option<(String, Vec<Call>)> {
    let body = strip_fence(text.trim());
    let (v, n) = json_prefix(body)?;
    if !body[n..].trim().is_empty() {
        return None;
    }
    let o = v.as_object()?;
    let mut calls = Vec::new();
    if let Some(list) = o.get("tool_calls") {
        match list {
            Value::Array(items) => {
                calls = items.iter().map(call_of).collect::<Option<Vec<_>>>()?;
            }
            single @ Value::Object(_) => calls.push(call_of(single)?),
            _ => return None,
        }
    } else if let Some(one) = o.get("tool_call") {
        calls.push(call_of(one)?);
    }
    let content = match o.get("response").or_else(|| o.get("content")) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    if calls.is_empty() && !o.contains_key("response") {
        return None;
    }
    Some((content, calls))
}

/// The inside of a Markdown code fence (```json ... ```), which weak models add.
fn strip_fence(s: &str) -> &str {
    let Some(inner) = s.strip_prefix("```") else {
        return s;
    };
    let Some(inner) = inner.strip_suffix("```") else {
        return s;
    };
    let inner = inner.strip_prefix("json").unwrap_or(inner);
    inner.trim()
}
