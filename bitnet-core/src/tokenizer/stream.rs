//! Streaming detokenization: tokens go in one at a time, text comes out only as whole UTF-8
//! characters. A character split across byte tokens (`<0xE2>` `<0x82>` `<0xAC>`) or across
//! BPE pieces is held back until its last byte arrives; bytes that can never form a
//! character are replaced by U+FFFD as soon as that is certain; [`StreamDecoder::finish`]
//! flushes what is left.

use super::Tokenizer;

/// The state of a token stream's text, without the tokenizer (so a scheduler can keep one
/// per sequence beside the model that owns the tokenizer): pass the tokenizer to each push.
#[derive(Debug, Clone, Default)]
pub struct TextStream {
    /// Bytes of an incomplete character, waiting for the rest.
    pending: Vec<u8>,
    /// The next non-empty piece loses one leading space (SPM, right after BOS).
    strip_space: bool,
    /// Render control tokens as their text.
    special: bool,
}

/// Turns a stream of token ids into text, one push at a time.
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    state: TextStream,
}

impl<'a> StreamDecoder<'a> {
    /// A decoder for `tok`'s tokens. Control tokens render as nothing.
    pub fn new(tok: &'a Tokenizer) -> StreamDecoder<'a> {
        StreamDecoder {
            tok,
            state: TextStream::default(),
        }
    }

    /// Renders control tokens (`<|eot_id|>`) as their text when `special` is set.
    pub fn with_special(mut self, special: bool) -> StreamDecoder<'a> {
        self.state.special = special;
        self
    }

    /// Adds one token; returns the text that became complete (often empty).
    pub fn push(&mut self, id: u32) -> String {
        self.state.push(self.tok, id)
    }

    /// Flushes the held-back bytes (an unfinished character becomes U+FFFD) and resets.
    pub fn finish(&mut self) -> String {
        self.state.finish()
    }

    /// Whether bytes are being held back.
    pub fn has_pending(&self) -> bool {
        self.state.has_pending()
    }
}

impl TextStream {
    /// A stream that renders control tokens as their text when `special` is set.
    pub fn new(special: bool) -> TextStream {
        TextStream {
            special,
            ..TextStream::default()
        }
    }

    /// Adds token `id` of `tok`; returns the text that became complete (often empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> String {
        if tok.add_space_prefix() && Some(id) == tok.bos_id() {
            // SentencePiece's added space prefix is not part of the text.
            self.strip_space = true;
            if !self.special {
                return String::new();
            }
        }
        let mut piece = tok.token_to_piece_special(id, self.special);
        if piece.is_empty() {
            return String::new();
        }
        if self.strip_space && Some(id) != tok.bos_id() {
            piece = piece.strip_prefix(b" ").unwrap_or(piece);
            self.strip_space = false;
        }
        self.pending.extend_from_slice(piece);
        self.drain_complete()
    }

    /// Flushes the held-back bytes (an unfinished character becomes U+FFFD) and resets.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        self.strip_space = false;
        out
    }

    /// Whether bytes are being held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    fn drain_complete(&mut self) -> String {
        let mut out = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = start + e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[start..valid]));
                    match e.error_len() {
                        // Bytes that can never start or continue a character.
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            start = valid + bad;
                        }
                        // A character cut short: wait for its remaining bytes.
                        None => {
                            start = valid;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }
}
