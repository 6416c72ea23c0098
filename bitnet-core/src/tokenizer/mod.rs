//! The tokenizer, built from a GGUF file's `tokenizer.ggml.*` metadata, reproducing
//! llama.cpp's `llama_tokenize` / `llama_token_to_piece` token for token.
//!
//! Two families are implemented: SentencePiece BPE with scores (`llama`, `spm.rs`) and
//! byte-level BPE with merge ranks (`gpt2`, `bpe.rs`) behind a named pre-tokenizer
//! (`pretokenize.rs`: llama3/llama-bpe/falcon3, gpt-2, starcoder, falcon, qwen2, default and
//! their aliases; an unknown name is an error). Encoding first cuts special tokens written in the text out of it
//! (user-defined tokens always, control tokens only with `parse_special`), then runs the
//! family's algorithm on each stretch of plain text. Decoding renders each token to bytes
//! ([`Tokenizer::token_to_piece`]); [`StreamDecoder`] turns a token stream into text that is
//! only ever emitted as whole UTF-8 characters.
//!
//! Loading checks everything once (ids in range, array lengths, merges that join real
//! tokens), so encoding and decoding cannot fail and never panic.

#![forbid(unsafe_code)]

mod bpe;
pub mod clean;
mod error;
mod pretokenize;
mod spm;
mod stream;
mod unicode;
mod vocab;

use std::borrow::Cow;
use std::cell::RefCell;

pub use error::TokenizerError;
pub use stream::{StreamDecoder, TextStream};
pub use vocab::{TokenType, TokenizerKind, VocabSpec};

use vocab::Vocab;

/// A tokenizer: vocabulary, merge table, special tokens and the rendering of every token.
/// Immutable once built; `Send + Sync`, so one instance can serve many threads.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    vocab: Vocab,
    /// Ids of control, user-defined and unknown tokens, longest text first: the order in
    /// which they are cut out of the text.
    specials: Vec<u32>,
    /// Every token rendered as llama.cpp does with `special = false`, back to back.
    piece_bytes: Vec<u8>,
    /// `piece_offs[i]..piece_offs[i + 1]` is token i's piece.
    piece_offs: Vec<usize>,
}

/// A stretch of the input: plain text (byte range) or a special token found in it.
#[derive(Clone, Copy, Debug)]
enum Fragment {
    Text(usize, usize),
    Token(u32),
}

thread_local! {
    static SCRATCH: RefCell<(spm::SpmScratch, bpe::BpeScratch)> = RefCell::default();
}

impl Tokenizer {
    /// Builds the tokenizer from GGUF metadata (`tokenizer.ggml.*`).
    pub fn from_metadata(md: &bitnet_gguf::Metadata) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_spec(VocabSpec::from_metadata(md)?)
    }

    /// Builds the tokenizer from a plain vocabulary description.
    pub fn from_spec(spec: VocabSpec) -> Result<Tokenizer, TokenizerError> {
        let vocab = Vocab::build(spec)?;
        let mut specials: Vec<u32> = (0..vocab.tokens.len() as u32)
            .filter(|&i| {
                let t = &vocab.tokens[i as usize];
                t.control || matches!(t.ty, TokenType::UserDefined | TokenType::Unknown)
            })
            .collect();
        specials.sort_by_key(|&i| std::cmp::Reverse(vocab.tokens[i as usize].text.len()));

        let mut piece_bytes = Vec::new();
        let mut piece_offs = Vec::with_capacity(vocab.tokens.len() + 1);
        piece_offs.push(0);
        for t in &vocab.tokens {
            render_piece(&vocab, t, &mut piece_bytes);
            piece_offs.push(piece_bytes.len());
        }
        Ok(Tokenizer {
            vocab,
            specials,
            piece_bytes,
            piece_offs,
        })
    }

    /// Token ids of `text`. With `add_special`, BOS/EOS are added as the vocabulary asks
    /// (`add_bos` / `add_eos`); with `parse_special`, control tokens written in the text
    /// (`<|eot_id|>`, `<s>`) are recognised. User-defined tokens are always recognised.
    /// This is llama.cpp's `llama_tokenize(text, add_special, parse_special)`.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let v = &self.vocab;
        let frags = if text.is_empty() {
            Vec::new()
        } else {
            self.partition(text, parse_special)
        };
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && v.add_bos {
            out.extend(v.bos);
        }
        SCRATCH.with(|scratch| {
            let (spm_sc, bpe_sc) = &mut *scratch.borrow_mut();
            match v.kind {
                TokenizerKind::Spm => {
                    // The space prefix goes before the text at the start and after every
                    // special token, as llama.cpp's `is_prev_special` rule.
                    let mut prev_special = true;
                    let mut buf = String::new();
                    for f in &frags {
                        match *f {
                            Fragment::Token(id) => {
                                out.push(id);
                                prev_special = true;
                            }
                            Fragment::Text(s, e) => {
                                buf.clear();
                                if v.add_space_prefix && prev_special {
                                    buf.push('\u{2581}');
                                }
                                for c in text[s..e].chars() {
                                    buf.push(if c == ' ' { '\u{2581}' } else { c });
                                }
                                spm::encode(v, &buf, &mut out, spm_sc);
                                prev_special = false;
                            }
                        }
                    }
                }
                TokenizerKind::Bpe => {
                    for f in &frags {
                        match (*f, &v.pre) {
                            (Fragment::Token(id), _) => out.push(id),
                            (Fragment::Text(s, e), Some(pre)) => {
                                bpe::encode(v, pre, &text[s..e], &mut out, bpe_sc);
                            }
                            (Fragment::Text(..), None) => {}
                        }
                    }
                }
            }
        });
        if add_special && v.add_eos {
            out.extend(v.eos);
        }
        out
    }

    /// Cuts the special tokens out of `text`, longest first, each over all remaining text.
    fn partition(&self, text: &str, parse_special: bool) -> Vec<Fragment> {
        let mut frags = vec![Fragment::Text(0, text.len())];
        let mut next = Vec::new();
        for &id in &self.specials {
            let t = &self.vocab.tokens[id as usize];
            if !parse_special && (t.control || t.ty == TokenType::Unknown) {
                continue;
            }
            let needle = t.text.as_str();
            next.clear();
            let mut changed = false;
            for &f in &frags {
                let Fragment::Text(s, e) = f else {
                    next.push(f);
                    continue;
                };
                let mut pos = s;
                while let Some(k) = text[pos..e].find(needle) {
                    changed = true;
                    if k > 0 {
                        next.push(Fragment::Text(pos, pos + k));
                    }
                    next.push(Fragment::Token(id));
                    pos += k + needle.len();
                }
                if pos < e {
                    next.push(Fragment::Text(pos, e));
                }
            }
            if changed {
                std::mem::swap(&mut frags, &mut next);
            }
        }
        frags
    }

    /// The bytes token `id` stands for. Control and unknown tokens render as nothing (use
    /// [`Tokenizer::token_to_piece_special`] to see them); an id out of range too.
    pub fn token_to_piece(&self, id: u32) -> &[u8] {
        let i = id as usize;
        match (self.piece_offs.get(i), self.piece_offs.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.piece_bytes[a..b],
            _ => &[],
        }
    }

    /// Like [`Tokenizer::token_to_piece`], but with `special` control and unknown tokens
    /// render as their text (`<|eot_id|>`), as llama.cpp's `special = true`.
    pub fn token_to_piece_special(&self, id: u32, special: bool) -> &[u8] {
        match self.vocab.tokens.get(id as usize) {
            Some(t) if special && (t.control || t.ty == TokenType::Unknown) => t.text.as_bytes(),
            _ => self.token_to_piece(id),
        }
    }

    /// The piece of `id` as text; a piece that is only part of a UTF-8 character (a byte
    /// token) shows as U+FFFD.
    pub fn piece_str(&self, id: u32) -> Cow<'_, str> {
        String::from_utf8_lossy(self.token_to_piece(id))
    }

    /// The token's text as stored in the vocabulary (`▁Hello`, `Ġworld`, `<0x0A>`).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.tokens.get(id as usize).map(|t| t.text.as_str())
    }

    /// The id of the token whose vocabulary text is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id_of(text)
    }

    /// The token's type from `tokenizer.ggml.token_type`.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.vocab.tokens.get(id as usize).map(|t| t.ty)
    }

    /// The token's score from `tokenizer.ggml.scores` (0 when absent).
    pub fn token_score(&self, id: u32) -> Option<f32> {
        self.vocab.tokens.get(id as usize).map(|t| t.score)
    }

    /// Whether the token is a control token (typed so, or recognised as end of turn).
    pub fn is_control(&self, id: u32) -> bool {
        self.vocab
            .tokens
            .get(id as usize)
            .is_some_and(|t| t.control)
    }

    /// Text of a whole sequence: the pieces joined. With `add_space_prefix` (SPM) the first
    /// non-empty piece loses one leading space, whether or not BOS precedes it
    /// (SentencePiece's decode rule), so `decode(encode(t, true, false)) == t`; to render
    /// generated tokens that continue earlier text, use [`StreamDecoder`], which strips only
    /// right after BOS. Invalid UTF-8 becomes U+FFFD only here, at the end, so characters
    /// split across byte tokens come out whole. Control tokens render as nothing; no
    /// `clean_up_tokenization_spaces` pass is applied.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        let mut strip = self.vocab.add_space_prefix;
        for &id in ids {
            let mut piece = self.token_to_piece(id);
            if piece.is_empty() {
                continue;
            }
            if strip {
                piece = piece.strip_prefix(b" ").unwrap_or(piece);
                strip = false;
            }
            bytes.extend_from_slice(piece);
        }
        match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }

    /// Number of tokens in the vocabulary.
    pub fn n_vocab(&self) -> usize {
        self.vocab.tokens.len()
    }

    /// SPM or byte-level BPE.
    pub fn kind(&self) -> TokenizerKind {
        self.vocab.kind
    }

    /// The pre-tokenizer name (`tokenizer.ggml.pre`; `default` when absent or for SPM).
    pub fn pre_tokenizer_name(&self) -> &str {
        &self.vocab.pre_name
    }

    /// Beginning-of-sequence token.
    pub fn bos_id(&self) -> Option<u32> {
        self.vocab.bos
    }

    /// End-of-sequence token.
    pub fn eos_id(&self) -> Option<u32> {
        self.vocab.eos
    }

    /// End-of-turn token (from the file, else found by text such as `<|eot_id|>`).
    pub fn eot_id(&self) -> Option<u32> {
        self.vocab.eot
    }

    /// End-of-message token (`<|eom_id|>`).
    pub fn eom_id(&self) -> Option<u32> {
        self.vocab.eom
    }

    /// Unknown token.
    pub fn unk_id(&self) -> Option<u32> {
        self.vocab.unk
    }

    /// Padding token.
    pub fn pad_id(&self) -> Option<u32> {
        self.vocab.pad
    }

    /// Whether generation ends at `id`: EOS, EOT, EOM and the other end-of-turn tokens.
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.binary_search(&id).is_ok()
    }

    /// All end-of-generation ids, sorted.
    pub fn eog_ids(&self) -> &[u32] {
        &self.vocab.eog
    }

    /// Whether `encode(.., add_special = true, ..)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` ends with EOS.
    pub fn add_eos(&self) -> bool {
        self.vocab.add_eos
    }

    /// Whether SPM text gets a leading space (`▁`) before tokenizing.
    pub fn add_space_prefix(&self) -> bool {
        self.vocab.add_space_prefix
    }
}

/// Renders a token's bytes as llama.cpp's `token_to_piece(special = false)`.
fn render_piece(vocab: &Vocab, t: &vocab::TokenData, out: &mut Vec<u8>) {
    if t.control {
        return;
    }
    match t.ty {
        TokenType::Unknown | TokenType::Control | TokenType::Unused | TokenType::Undefined => {}
        TokenType::UserDefined => out.extend_from_slice(t.text.as_bytes()),
        TokenType::Byte => match parse_byte_token(&t.text) {
            Some(b) => out.push(b),
            None => out.extend_from_slice(t.text.as_bytes()),
        },
        TokenType::Normal => match vocab.kind {
            TokenizerKind::Spm => {
                for c in t.text.chars() {
                    let c = if c == '\u{2581}' { ' ' } else { c };
                    out.extend_from_slice(c.encode_utf8(&mut [0u8; 4]).as_bytes());
                }
            }
            TokenizerKind::Bpe => {
                for c in t.text.chars() {
                    match unicode::char_to_byte(c) {
                        Some(b) => out.push(b),
                        // Not a GPT-2 byte character: kept as is (llama.cpp writes an
                        // `[UNK_BYTE_..]` marker instead).
                        None => out.extend_from_slice(c.encode_utf8(&mut [0u8; 4]).as_bytes()),
                    }
                }
            }
        },
    }
}

/// The byte of a `<0xNN>` token.
fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}
