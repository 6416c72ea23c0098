//! A rendered generation prompt's tokens ([`tokenize_prompt`]), and token healing for
//! prompts that end in whitespace.
//!
//! BitNet b1.58 2B-4T's generation prompt ends "Assistant: ". Tokenized alone, that last
//! space is a token of its own; in the whole conversation it joins the reply's first word
//! (" Hi"). A model that has read the lone space answers with tokens the whole text would
//! never contain, and the chat's sequence would no longer hold the conversation's own
//! tokens, so a later turn could not reuse the cache exactly.
//!
//! Healing takes that last token off the prompt and lets the reply's first token be only
//! one that begins with its text (the scheduler's [`crate::scheduler::SubmitOptions::heal`]);
//! the text is left out of the reply, which the template writes after the space again. The
//! sequence then holds exactly the tokens of the conversation rendered whole.
//!
//! A prompt is healed only where the text after it would change its last token: its
//! tokenization followed by a few common first words is checked against its own. Templates whose prompt ends
//! in a marker or a newline (Llama 3's "\n\n" stays a token of its own before a word) are
//! left as they are.

use crate::tokenizer::Tokenizer;

/// A generation prompt's tokens, and the text taken off its end that the reply's first
/// token must begin with (empty when nothing was taken).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealedPrompt {
    pub tokens: Vec<u32>,
    pub heal: String,
}

/// What may follow a prompt in the probe: a reply's usual first words. A space before a
/// word merges with it in every byte-level BPE pre-tokenizer we read, but a small vocabulary
/// may hold the merged token for some words only (" I" but not " H").
const PROBES: [&str; 6] = ["Hello", "I", "The", "A", "a", "Yes"];

/// Tokenizes a rendered prompt: special tokens parsed, BOS added as the tokenizer asks
/// unless the text already starts with its text (no doubled BOS).
pub fn tokenize_prompt(tok: &Tokenizer, text: &str, bos_text: &str) -> Vec<u32> {
    let has_bos = !bos_text.is_empty() && text.starts_with(bos_text);
    tok.encode(text, tok.add_bos() && !has_bos, true)
}

/// Tokenizes a rendered generation prompt as [`tokenize_prompt`] does and heals it: what a
/// chat or a server evaluates for the next reply.
pub fn healed_prompt_tokens(tok: &Tokenizer, text: &str, bos_text: &str) -> HealedPrompt {
    heal_prompt(tok, text, bos_text, tokenize_prompt(tok, text, bos_text))
}

/// Heals the prompt `text` (tokenized as `tokens` by [`tokenize_prompt`]): see the module
/// docs.
pub fn heal_prompt(tok: &Tokenizer, text: &str, bos_text: &str, tokens: Vec<u32>) -> HealedPrompt {
    match healed_piece(tok, text, bos_text, &tokens) {
        Some(heal) => {
            let mut tokens = tokens;
            tokens.pop();
            HealedPrompt { tokens, heal }
        }
        None => HealedPrompt {
            tokens,
            heal: String::new(),
        },
    }
}

/// The last token's text when it is whitespace that a following word would absorb.
fn healed_piece(tok: &Tokenizer, text: &str, bos_text: &str, tokens: &[u32]) -> Option<String> {
    let &last = tokens.last()?;
    if tok.is_control(last) {
        return None;
    }
    let piece = std::str::from_utf8(tok.token_to_piece(last)).ok()?;
    if piece.is_empty() || !piece.chars().all(char::is_whitespace) {
        return None;
    }
    // Only the text after the prompt's last control token is probed: tokenization never
    // crosses one, so that tail decides the last token alone (and a long conversation is
    // not tokenized again for each probe). When the spelled tokens do not line up with the
    // text (a SentencePiece space prefix), the whole text is probed.
    let (tail_text, tail) = match tokens.iter().rposition(|&t| tok.is_control(t)) {
        Some(i) => {
            let head: Vec<u8> = tokens[..=i]
                .iter()
                .flat_map(|&t| tok.token_to_piece_special(t, true).iter().copied())
                .collect();
            match text.as_bytes().strip_prefix(&head[..]) {
                Some(rest) => (std::str::from_utf8(rest).ok()?, &tokens[i + 1..]),
                None => (text, tokens),
            }
        }
        None => (text, tokens),
    };
    let whole = tail.len() == tokens.len();
    let encode = |s: &str| {
        if whole {
            tokenize_prompt(tok, s, bos_text)
        } else {
            tok.encode(s, false, true)
        }
    };
    // The tail as the prompt has it, tokenized on its own.
    if encode(tail_text) != tail {
        return None;
    }
    let n = tail.len();
    let absorbed = PROBES.iter().any(|probe| {
        let probed = encode(&format!("{tail_text}{probe}"));
        probed.len() >= n
            && probed[..n - 1] == tail[..n - 1]
            && probed[n - 1] != last
            && tok
                .token_to_piece(probed[n - 1])
                .starts_with(piece.as_bytes())
    });
    absorbed.then(|| piece.to_owned())
}
