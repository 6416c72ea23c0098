//! What a template is given when tools are in play. A template that handles tools itself
//! (Llama 3.1's, Qwen's, Mistral's) gets the tools and the calls in OpenAI's shape, as Hugging
//! Face's `apply_chat_template` passes them. What a template cannot render is written as
//! text instead, as llama.cpp does for templates without tool support: the tools and how to
//! call them in a system message, past calls in the assistant's content in the syntax the
//! model is asked to answer in, tool results as user messages naming the call.
//!
//! Whether a template renders tools, calls or results is found by rendering a probe and
//! looking for it in the output: a template's source may mention `tools` without using
//! them, and ours mention nothing.

use serde_json::{Map, Value, json};

use super::{Tool, ToolCall, ToolFormat, spaced_json};
use crate::chat::Message;

/// What a template renders of its own accord.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(in crate::chat) struct ToolCaps {
    /// The `tools` list (in a system block or the last user message).
    pub tools: bool,
    /// `tool_calls` of assistant messages.
    pub tool_calls: bool,
    /// Messages of role `tool`.
    pub tool_responses: bool,
}

const PROBE_TOOL: &str = "probe_tool_qz7";
const PROBE_ARGUMENT: &str = "probe_value_kx3";
const PROBE_RESULT: &str = "probe_result_vw5";
/// Nine letters and digits: Mistral's templates refuse other ids.
const PROBE_ID: &str = "probe1234";

/// Renders probes through `render` (messages and tools as the template would get them) and
/// reports what came out; `src`, the template's source, rules out probes it cannot pass.
pub(in crate::chat) fn probe(
    src: &str,
    render: impl Fn(&[Value], Option<&Value>) -> Option<String>,
) -> ToolCaps {
    let user = json!({"role": "user", "content": "Hi"});
    let tools = Value::Array(vec![
        Tool {
            name: PROBE_TOOL.into(),
            description: Some("probe".into()),
            parameters: json!({"type": "object", "properties": {"x": {"type": "string"}}}),
            strict: false,
        }
        .to_openai(),
    ]);
    let found = |out: Option<String>, what: &str| out.is_some_and(|o| o.contains(what));
    let has_tools = src.contains("tools")
        && found(
            render(std::slice::from_ref(&user), Some(&tools)),
            PROBE_TOOL,
        );
    let call = ToolCall {
        id: PROBE_ID.into(),
        name: PROBE_TOOL.into(),
        arguments: json!({ "x": PROBE_ARGUMENT }).to_string(),
    };
    let caller = assistant_value(&Message::assistant_tool_calls("", vec![call]));
    let tools_arg = has_tools.then_some(&tools);
    let has_calls = src.contains("tool_calls")
        && found(
            render(&[user.clone(), caller.clone()], tools_arg),
            PROBE_ARGUMENT,
        );
    let answered = if has_calls {
        caller
    } else {
        json!({"role": "assistant", "content": "Calling."})
    };
    let result = message_value(&Message::tool_result(
        PROBE_ID,
        Some(PROBE_TOOL.into()),
        PROBE_RESULT,
    ));
    let has_results =
        src.contains("tool") && found(render(&[user, answered, result], tools_arg), PROBE_RESULT);
    ToolCaps {
        tools: has_tools,
        tool_calls: has_calls,
        tool_responses: has_results,
    }
}

/// The messages and tools a template with `caps` is rendered with.
pub(in crate::chat) fn prepare(
    format: ToolFormat,
    caps: ToolCaps,
    messages: &[Message],
    tools: &[Tool],
) -> (Vec<Value>, Option<Value>) {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 1);
    for m in messages {
        if m.role == "tool" && !caps.tool_responses {
            let text = tool_result_text(m);
            // Several results in a row (parallel calls) become one user turn, for templates
            // that insist on alternating roles.
            if let Some(prev) = out.last_mut()
                && prev["role"] == "user"
                && prev.get("tool_results").is_some()
            {
                let joined = format!("{}\n\n{text}", prev["content"].as_str().unwrap_or(""));
                prev["content"] = Value::String(joined);
                continue;
            }
            out.push(json!({"role": "user", "content": text, "tool_results": true}));
            continue;
        }
        if !m.tool_calls.is_empty() && !caps.tool_calls {
            let calls = format.render_calls(&m.tool_calls);
            let content = if m.content.trim().is_empty() {
                calls
            } else {
                format!("{}\n\n{calls}", m.content.trim_end())
            };
            out.push(json!({"role": m.role, "content": content}));
            continue;
        }
        out.push(message_value(m));
    }
    // The marker only served the merge above.
    for v in &mut out {
        if let Some(o) = v.as_object_mut() {
            o.remove("tool_results");
        }
    }
    if !tools.is_empty() && (format == ToolFormat::Generic || !caps.tools) {
        let text = instructions(format, tools);
        match out.first_mut() {
            Some(first) if first["role"] == "system" => {
                let merged = format!("{}\n\n{text}", first["content"].as_str().unwrap_or(""));
                first["content"] = Value::String(merged);
            }
            _ => out.insert(0, json!({"role": "system", "content": text})),
        }
    }
    let tools_value = (caps.tools && !tools.is_empty())
        .then(|| Value::Array(tools.iter().map(Tool::to_openai).collect()));
    (out, tools_value)
}

/// A message as Hugging Face templates read it: OpenAI's fields, `tool_calls` with their
/// arguments as an object when they parse (templates apply `tojson` to them).
pub(super) fn message_value(m: &Message) -> Value {
    if !m.tool_calls.is_empty() {
        return assistant_value(m);
    }
    let mut o = Map::new();
    o.insert("role".into(), Value::String(m.role.clone()));
    o.insert("content".into(), Value::String(m.content.clone()));
    if let Some(id) = &m.tool_call_id {
        o.insert("tool_call_id".into(), Value::String(id.clone()));
    }
    if let Some(n) = &m.name {
        o.insert("name".into(), Value::String(n.clone()));
    }
    Value::Object(o)
}

fn assistant_value(m: &Message) -> Value {
    let calls: Vec<Value> = m
        .tool_calls
        .iter()
        .map(|c| {
            json!({
                "id": c.id,
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": c.arguments_json().unwrap_or_else(|| Value::String(c.arguments.clone())),
                },
            })
        })
        .collect();
    let mut o = Map::new();
    o.insert("role".into(), Value::String(m.role.clone()));
    o.insert("content".into(), Value::String(m.content.clone()));
    o.insert("tool_calls".into(), Value::Array(calls));
    if let Some(n) = &m.name {
        o.insert("name".into(), Value::String(n.clone()));
    }
    Value::Object(o)
}

/// A tool's result for a template that has no `tool` role: the call it answers, then the
/// result.
fn tool_result_text(m: &Message) -> String {
    let head = match (&m.name, &m.tool_call_id) {
        (Some(n), Some(id)) => format!("Result of the tool call {id} ({n}):"),
        (Some(n), None) => format!("Result of the tool {n}:"),
        (None, Some(id)) => format!("Result of the tool call {id}:"),
        (None, None) => "Tool result:".to_owned(),
    };
    format!("{head}\n{}", m.content)
}

/// The system text that offers `tools` and says how to call them in `format`.
fn instructions(format: ToolFormat, tools: &[Tool]) -> String {
    let mut s = String::from(
        "You can call the following tools. Each is given with the JSON schema of its arguments:\n",
    );
    for t in tools {
        let mut o = Map::new();
        o.insert("name".into(), Value::String(t.name.clone()));
        if let Some(d) = &t.description {
            o.insert("description".into(), Value::String(d.clone()));
        }
        o.insert("parameters".into(), t.parameters.clone());
        s.push_str(&spaced_json(&Value::Object(o)));
        s.push('\n');
    }
    s.push('\n');
    s.push_str(match format {
        ToolFormat::Generic => {
            "Answer with a single JSON object and nothing else. To call tools: \
             {\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<arguments>}}]}. \
             To answer without calling a tool: {\"response\": \"<your answer>\"}."
        }
        ToolFormat::Hermes => {
            "To call a tool, write <tool_call>\n{\"name\": \"<tool name>\", \"arguments\": {<arguments>}}\n</tool_call> \
             (one block per call); otherwise answer normally."
        }
        ToolFormat::Llama31 => {
            "To call a tool, answer with only the JSON object \
             {\"name\": \"<tool name>\", \"parameters\": {<arguments>}}; otherwise answer normally."
        }
        ToolFormat::Mistral => {
            "To call tools, answer with [TOOL_CALLS] followed by a JSON list \
             [{\"name\": \"<tool name>\", \"arguments\": {<arguments>}}]; otherwise answer normally."
        }
    });
    s
}
