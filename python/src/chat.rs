//! A conversation turned into a generation prompt as `bitnet chat` and `bitnet serve` do
//! it: the model's chat template (or the one `chat_format` names), rendered in this
//! process with the call's tools, tokenized without a doubled BOS, and healed when it ends
//! in text the reply's first token would carry (BitNet's "Assistant: ") unless a
//! constraint decides where the reply starts.

use bitnet_core::Model;
use bitnet_core::chat::{
    ChatTemplate, HealedPrompt, Message, Tool, healed_prompt_tokens, tokenize_prompt,
};
use pyo3::PyResult;

use crate::error::{engine_error, refused};

/// What a chat completion evaluates: the prompt, the text its first token must begin with,
/// and the template's own stop strings.
#[derive(Debug)]
pub struct ChatPrompt {
    pub tokens: Vec<u32>,
    pub heal: String,
    pub stop: Vec<String>,
}

/// The template a `Llama` renders chats with: `chat_format` (a built-in name or a Jinja
/// file) if given, else the file's own, else `plain`.
pub fn template(model: &Model, chat_format: Option<&str>) -> PyResult<ChatTemplate> {
    ChatTemplate::for_model(model, chat_format)
        .map_err(|e| engine_error("choosing the chat template", &e))
}

/// `messages_json`: OpenAI's message list as JSON (the Python layer dumps it); `tools`: what
/// the template is told it may call; `constrained`: the reply follows a grammar, which
/// decides where it starts, so the prompt stays whole (no healing).
pub fn prompt(
    model: &Model,
    template: &ChatTemplate,
    messages_json: &str,
    tools: &[Tool],
    constrained: bool,
) -> PyResult<ChatPrompt> {
    let messages: Vec<Message> =
        serde_json::from_str(messages_json).map_err(|e| refused(format!("messages: {e}")))?;
    if messages.is_empty() {
        return Err(refused("messages: the conversation is empty"));
    }
    let text = template
        .render_with_tools(&messages, tools, true)
        .map_err(|e| engine_error("messages", &e))?;
    let tok = model
        .tokenizer()
        .ok_or_else(|| refused("the model file has no tokenizer (tokenizer.ggml.* keys)"))?;
    let HealedPrompt { tokens, heal } = if constrained {
        HealedPrompt {
            tokens: tokenize_prompt(tok, &text, template.bos_text()),
            heal: String::new(),
        }
    } else {
        healed_prompt_tokens(tok, &text, template.bos_text())
    };
    if tokens.is_empty() {
        return Err(refused("messages: the conversation renders to nothing"));
    }
    Ok(ChatPrompt {
        tokens,
        heal,
        stop: template.stop_strings().to_vec(),
    })
}
