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

use super::healing::{HealedPrompt, healed_prompt_tokens};
// Re-exported where it lived before: the chat session imports it from here.
pub use super::healing::tokenize_prompt;
use super::{ChatError, ChatTemplate, Message};
use crate::tokenizer::Tokenizer;

/// What to do to a sequence holding some tokens so it holds the next prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnTokens {
    /// Held tokens to keep (truncate the sequence to this length).
    pub keep: usize,
    /// Tokens to evaluate after them.
    pub tokens: Vec<u32>,
    /// Text the reply's first token must begin with (token healing, see
    /// [`super::HealedPrompt`]); empty for most templates.
    pub heal: String,
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

    /// The prompt for the next reply as the sequence evaluates it: its tokens, healed where
    /// the template's generation prompt ends in text the reply would absorb.
    pub fn reply_prompt(&self, tok: &Tokenizer) -> Result<HealedPrompt, ChatError> {
        let text = self.prompt_text()?;
        Ok(healed_prompt_tokens(tok, &text, self.template.bos_text()))
    }

    /// How a sequence holding `held` continues into the prompt for the next reply
    /// ([`Conversation::reply_prompt`]).
    pub fn next_turn(&self, tok: &Tokenizer, held: &[u32]) -> Result<TurnTokens, ChatError> {
        let prompt = self.reply_prompt(tok)?;
        Ok(TurnTokens {
            heal: prompt.heal,
            ..continuation(tok, held, &prompt.tokens)
        })
    }
}

/// See the module docs: `full` is the new prompt's tokens, `held` what the sequence has.
///
/// Keeps the longest run of held tokens whose text is a prefix of the new prompt's text
/// and ends where one of the new prompt's tokens ends too; the new prompt's tokens after
/// that point are evaluated. Held tokens equal to the new ones are the usual case; a reply
/// generated as tokens the whole text would split differently is kept as generated; text
/// the template changed (a trimmed reply, a removed turn) is cut back to where it changed.
pub fn continuation(tok: &Tokenizer, held: &[u32], full: &[u32]) -> TurnTokens {
    let common = held.iter().zip(full).take_while(|(a, b)| a == b).count();
    if common == held.len() {
        return TurnTokens {
            keep: common,
            tokens: full[common..].to_vec(),
            heal: String::new(),
        };
    }
    let piece = |t: u32| tok.token_to_piece_special(t, true);
    // Byte offsets where each sequence's tokens end, past the shared tokens.
    let (mut hi, mut fi) = (common, common);
    let (mut h_end, mut f_end) = (0usize, 0usize);
    let mut best = (common, common);
    let mut h_bytes: Vec<u8> = Vec::new();
    let mut f_bytes: Vec<u8> = Vec::new();
    // Walk both token lists over their text; stop at the first byte that differs.
    loop {
        if h_end == f_end && h_end > 0 {
            best = (hi, fi);
        }
        let advance_held = hi < held.len() && (h_end <= f_end || fi >= full.len());
        if advance_held {
            h_bytes.extend_from_slice(piece(held[hi]));
            h_end = h_bytes.len();
            hi += 1;
        } else if fi < full.len() {
            f_bytes.extend_from_slice(piece(full[fi]));
            f_end = f_bytes.len();
            fi += 1;
        } else {
            break;
        }
        let n = h_end.min(f_end);
        if h_bytes[..n] != f_bytes[..n] {
            break;
        }
    }
    TurnTokens {
        keep: best.0,
        tokens: full[best.1..].to_vec(),
        heal: String::new(),
    }
}
