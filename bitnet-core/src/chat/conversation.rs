//! A conversation and the tokens its sequence must evaluate next.
//!
//! The sequence of a chat holds the tokens evaluated so far: the last prompt and the reply
//! as generated. The next prompt is the whole conversation rendered again; its tokens
//! usually start with exactly the held ones, and then only the rest is evaluated. When
//! they do not (a reply whose text tokenizes differently from how it was generated, a
//! template that rewrites earlier turns), the held tokens still spell a prefix of the new
//! text in most cases, and the rest of the text is evaluated after them, as llama.cpp's
//! chat does; otherwise the sequence is cut back to the longest common token prefix. The
//! result is always the conversation's text, never a stale or doubled one.

use super::{ChatError, ChatTemplate, Message};
use crate::tokenizer::Tokenizer;

/// What to do to a sequence holding some tokens so it holds the next prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnTokens {
    /// Held tokens to keep (truncate the sequence to this length).
    pub keep: usize,
    /// Tokens to evaluate after them.
    pub tokens: Vec<u32>,
}

/// The messages of one chat, rendered with one template.
#[derive(Clone, Debug)]
pub struct Conversation {
    template: ChatTemplate,
    messages: Vec<Message>,
}

impl Conversation {
    pub fn new(template: ChatTemplate) -> Conversation {
        Conversation {
            template,
            messages: Vec::new(),
        }
    }

    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    pub fn messages_mut(&mut self) -> &mut Vec<Message> {
        &mut self.messages
    }

    pub fn push(&mut self, m: Message) {
        self.messages.push(m);
    }

    /// The system prompt, if the conversation starts with one.
    pub fn system(&self) -> Option<&str> {
        self.messages
            .first()
            .filter(|m| m.role == "system")
            .map(|m| m.content.as_str())
    }

    /// Sets (or with `None` removes) the system prompt at the start.
    pub fn set_system(&mut self, text: Option<String>) {
        let has = self.system().is_some();
        match (text, has) {
            (Some(t), true) => self.messages[0].content = t,
            (Some(t), false) => self.messages.insert(0, Message::system(t)),
            (None, true) => {
                self.messages.remove(0);
            }
            (None, false) => {}
        }
    }

    /// The prompt for the next reply, as text.
    pub fn prompt_text(&self) -> Result<String, ChatError> {
        self.template.render(&self.messages, true)
    }

    /// The tokens of the whole prompt for the next reply (BOS added when the tokenizer
    /// wants one and the template has not written it already).
    pub fn prompt_tokens(&self, tok: &Tokenizer) -> Result<Vec<u32>, ChatError> {
        let text = self.prompt_text()?;
        Ok(tokenize_prompt(tok, &text, self.template.bos_text()))
    }

    /// How a sequence holding `held` continues into the prompt for the next reply.
    pub fn next_turn(&self, tok: &Tokenizer, held: &[u32]) -> Result<TurnTokens, ChatError> {
        let full = self.prompt_tokens(tok)?;
        Ok(continuation(tok, held, &full))
    }
}

/// Tokenizes a rendered prompt: special tokens parsed, BOS added as the tokenizer asks
/// unless the text already starts with its text (no doubled BOS).
pub fn tokenize_prompt(tok: &Tokenizer, text: &str, bos_text: &str) -> Vec<u32> {
    let has_bos = !bos_text.is_empty() && text.starts_with(bos_text);
    tok.encode(text, tok.add_bos() && !has_bos, true)
}

/// See the module docs: `full` is the new prompt's tokens, `held` what the sequence has.
pub fn continuation(tok: &Tokenizer, held: &[u32], full: &[u32]) -> TurnTokens {
    let common = held.iter().zip(full).take_while(|(a, b)| a == b).count();
    if common == held.len() {
        return TurnTokens {
            keep: common,
            tokens: full[common..].to_vec(),
        };
    }
    // Do the held tokens spell a prefix of the new prompt, token boundary included?
    let held_text: Vec<u8> = held
        .iter()
        .flat_map(|&t| tok.token_to_piece_special(t, true).iter().copied())
        .collect();
    let mut spelled = Vec::with_capacity(held_text.len());
    for (i, &t) in full.iter().enumerate() {
        if spelled.len() == held_text.len() {
            if spelled == held_text && i < full.len() {
                return TurnTokens {
                    keep: held.len(),
                    tokens: full[i..].to_vec(),
                };
            }
            break;
        }
        spelled.extend_from_slice(tok.token_to_piece_special(t, true));
        if spelled.len() > held_text.len() || !held_text.starts_with(&spelled) {
            break;
        }
    }
    TurnTokens {
        keep: common,
        tokens: full[common..].to_vec(),
    }
}
