//! Chat: turning a conversation (system, user and assistant messages) into the prompt text
//! a model was trained on, and a conversation's tokens into a KV-cache continuation.
//!
//! - [`ChatTemplate`]: the GGUF's own `tokenizer.chat_template`, rendered with a real Jinja
//!   engine (minijinja, with Python's string methods as Hugging Face templates call them,
//!   `raise_exception`, `strftime_now`, `bos_token`/`eos_token`, `add_generation_prompt`),
//!   or one of the built-in templates ([`builtin`]) when a file has none or the user picks
//!   one. Each render is a [`RenderJob`], run in this process or by a [`TemplateRenderer`]
//!   (elsewhere, under a memory limit: minijinja keeps no memory budget).
//! - [`Conversation`]: the messages of one chat and the text its sequence holds, so that a
//!   new turn evaluates only its own tokens; a generation prompt ending in whitespace is
//!   healed ([`HealedPrompt`]) so that the sequence holds exactly the conversation's tokens.
//! - [`ChatSession`]: a conversation running on a scheduler, turn after turn, its KV cache
//!   kept between turns (what `bitnet chat` drives).

mod builtin;
mod conversation;
mod healing;
mod jinja;
mod session;
mod template;
mod template_limits;
mod time;
pub mod tools;

pub use builtin::{BUILTIN_TEMPLATES, BuiltinTemplate, builtin};
pub use conversation::{Conversation, TurnTokens, continuation};
pub use healing::{HealedPrompt, heal_prompt, healed_prompt_tokens, tokenize_prompt};
pub use jinja::{RenderJob, TemplateRenderer};
pub use session::{ChatSession, ReplyIo, ReplySettings, SessionError, TurnStats, TurnStatus};
pub use template::ChatTemplate;
pub use tools::{
    ParsedReply, Tool, ToolCall, ToolChoice, ToolError, ToolFormat, parse_tool_calls,
    tool_call_constraint,
};

use thiserror::Error;

/// One message of a conversation, in OpenAI's shape: it deserializes from a chat request's
/// message (`content` may be `null` or a list of text parts) and from our saved chats
/// (`{"role", "content"}`); the tool fields are written only when set.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool` (templates may accept others).
    pub role: String,
    #[serde(default, deserialize_with = "tools::wire_content")]
    pub content: String,
    /// The calls an assistant message makes.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "tools::wire_tool_calls"
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
    /// Whether any tool field is set (such a message needs [`ChatTemplate::render_with_tools`]'s
    /// treatment even without tools).
    pub fn has_tool_fields(&self) -> bool {
        !self.tool_calls.is_empty() || self.tool_call_id.is_some() || self.name.is_some()
    }
}

/// The largest template file read (real ones are a few KiB; the longest known, under 64 KiB).
pub const MAX_TEMPLATE_BYTES: u64 = 4 << 20;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ChatError {
    /// The template's source is not valid Jinja.
    #[error("chat template {name:?} does not parse: {detail}")]
    Parse { name: String, detail: String },
    /// The template failed while rendering (including its own `raise_exception`).
    #[error("chat template {name:?} failed to render: {detail}")]
    Render { name: String, detail: String },
    /// A render needed more memory than its [`TemplateRenderer`] allows it (a template
    /// that doubles a string in a loop, say).
    #[error(
        "chat template {name:?} ran out of its memory budget ({} MiB) while rendering",
        budget_bytes >> 20
    )]
    OutOfMemory { name: String, budget_bytes: u64 },
    /// A render took longer than its [`TemplateRenderer`] allows it.
    #[error("chat template {name:?} took longer than {} s to render", limit.as_secs_f64())]
    TimedOut {
        name: String,
        limit: std::time::Duration,
    },
    /// A [`TemplateRenderer`] could not run the render (its process failed to start or
    /// died of something other than its limits).
    #[error("chat template {name:?} could not be rendered: {detail}")]
    Renderer { name: String, detail: String },
    /// No built-in template has this name, and no file has this path.
    #[error(
        "no chat template {name:?}: give a built-in name ({}) or the path of a Jinja file",
        builtin_names()
    )]
    Unknown { name: String },
    /// The path exists but is not a file a template can be read from.
    #[error("the chat template {path} is {what}, not a file")]
    NotAFile {
        path: std::path::PathBuf,
        what: &'static str,
    },
    /// A template file larger than any template (see [`MAX_TEMPLATE_BYTES`]).
    #[error(
        "the chat template file {path} holds {bytes} bytes: more than {MAX_TEMPLATE_BYTES}, too large for a template"
    )]
    TooLarge {
        path: std::path::PathBuf,
        bytes: u64,
    },
    /// A template file could not be read.
    #[error("cannot read the chat template file {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// The built-in template names, comma-separated (for messages and `--help`).
pub fn builtin_names() -> String {
    BUILTIN_TEMPLATES
        .iter()
        .map(|t| t.name)
        .collect::<Vec<_>>()
        .join(", ")
}
