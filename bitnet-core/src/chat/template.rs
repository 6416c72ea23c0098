//! A chat template: which one a chat uses (built in, the model file's own, or a user's
//! file), its special-token texts and stop strings, and rendering a conversation with it
//! the way Hugging Face's `apply_chat_template` does. Each render is a [`RenderJob`] run in
//! this process ([`super::jinja`] sets the engine up with its budgets) or by the
//! [`TemplateRenderer`] set on the template: a program that cannot let a template from a
//! file exhaust its memory renders those elsewhere.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use super::builtin::{BuiltinTemplate, builtin};
use super::error::ChatError;
use super::jinja::{RenderJob, TemplateRenderer, describe, environment};
use super::message::Message;
use super::template_limits::MAX_TEMPLATE_BYTES;
use super::tools::render::{ToolCaps, prepare, probe};
use super::tools::{TemplateSource, Tool, ToolFormat};
use crate::model::Model;
use crate::tokenizer::Tokenizer;

/// A parsed chat template with the special-token texts it is rendered with.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    name: String,
    source: String,
    bos: String,
    eos: String,
    stop: Vec<String>,
    /// One of ours ([`super::builtin`]) rather than text from a file.
    builtin: bool,
    /// Runs the renders elsewhere; `None` renders in this process.
    renderer: Option<Arc<dyn TemplateRenderer>>,
    /// What the template renders of tools, calls and results (probed on first use).
    tool_caps: OnceLock<ToolCaps>,
}

impl ChatTemplate {
    /// A template from Jinja `source`, called `name` in messages; parsed here, so a
    /// template that does not parse is refused at once.
    pub fn from_source(
        name: impl Into<String>,
        source: impl Into<String>,
        bos: impl Into<String>,
        eos: impl Into<String>,
    ) -> Result<ChatTemplate, ChatError> {
        let t = ChatTemplate {
            name: name.into(),
            source: source.into(),
            bos: bos.into(),
            eos: eos.into(),
            stop: Vec::new(),
            builtin: false,
            renderer: None,
            tool_caps: OnceLock::new(),
        };
        environment()
            .template_from_str(&t.source)
            .map_err(|e| ChatError::Parse {
                name: t.name.clone(),
                detail: describe(&e),
            })?;
        Ok(t)
    }

    /// A built-in template with the tokenizer's BOS/EOS texts.
    pub fn from_builtin(b: &BuiltinTemplate, tok: Option<&Tokenizer>) -> ChatTemplate {
        let (bos, eos) = special_texts(tok);
        let mut t = ChatTemplate::from_source(b.name, b.source, bos, eos)
            .expect("built-in templates parse (tested)");
        t.stop = b.stop.iter().map(|s| (*s).to_owned()).collect();
        t.builtin = true;
        t
    }

    /// The template a chat with `model` uses: `choice` (a built-in name or a Jinja file's
    /// path) if given, else the file's own `tokenizer.chat_template`, else `plain`.
    pub fn for_model(model: &Model, choice: Option<&str>) -> Result<ChatTemplate, ChatError> {
        Self::resolve(model.chat_template(), model.tokenizer(), choice)
    }

    /// [`ChatTemplate::for_model`] without a model: the file's template text and tokenizer.
    pub fn resolve(
        file_template: Option<&str>,
        tok: Option<&Tokenizer>,
        choice: Option<&str>,
    ) -> Result<ChatTemplate, ChatError> {
        if let Some(choice) = choice {
            if let Some(b) = builtin(choice) {
                return Ok(Self::from_builtin(b, tok));
            }
            let path = Path::new(choice);
            if let Ok(meta) = std::fs::metadata(path) {
                if !meta.is_file() {
                    // Reading a FIFO would block and a device may never end.
                    return Err(ChatError::NotAFile {
                        path: path.to_owned(),
                        what: if meta.is_dir() {
                            "a directory"
                        } else {
                            "a device, pipe or socket"
                        },
                    });
                }
                if meta.len() > MAX_TEMPLATE_BYTES {
                    return Err(ChatError::TooLarge {
                        path: path.to_owned(),
                        bytes: meta.len(),
                    });
                }
                let source = std::fs::read_to_string(path).map_err(|source| ChatError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                let (bos, eos) = special_texts(tok);
                let mut t =
                    ChatTemplate::from_source(path.display().to_string(), source, bos, eos)?;
                t.stop = tok.map(eot_texts).unwrap_or_default();
                return Ok(t);
            }
            return Err(ChatError::Unknown {
                name: choice.to_owned(),
            });
        }
        match file_template {
            Some(src) if !src.trim().is_empty() => {
                let (bos, eos) = special_texts(tok);
                let mut t =
                    ChatTemplate::from_source(Self::file_template_name(src), src, bos, eos)?;
                t.stop = tok.map(eot_texts).unwrap_or_default();
                Ok(t)
            }
            _ => Ok(Self::from_builtin(
                builtin("plain").expect("plain is built in"),
                tok,
            )),
        }
    }

    /// What a model file's own template (`tokenizer.chat_template`, `source`) is called in
    /// messages: its family when it has a known one (`chatml (the file's template)`), else
    /// where it comes from and its size.
    pub fn file_template_name(source: &str) -> String {
        match BuiltinTemplate::family_of(source) {
            Some(f) => format!("{} (the file's template)", f.name),
            None => format!(
                "the file's own template (tokenizer.chat_template, {} bytes)",
                source.len()
            ),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The text `bos_token` renders as.
    pub fn bos_text(&self) -> &str {
        &self.bos
    }

    /// Texts that end an assistant turn, to stop on besides end-of-generation tokens.
    pub fn stop_strings(&self) -> &[String] {
        &self.stop
    }

    /// Whether this is one of the built-in templates (our own Jinja), not text read from a
    /// model file or a user's file.
    pub fn is_builtin(&self) -> bool {
        self.builtin
    }

    /// Runs this template's renders (the tool probes included) through `renderer` from now
    /// on, instead of in this process.
    pub fn set_renderer(&mut self, renderer: Arc<dyn TemplateRenderer>) {
        self.renderer = Some(renderer);
    }

    /// Renders `messages`; with `add_generation_prompt` the text ends where the assistant's
    /// reply begins. Messages with tool fields are rendered as by
    /// [`ChatTemplate::render_with_tools`] without tools.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        self.render_with_tools(messages, &[], add_generation_prompt)
    }

    /// Renders `messages` offering `tools`. A template that handles tools (Llama 3.1's,
    /// Qwen's, Mistral's) gets `tools` and the messages' `tool_calls`, `tool_call_id` and
    /// `name` in OpenAI's shape, as Hugging Face's `apply_chat_template` passes them; what a
    /// template does not render is written as text, as llama.cpp's generic fallback does:
    /// the tools and how to call them in the system message, past calls in the assistant's
    /// content, tool results as user messages naming the call
    /// ([`super::tools`]'s `render`).
    pub fn render_with_tools(
        &self,
        messages: &[Message],
        tools: &[Tool],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let plain = tools.is_empty()
            && messages
                .iter()
                .all(|m| !m.has_tool_fields() && m.role != "tool");
        if plain {
            let messages = serde_json::to_value(messages).map_err(|e| ChatError::Render {
                name: self.name.clone(),
                detail: format!("the messages do not convert to JSON: {e}"),
            })?;
            return self.render_json(messages, None, add_generation_prompt);
        }
        let (msgs, tools) = prepare(ToolFormat::detect(self), self.tool_caps(), messages, tools);
        self.render_json(serde_json::Value::Array(msgs), tools, add_generation_prompt)
    }

    /// What this template renders of tools, tool calls and tool results itself.
    pub(super) fn tool_caps(&self) -> ToolCaps {
        *self.tool_caps.get_or_init(|| {
            probe(&self.source, |msgs, tools| {
                self.render_json(
                    serde_json::Value::Array(msgs.to_vec()),
                    tools.cloned(),
                    true,
                )
                .ok()
            })
        })
    }

    fn render_json(
        &self,
        messages: serde_json::Value,
        tools: Option<serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let job = RenderJob {
            name: self.name.clone(),
            source: self.source.clone(),
            bos_token: self.bos.clone(),
            eos_token: self.eos.clone(),
            messages,
            tools,
            add_generation_prompt,
        };
        match &self.renderer {
            Some(r) => r.render(&job),
            None => job.render(),
        }
    }
}

impl TemplateSource for ChatTemplate {
    fn template_source(&self) -> &str {
        &self.source
    }
}

/// The texts of the tokenizer's BOS and EOS tokens (empty when it has none).
fn special_texts(tok: Option<&Tokenizer>) -> (String, String) {
    let text = |id: Option<u32>| {
        tok.and_then(|t| id.and_then(|i| t.token_text(i)))
            .unwrap_or("")
            .to_owned()
    };
    (
        text(tok.and_then(|t| t.bos_id())),
        text(tok.and_then(|t| t.eos_id())),
    )
}

/// The end-of-turn texts of a tokenizer (EOT and EOS), as stop strings for a file's
/// own template: most files mark them as end-of-generation tokens already.
fn eot_texts(tok: &Tokenizer) -> Vec<String> {
    [tok.eot_id(), tok.eos_id()]
        .into_iter()
        .flatten()
        .filter_map(|id| tok.token_text(id))
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}
