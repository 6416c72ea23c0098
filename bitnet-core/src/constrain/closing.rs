//! Closing a constrained output inside its budget: when a sampled token would leave the
//! output unable to complete in the tokens the request has left (a `max_tokens`, or the
//! context), the token that starts the shortest way to close it is taken instead, so a list
//! of tool calls ends rather than starting a call it cannot finish, a string closes, an
//! object completes, and the answer parses.
//!
//! The way to close is found by walking the grammar from a copy of the parser, one token a
//! step until the output is complete, each time taking the allowed token that closes the
//! most: a token of closing quotes and brackets; else a short complete value
//! (`0`, `true`, `null`, `""`, `[]`, `{}`); else the allowed token that opens the fewest
//! structures and spells the most of what the grammar forces (a key name, a tool-call
//! marker). The walk is a heuristic: it finds a way to close, not always the shortest, and
//! it is only taken when the model's own token leaves no room. It runs only in the last
//! [`CLOSE_WINDOW`] tokens of a budget, where its cost (one mask a step of the walk) is
//! spent on a few tokens.

use llguidance::Matcher;
use toktrie::SimpleVob;

use super::ConstraintVocab;

/// Tokens from the end of a budget within which sampled tokens are checked against it.
pub const CLOSE_WINDOW: usize = 64;

/// How an allowed token serves to close the output (higher closes sooner).
fn closing_rank(bytes: &[u8]) -> i64 {
    if bytes.is_empty() || bytes[0] == toktrie::TokTrie::SPECIAL_TOKEN_MARKER {
        // A control token (matched by name): only when the grammar forces it.
        return -1_000;
    }
    let closers = bytes
        .iter()
        .filter(|b| matches!(b, b'"' | b'}' | b']'))
        .count() as i64;
    let blanks = bytes.iter().filter(|b| b.is_ascii_whitespace()).count() as i64;
    if closers > 0 && closers + blanks == bytes.len() as i64 {
        return 1_000 + closers;
    }
    if matches!(
        bytes,
        b"0" | b"1" | b"true" | b"false" | b"null" | b"\"\"" | b"[]" | b"{}"
    ) {
        return 500;
    }
    if blanks == bytes.len() as i64 {
        // Blanks do not bring the end nearer.
        return -50;
    }
    let openers = bytes
        .iter()
        .filter(|b| matches!(b, b'{' | b'[' | b','))
        .count() as i64;
    // Progress through forced text (a key, a marker): the longer the better.
    bytes.len() as i64 - 100 * openers
}

/// The allowed token (end-of-generation tokens aside) that closes soonest, by
/// [`closing_rank`]; `None` when the mask allows none.
fn best_closing_token(mask: &SimpleVob, vocab: &ConstraintVocab) -> Option<u32> {
    let trie = vocab.trie();
    let mut best: Option<(i64, u32)> = None;
    mask.iter_set_entries(|t| {
        let t = t as u32;
        if vocab.eog().binary_search(&t).is_ok() || t as usize >= vocab.n_vocab() {
            return;
        }
        let rank = closing_rank(trie.token(t));
        if best.is_none_or(|(r, _)| rank > r) {
            best = Some((rank, t));
        }
    });
    best.map(|(_, t)| t)
}

/// A way to complete the output from some position: the tokens that make it complete, and
/// whether an end-of-generation token must then end it (the grammar may go on) or the
/// grammar stops by itself.
#[derive(Debug)]
pub(super) struct ClosingPath {
    pub tokens: Vec<u32>,
    pub needs_end: bool,
}

impl ClosingPath {
    /// Tokens the request samples to end complete: the path, and the end token if needed.
    pub fn cost(&self) -> usize {
        self.tokens.len() + usize::from(self.needs_end)
    }
}

/// A way to complete the output from `matcher`'s position (a copy, moved along the way) in
/// at most `budget` tokens before the end; `None` when the walk finds none.
pub(super) fn closing_path(
    mut matcher: Matcher,
    vocab: &ConstraintVocab,
    budget: usize,
) -> Option<ClosingPath> {
    let mut tokens = Vec::new();
    loop {
        if matcher.is_stopped() {
            return Some(ClosingPath {
                tokens,
                needs_end: false,
            });
        }
        if matcher.is_accepting().unwrap_or(false) {
            return Some(ClosingPath {
                tokens,
                needs_end: true,
            });
        }
        if tokens.len() >= budget {
            return None;
        }
        let mask = matcher.compute_mask_or_eos().ok()?;
        let t = best_closing_token(&mask, vocab)?;
        matcher.consume_token(t).ok()?;
        tokens.push(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closing_quotes_and_brackets_rank_above_values_and_text() {
        assert!(closing_rank(b"\"}") > closing_rank(b"}"));
        assert!(closing_rank(b"}") > closing_rank(b"0"));
        assert!(closing_rank(b"0") > closing_rank(b"city"));
        assert!(closing_rank(b"city") > closing_rank(b"{\""));
        assert!(closing_rank(b", ") < closing_rank(b"a"));
        assert!(closing_rank(b" ") < closing_rank(b"a"));
    }
}
