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
mod error;
mod healing;
mod jinja;
mod message;
mod session;
mod template;
mod template_limits;
mod time;
pub mod tools;

pub use builtin::{BUILTIN_TEMPLATES, BuiltinTemplate, builtin, builtin_names};
pub use conversation::{Conversation, TurnTokens, continuation};
pub use error::ChatError;
pub use healing::{HealedPrompt, heal_prompt, healed_prompt_tokens, tokenize_prompt};
pub use jinja::{RenderJob, TemplateRenderer};
pub use message::Message;
pub use session::{ChatSession, ReplyIo, ReplySettings, SessionError, TurnStats, TurnStatus};
pub use template::ChatTemplate;
pub use template_limits::MAX_TEMPLATE_BYTES;
pub use tools::{
    MAX_TOOLS, ParsedReply, Tool, ToolCall, ToolChoice, ToolError, ToolFormat, ToolRequest,
    ToolRequestError, parse_tool_calls, tool_call_constraint,
};
