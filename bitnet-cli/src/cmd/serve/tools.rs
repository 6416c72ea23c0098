//! Tool calls in a chat request: `tools`, `tool_choice` and `parallel_tool_calls` read as
//! OpenAI sends them, the grammar that enforces a `required` or named call (and llama.cpp's
//! generic JSON answer), and the answer's calls in OpenAI's shape, whole
//! (`message.tool_calls`) or streamed (`delta.tool_calls` fragments).

use bitnet_core::chat::{
    ToolCall, ToolFormat, ToolRequest, ToolRequestError, tool_call_constraint,
};
use bitnet_core::constrain::ConstraintSpec;
use bitnet_core::tokenizer::Tokenizer;
use serde_json::{Map, Value, json};

use super::error::{ApiError, ApiResult};

/// Reads `tools`, `tool_choice`, `parallel_tool_calls` (see [`ToolRequest::from_fields`]);
/// a fault is a 400 naming the field.
pub fn tool_request(obj: &Map<String, Value>) -> ApiResult<ToolRequest> {
    ToolRequest::from_fields(
        obj.get("tools"),
        obj.get("tool_choice"),
        obj.get("parallel_tool_calls"),
    )
    .map_err(|e| match e {
        ToolRequestError::BadField { field, expected } => ApiError::bad_field(field, &expected),
        ToolRequestError::Invalid { field, message } => ApiError::invalid(message, Some(field)),
    })
}

/// The grammar of the answer (None: free text, read for calls afterwards).
pub fn tool_constraint(
    req: &ToolRequest,
    format: ToolFormat,
    tok: &Tokenizer,
) -> ApiResult<Option<ConstraintSpec>> {
    if !req.active() {
        return Ok(None);
    }
    tool_call_constraint(format, &req.tools, &req.choice, req.parallel, Some(tok))
        .map_err(|e| ApiError::invalid(e.to_string(), Some("tool_choice")))
}

/// `message.tool_calls` / the calls of a streamed answer.
pub fn calls_json(calls: &[ToolCall]) -> Vec<Value> {
    calls
        .iter()
        .map(|c| serde_json::to_value(c).unwrap_or(Value::Null))
        .collect()
}

/// The `delta.tool_calls` fragments of one call as OpenAI streams them: the first with the
/// id, type, name and empty arguments, then the arguments in pieces.
pub fn call_deltas(index: usize, call: &ToolCall) -> Vec<Value> {
    let mut out = vec![json!([{
        "index": index,
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": ""},
    }])];
    for piece in pieces(&call.arguments, 16) {
        out.push(json!([{"index": index, "function": {"arguments": piece}}]));
    }
    out
}

/// `s` cut into pieces of about `n` bytes, on character boundaries.
fn pieces(s: &str, n: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < s.len() {
        let mut end = (start + n).min(s.len());
        while !s.is_char_boundary(end) {
            end += 1;
        }
        out.push(&s[start..end]);
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_stream_in_pieces_that_join_to_the_whole() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "f".into(),
            arguments: r#"{"city": "Zürich", "days": [1, 2, 3], "note": "ok"}"#.into(),
        };
        let deltas = call_deltas(2, &call);
        assert!(deltas.len() > 2);
        assert_eq!(deltas[0][0]["id"], "call_1");
        assert_eq!(deltas[0][0]["function"]["name"], "f");
        let joined: String = deltas
            .iter()
            .map(|d| d[0]["function"]["arguments"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(joined, call.arguments);
        assert!(deltas.iter().all(|d| d[0]["index"] == 2));
    }

    #[test]
    fn a_named_choice_must_name_an_offered_tool() {
        let obj = serde_json::from_str::<Map<String, Value>>(
            r#"{"tools":[{"type":"function","function":{"name":"a","parameters":{"type":"object"}}}],
                "tool_choice":{"type":"function","function":{"name":"b"}}}"#,
        )
        .unwrap();
        let e = tool_request(&obj).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tool_choice"));
        assert!(e.message.contains('b'), "{}", e.message);
    }

    #[test]
    fn tools_must_be_a_list_of_functions() {
        let obj = serde_json::from_str::<Map<String, Value>>(r#"{"tools":{"name":"x"}}"#).unwrap();
        assert_eq!(
            tool_request(&obj).unwrap_err().param.as_deref(),
            Some("tools")
        );
        let obj = serde_json::from_str::<Map<String, Value>>(r#"{"tools":[{"type":"function"}]}"#)
            .unwrap();
        assert_eq!(
            tool_request(&obj).unwrap_err().param.as_deref(),
            Some("tools")
        );
    }
}
