//! One message of a conversation: what templates render, conversations hold and requests
//! carry.

use super::tools::{ToolCall, wire_content, wire_tool_calls};

/// One message of a conversation, in OpenAI's shape: it deserializes from a chat request's
/// message (`content` may be `null` or a list of text parts) and from our saved chats
/// (`{"role", "content"}`); the tool fields are written only when set.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool` (templates may accept others).
    pub role: String,
    #[serde(default, deserialize_with = "wire_content")]
    pub content: String,
    /// The calls an assistant message makes.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "wire_tool_calls"
    )]
    pub tool_calls: Vec<ToolCall>,
    /// On a `tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// On a `tool` message: the function that ran (OpenAI's older `function` role used it
    /// too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            ..Message::default()
        }
    }
    pub fn system(content: impl Into<String>) -> Message {
        Message::new("system", content)
    }
    pub fn user(content: impl Into<String>) -> Message {
        Message::new("user", content)
    }
    pub fn assistant(content: impl Into<String>) -> Message {
        Message::new("assistant", content)
    }
    /// An assistant message that calls tools (with `content` besides, often empty).
    pub fn assistant_tool_calls(content: impl Into<String>, calls: Vec<ToolCall>) -> Message {
        Message {
            tool_calls: calls,
            ..Message::new("assistant", content)
        }
    }
    /// A tool's result: the answer to the call `tool_call_id` of function `name`.
    pub fn tool_result(
        tool_call_id: impl Into<String>,
        name: Option<String>,
        content: impl Into<String>,
    ) -> Message {
        Message {
            tool_call_id: Some(tool_call_id.into()),
            name,
            ..Message::new("tool", content)
        }
    }
    /// Whether any tool field is set (such a message needs
    /// [`ChatTemplate::render_with_tools`](super::ChatTemplate::render_with_tools)'s treatment
    /// even without tools).
    pub fn has_tool_fields(&self) -> bool {
        !self.tool_calls.is_empty() || self.tool_call_id.is_some() || self.name.is_some()
    }
}
