//! The text each sampled token gave the answer, so that a choice's log-probability tokens
//! join up to exactly its content, whole or chunk by chunk (the server's `logprobs` and the
//! Python package's both come from here).
//!
//! A token's raw piece is not that text: the first token of a healed chat carries the space
//! the prompt gave up (the engine takes it off the reply), a character split over byte
//! tokens only appears with its last byte, and a stop string cuts the reply inside the
//! tokens that spelled it. Each token is therefore decoded here as the engine decodes the
//! reply (a [`TextStream`] of its own, the healed text taken off the front), and the
//! tokens are matched against the text the engine sends: a token goes out with the chunk
//! that completes its text, its text cut where the reply ends, and the tokens of a stop
//! string that never reached the reply are dropped. Text of a token only partly sent is
//! held until the token is whole or the answer ends, so each chunk's tokens join up to
//! that chunk's text.
//!
//! At the first position of a healed reply only tokens beginning with the healed text could
//! be sampled: the alternatives listed there are those, trimmed the same way; the others
//! (never possible there) are left out.

use std::collections::VecDeque;

use crate::scheduler::TokenLogprobs;
use crate::tokenizer::{TextStream, Tokenizer};

/// One position of an answer's log probabilities, its texts settled.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenEntry {
    /// The text the token gave the answer (empty for the first bytes of a split character).
    pub text: String,
    /// The token's bytes, less what the answer does not hold (healed or cut off).
    pub bytes: Vec<u8>,
    pub logprob: f32,
    /// The most likely tokens there: text, bytes, log probability.
    pub top: Vec<(String, Vec<u8>, f32)>,
}

/// Matches one answer's sampled tokens to its text (see the module docs).
#[derive(Debug)]
pub struct TokenText {
    /// False: no log probabilities were asked for, the text passes straight through.
    tracking: bool,
    /// The healed text: the first position's alternatives must begin with it.
    heal: Vec<u8>,
    /// What is left of it to take off the front of the tokens' text.
    heal_text: String,
    /// The same, for the tokens' bytes.
    heal_bytes: Vec<u8>,
    /// Whether the next token is the answer's first.
    first: bool,
    stream: TextStream,
    /// Tokens whose text has not all been sent, in order.
    pending: VecDeque<TokenEntry>,
    /// Text the engine sent that is not passed on yet: it begins where the first pending
    /// token's text begins.
    held: String,
}

impl TokenText {
    /// An answer whose reply had `heal` taken off its front (token healing); `tracking`
    /// when log probabilities were asked for.
    pub fn new(heal: &str, tracking: bool) -> TokenText {
        TokenText {
            tracking,
            heal: heal.as_bytes().to_vec(),
            heal_text: heal.to_owned(),
            heal_bytes: heal.as_bytes().to_vec(),
            first: true,
            stream: TextStream::default(),
            pending: VecDeque::new(),
            held: String::new(),
        }
    }

    /// A token the engine sampled, with its log probabilities.
    pub fn push(&mut self, tok: &Tokenizer, id: u32, lp: &TokenLogprobs) {
        if !self.tracking {
            return;
        }
        let text = strip_front(&mut self.heal_text, self.stream.push(tok, id));
        let bytes = strip_front_bytes(&mut self.heal_bytes, tok.token_to_piece(id));
        let top = lp
            .top
            .iter()
            .filter_map(|&(alt, l)| {
                let piece = tok.token_to_piece(alt);
                let piece = if self.first {
                    piece.strip_prefix(&self.heal[..])?
                } else {
                    piece
                };
                Some((
                    String::from_utf8_lossy(piece).into_owned(),
                    piece.to_vec(),
                    l,
                ))
            })
            .collect();
        self.first = false;
        self.pending.push_back(TokenEntry {
            text,
            bytes,
            logprob: lp.logprob,
            top,
        });
    }

    /// Text the engine sent: the text to send on now, and the tokens it completes.
    pub fn text(&mut self, text: &str) -> (String, Vec<TokenEntry>) {
        if !self.tracking {
            return (text.to_owned(), Vec::new());
        }
        self.held.push_str(text);
        // The longest run of pending tokens whose text was sent, ending where a chunk may
        // end: not on the first bytes of a split character (its bytes would go out
        // without their text).
        let (mut at, mut run) = (0, 0);
        for (i, t) in self.pending.iter().enumerate() {
            if !self.held[at..].starts_with(t.text.as_str()) {
                break;
            }
            at += t.text.len();
            if !t.text.is_empty() || t.bytes.is_empty() {
                run = i + 1;
            }
        }
        let done: Vec<TokenEntry> = self.pending.drain(..run).collect();
        let sent: usize = done.iter().map(|t| t.text.len()).sum();
        let out = self.held.drain(..sent).collect();
        (out, done)
    }

    /// The answer ended: the text still held, and the tokens left, cut to that text (the
    /// ones past it, a stop string's, dropped).
    pub fn finish(&mut self) -> (String, Vec<TokenEntry>) {
        if !self.tracking {
            return (String::new(), Vec::new());
        }
        // Bytes of a character never finished: the engine flushed them the same way.
        let tail = strip_front(&mut self.heal_text, self.stream.finish());
        if let Some(last) = self.pending.back_mut() {
            last.text.push_str(&tail);
        }
        let out = std::mem::take(&mut self.held);
        let mut left = out.as_str();
        let mut done = Vec::new();
        while let Some(mut t) = self.pending.pop_front() {
            if left.is_empty() && !(t.text.is_empty() && t.bytes.is_empty()) {
                // Past the answer's end (a stop string's tokens, a character it cut).
                break;
            }
            if !left.starts_with(t.text.as_str()) {
                // Cut inside this token: it keeps the part the answer holds.
                let keep = common_prefix(left, &t.text);
                let cut = t.text.len() - keep;
                t.text.truncate(keep);
                t.bytes.truncate(t.bytes.len().saturating_sub(cut));
            }
            left = &left[t.text.len()..];
            done.push(t);
        }
        self.pending.clear();
        if !left.is_empty()
            && let Some(last) = done.last_mut()
        {
            // Text the tokens did not account for (they always should): kept with the last
            // token rather than lost from the tokens' join.
            last.text.push_str(left);
            last.bytes.extend_from_slice(left.as_bytes());
        }
        (out, done)
    }
}

/// Takes what is left of `heal` off the front of `text` (the healed text may end inside a
/// token's text only at the first token, which begins with all of it).
fn strip_front(heal: &mut String, mut text: String) -> String {
    if heal.is_empty() {
        return text;
    }
    let n = common_prefix(heal, &text);
    heal.drain(..n);
    if n < text.len() {
        heal.clear();
    }
    text.drain(..n);
    text
}

fn strip_front_bytes(heal: &mut Vec<u8>, piece: &[u8]) -> Vec<u8> {
    let n = heal.iter().zip(piece).take_while(|(a, b)| a == b).count();
    heal.drain(..n);
    if n < piece.len() {
        heal.clear();
    }
    piece[n..].to_vec()
}

/// The length of the longest common prefix of `a` and `b`, on a character boundary.
fn common_prefix(a: &str, b: &str) -> usize {
    let mut n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    while !a.is_char_boundary(n) {
        n -= 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use crate::tokenizer::VocabSpec;

    use super::*;

    /// A SentencePiece vocabulary with byte tokens: ids 0..=2 special, then these pieces.
    const PIECES: [&str; 8] = [
        "\u{2581}Hi",
        "\u{2581}",
        "<0xE2>",
        "<0x80>",
        "<0x94>",
        "x",
        "with",
        "th",
    ];

    fn tokenizer() -> Tokenizer {
        let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
        let mut types = vec![2, 3, 3];
        for p in PIECES {
            tokens.push(p.into());
            types.push(if p.starts_with("<0x") { 6 } else { 1 });
        }
        Tokenizer::from_spec(VocabSpec {
            model: "llama".into(),
            scores: Some((0..tokens.len()).map(|i| -(i as f32)).collect()),
            tokens,
            token_types: Some(types),
            bos_id: Some(1),
            eos_id: Some(2),
            unk_id: Some(0),
            ..VocabSpec::default()
        })
        .unwrap()
    }

    fn id(piece: &str) -> u32 {
        3 + PIECES.iter().position(|&p| p == piece).unwrap() as u32
    }

    fn lp(top: &[&str]) -> TokenLogprobs {
        TokenLogprobs {
            logprob: -1.0,
            top: top.iter().map(|p| (id(p), -2.0)).collect(),
        }
    }

    fn texts(entries: &[TokenEntry]) -> Vec<&str> {
        entries.iter().map(|e| e.text.as_str()).collect()
    }

    #[test]
    fn a_healed_first_token_and_its_alternatives_lose_the_space() {
        let tok = tokenizer();
        let mut t = TokenText::new(" ", true);
        t.push(
            &tok,
            id("\u{2581}Hi"),
            &lp(&["x", "\u{2581}Hi", "\u{2581}"]),
        );
        t.push(&tok, id("x"), &lp(&["x", "\u{2581}Hi"]));
        // The engine sends the reply without the healed space.
        let (text, entries) = t.text("Hix");
        assert_eq!(text, "Hix");
        assert_eq!(texts(&entries), ["Hi", "x"]);
        assert_eq!(entries[0].bytes, b"Hi");
        // "x" could not start the reply: left out; the others trimmed.
        let first: Vec<(&str, &[u8])> = entries[0]
            .top
            .iter()
            .map(|(s, b, _)| (s.as_str(), b.as_slice()))
            .collect();
        assert_eq!(first, [("Hi", &b"Hi"[..]), ("", &b""[..])]);
        // Later positions keep their alternatives whole.
        assert_eq!(entries[1].top[1].0, " Hi");
        assert_eq!(t.finish(), (String::new(), Vec::new()));
    }

    #[test]
    fn a_split_character_goes_out_with_its_last_byte() {
        let tok = tokenizer();
        let mut t = TokenText::new("", true);
        let mut sent = (String::new(), Vec::new());
        // Each chunk's tokens join up to its text, in text and in bytes.
        let mut chunk = |(text, entries): (String, Vec<TokenEntry>)| {
            let bytes: Vec<u8> = entries.iter().flat_map(|e| e.bytes.clone()).collect();
            assert_eq!(texts(&entries).concat(), text);
            assert_eq!(bytes, text.as_bytes());
            sent.0.push_str(&text);
            sent.1.extend(entries);
        };
        t.push(&tok, id("x"), &lp(&[]));
        chunk(t.text("x"));
        for b in ["<0xE2>", "<0x80>", "<0x94>"] {
            t.push(&tok, id(b), &lp(&[]));
        }
        // The engine sends the character once it is whole.
        chunk(t.text("\u{2014}"));
        chunk(t.finish());
        assert_eq!(sent.0, "x\u{2014}");
        assert_eq!(texts(&sent.1), ["x", "", "", "\u{2014}"]);
    }

    #[test]
    fn a_stop_string_cuts_its_tokens_off() {
        let tok = tokenizer();
        let mut t = TokenText::new("", true);
        for p in ["x", "with", "th"] {
            t.push(&tok, id(p), &lp(&[]));
        }
        // Stop string "thth": "wi" went out, the rest was held and then matched.
        let (text, entries) = t.text("x");
        assert_eq!((text.as_str(), texts(&entries)), ("x", vec!["x"]));
        let (text, entries) = t.text("wi");
        assert_eq!((text.as_str(), entries.len()), ("", 0));
        let (text, entries) = t.finish();
        assert_eq!(text, "wi");
        assert_eq!(texts(&entries), ["wi"]);
        assert_eq!(entries[0].bytes, b"wi");
    }

    #[test]
    fn without_log_probabilities_text_passes_through() {
        let tok = tokenizer();
        let mut t = TokenText::new(" ", false);
        t.push(&tok, id("x"), &lp(&[]));
        assert_eq!(t.text("wi"), ("wi".to_owned(), Vec::new()));
        assert_eq!(t.finish(), (String::new(), Vec::new()));
    }
}
