//! The vocabulary: tokens with their scores and types, the BPE merge ranks, the special ids
//! and the flags that steer encoding, read from GGUF metadata (or handed in as a plain
//! [`VocabSpec`]) and checked once, so that encoding and decoding never meet a bad id.
//!
//! Defaults and detections follow llama.cpp's `llama_vocab::impl::load`: SPM vocabularies
//! default to BOS 1 / EOS 2 / UNK 0 and `add_bos`, `add_space_prefix`; an end-of-turn token is
//! found by its text when the file does not name one; end-of-generation ids collect EOS, EOT,
//! EOM and the usual end-of-turn texts.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use bitnet_gguf::{Array, Metadata, Value};

use super::error::TokenizerError;
use super::pretokenize::PreTokenizer;
use super::unicode;

pub(crate) const KEY_MODEL: &str = "tokenizer.ggml.model";
pub(crate) const KEY_PRE: &str = "tokenizer.ggml.pre";
pub(crate) const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
pub(crate) const KEY_SCORES: &str = "tokenizer.ggml.scores";
pub(crate) const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
pub(crate) const KEY_MERGES: &str = "tokenizer.ggml.merges";
pub(crate) const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
pub(crate) const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
pub(crate) const KEY_EOT: &str = "tokenizer.ggml.eot_token_id";
pub(crate) const KEY_EOM: &str = "tokenizer.ggml.eom_token_id";
pub(crate) const KEY_UNK: &str = "tokenizer.ggml.unknown_token_id";
pub(crate) const KEY_PAD: &str = "tokenizer.ggml.padding_token_id";
pub(crate) const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
pub(crate) const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
pub(crate) const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";

/// Largest vocabulary accepted (ids must fit in `u32` with room for "none").
const MAX_TOKENS: usize = 1 << 24;

/// A token's type, as GGUF's `tokenizer.ggml.token_type` encodes it (llama.cpp's
/// `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// 0, or any value outside the table.
    Undefined,
    /// 1: an ordinary piece of text.
    Normal,
    /// 2: the unknown token.
    Unknown,
    /// 3: a control token (BOS, EOS, `<|eot_id|>`...): never produced from plain text, and
    /// rendered as nothing unless asked.
    Control,
    /// 4: a user-defined token, always matched in text before tokenizing.
    UserDefined,
    /// 5: an unused slot.
    Unused,
    /// 6: a byte-fallback token `<0xNN>`.
    Byte,
}

impl TokenType {
    /// The type for a GGUF `token_type` value.
    pub fn from_gguf(v: i64) -> TokenType {
        match v {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// A plain description of a vocabulary, the GGUF `tokenizer.ggml.*` keys as Rust values.
/// [`super::Tokenizer::from_spec`] checks it; [`VocabSpec::from_metadata`] fills it from GGUF.
#[derive(Clone, Debug, Default)]
pub struct VocabSpec {
    /// `tokenizer.ggml.model`: `llama` (SentencePiece BPE) or `gpt2` (byte-level BPE).
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer of a `gpt2` vocabulary.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores`, one per token (SPM merge priorities).
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.token_type`, one per token.
    pub token_types: Option<Vec<i64>>,
    /// `tokenizer.ggml.merges`: `"left right"`, best first.
    pub merges: Option<Vec<String>>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos_id: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos_id: Option<u32>,
    /// `tokenizer.ggml.eot_token_id`.
    pub eot_id: Option<u32>,
    /// `tokenizer.ggml.eom_token_id`.
    pub eom_id: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk_id: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad_id: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`.
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix` (SPM).
    pub add_space_prefix: Option<bool>,
}

fn gguf_err(key: &'static str, e: bitnet_gguf::GgufError) -> TokenizerError {
    TokenizerError::invalid(key, e.to_string())
}

fn opt_id(md: &Metadata, key: &'static str) -> Result<Option<u32>, TokenizerError> {
    md.get_opt_u32(key).map_err(|e| gguf_err(key, e))
}

fn opt_bool(md: &Metadata, key: &'static str) -> Result<Option<bool>, TokenizerError> {
    md.get_opt_bool(key).map_err(|e| gguf_err(key, e))
}

impl VocabSpec {
    /// Reads the `tokenizer.ggml.*` keys. Types are checked here; values in
    /// [`super::Tokenizer::from_spec`].
    pub fn from_metadata(md: &Metadata) -> Result<VocabSpec, TokenizerError> {
        let model = match md.get(KEY_MODEL) {
            None => return Err(TokenizerError::MissingKey { key: KEY_MODEL }),
            Some(_) => md.get_str(KEY_MODEL).map_err(|e| gguf_err(KEY_MODEL, e))?,
        };
        let pre = md
            .get_opt_str(KEY_PRE)
            .map_err(|e| gguf_err(KEY_PRE, e))?
            .map(str::to_owned);
        let tokens = match md.get(KEY_TOKENS) {
            None => return Err(TokenizerError::MissingKey { key: KEY_TOKENS }),
            Some(_) => md
                .get_str_array(KEY_TOKENS)
                .map_err(|e| gguf_err(KEY_TOKENS, e))?
                .to_vec(),
        };
        let scores = match md.get(KEY_SCORES) {
            None => None,
            Some(Value::Array(Array::F32(v))) => Some(v.clone()),
            // llama.cpp also accepts integer scores.
            Some(Value::Array(Array::I32(v))) => Some(v.iter().map(|&x| x as f32).collect()),
            Some(v) => {
                return Err(TokenizerError::invalid(
                    KEY_SCORES,
                    format!("expected an array of f32, found {}", v.type_name()),
                ));
            }
        };
        let token_types = match md.get(KEY_TOKEN_TYPE) {
            None => None,
            Some(_) => Some(
                md.get_int_array(KEY_TOKEN_TYPE)
                    .map_err(|e| gguf_err(KEY_TOKEN_TYPE, e))?,
            ),
        };
        let merges = md
            .get_opt_str_array(KEY_MERGES)
            .map_err(|e| gguf_err(KEY_MERGES, e))?
            .map(<[String]>::to_vec);
        Ok(VocabSpec {
            model: model.to_owned(),
            pre,
            tokens,
            scores,
            token_types,
            merges,
            bos_id: opt_id(md, KEY_BOS)?,
            eos_id: opt_id(md, KEY_EOS)?,
            eot_id: opt_id(md, KEY_EOT)?,
            eom_id: opt_id(md, KEY_EOM)?,
            unk_id: opt_id(md, KEY_UNK)?,
            pad_id: opt_id(md, KEY_PAD)?,
            add_bos: opt_bool(md, KEY_ADD_BOS)?,
            add_eos: opt_bool(md, KEY_ADD_EOS)?,
            add_space_prefix: opt_bool(md, KEY_ADD_SPACE_PREFIX)?,
        })
    }
}

/// A small, fast, non-cryptographic hasher (the "Fx" multiply-rotate scheme) for the
/// token and merge tables, whose keys come from the model file, not from an adversary
/// choosing collisions at run time.
#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct FxHasher(u64);

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        // The product's high bits depend on all input bits, its low bits only on the low
        // input bits; hash tables index by the low bits, so bring the high ones down.
        self.0.rotate_left(26)
    }
}

pub(crate) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// One vocabulary entry.
#[derive(Clone, Debug)]
pub(crate) struct TokenData {
    pub text: String,
    pub score: f32,
    pub ty: TokenType,
    /// Control-like: detected end-of-turn texts are promoted even when typed normal.
    pub control: bool,
}

/// Which algorithm turns words into ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenizerKind {
    /// SentencePiece BPE with scores (`tokenizer.ggml.model = llama`).
    Spm,
    /// Byte-level BPE with merge ranks (`tokenizer.ggml.model = gpt2`).
    Bpe,
}

/// Sentinel for "no token" in dense tables.
pub(crate) const NO_TOKEN: u32 = u32::MAX;

/// The checked vocabulary.
#[derive(Clone, Debug)]
pub(crate) struct Vocab {
    pub kind: TokenizerKind,
    pub pre_name: String,
    pub pre: Option<PreTokenizer>,
    pub tokens: Vec<TokenData>,
    pub token_to_id: FxMap<String, u32>,
    /// `(left << 32 | right)` -> `(rank, merged)`.
    pub merges: FxMap<u64, (u32, u32)>,
    /// BPE: the token of each byte's GPT-2 character; SPM: the `<0xNN>` token.
    pub byte_tokens: [u32; 256],
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    /// Sorted.
    pub eog: Vec<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_space_prefix: bool,
    pub ignore_merges: bool,
}

/// End-of-turn texts llama.cpp uses to find the EOT token when the file names none, in the
/// order of preference used here.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// Texts llama.cpp treats as end of generation.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<｜end▁of▁sentence｜>",
];

/// Fill-in-the-middle pad / repo / file-separator texts: llama.cpp ends generation on them.
const FIM_EOG_TEXTS: &[&str] = &[
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<PAD>",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
];

fn check_id(id: Option<u32>, key: &'static str, n: usize) -> Result<Option<u32>, TokenizerError> {
    match id {
        Some(i) if i as usize >= n => Err(TokenizerError::invalid(
            key,
            format!("token id {i} is out of range for a vocabulary of {n} tokens"),
        )),
        other => Ok(other),
    }
}

impl Vocab {
    pub(crate) fn build(spec: VocabSpec) -> Result<Vocab, TokenizerError> {
        let kind = match spec.model.as_str() {
            "llama" => TokenizerKind::Spm,
            "gpt2" => TokenizerKind::Bpe,
            other => return Err(TokenizerError::UnsupportedModel(other.to_owned())),
        };
        let n = spec.tokens.len();
        if n == 0 {
            return Err(TokenizerError::invalid(
                KEY_TOKENS,
                "the vocabulary is empty",
            ));
        }
        if n > MAX_TOKENS {
            return Err(TokenizerError::invalid(
                KEY_TOKENS,
                format!("{n} tokens exceed the limit of {MAX_TOKENS}"),
            ));
        }
        if let Some(s) = &spec.scores
            && s.len() != n
        {
            return Err(TokenizerError::invalid(
                KEY_SCORES,
                format!("{} scores for {n} tokens", s.len()),
            ));
        }
        if let Some(t) = &spec.token_types
            && t.len() != n
        {
            return Err(TokenizerError::invalid(
                KEY_TOKEN_TYPE,
                format!("{} token types for {n} tokens", t.len()),
            ));
        }

        let mut tokens = Vec::with_capacity(n);
        let mut token_to_id: FxMap<String, u32> = FxMap::default();
        token_to_id.reserve(n);
        for (i, text) in spec.tokens.into_iter().enumerate() {
            // llama.cpp renames empty tokens so that they stay unique and visible.
            let text = if text.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                text
            };
            if let Some(&first) = token_to_id.get(&text) {
                return Err(TokenizerError::invalid(
                    KEY_TOKENS,
                    format!("duplicate token {text:?} at ids {first} and {i}"),
                ));
            }
            token_to_id.insert(text.clone(), i as u32);
            let ty = spec
                .token_types
                .as_ref()
                .map_or(TokenType::Normal, |t| TokenType::from_gguf(t[i]));
            tokens.push(TokenData {
                text,
                score: spec.scores.as_ref().map_or(0.0, |s| s[i]),
                control: ty == TokenType::Control,
                ty,
            });
        }

        let (pre_name, pre, mut add_bos, mut add_space_prefix) = match kind {
            TokenizerKind::Spm => ("default".to_owned(), None, true, true),
            TokenizerKind::Bpe => {
                let name = spec.pre.clone().unwrap_or_else(|| "default".to_owned());
                let Some(pre) = PreTokenizer::from_name(&name) else {
                    return Err(TokenizerError::UnknownPreTokenizer(name));
                };
                let add_bos = pre.add_bos;
                (name, Some(pre), add_bos, false)
            }
        };
        let ignore_merges = pre.as_ref().is_some_and(|p| p.ignore_merges);
        if let Some(v) = spec.add_bos {
            add_bos = v;
        }
        if let Some(v) = spec.add_space_prefix {
            add_space_prefix = v;
        }
        let add_eos = spec.add_eos.unwrap_or(false);

        // SPM's historical defaults, dropped if out of range (as llama.cpp does).
        let default = |id: u32| (kind == TokenizerKind::Spm && (id as usize) < n).then_some(id);
        let bos = check_id(spec.bos_id, KEY_BOS, n)?.or(default(1));
        let eos = check_id(spec.eos_id, KEY_EOS, n)?.or(default(2));
        let unk = check_id(spec.unk_id, KEY_UNK, n)?.or(default(0));
        let mut eot = check_id(spec.eot_id, KEY_EOT, n)?;
        let mut eom = check_id(spec.eom_id, KEY_EOM, n)?;
        let pad = check_id(spec.pad_id, KEY_PAD, n)?;
        if add_bos && bos.is_none() {
            return Err(TokenizerError::invalid(
                KEY_ADD_BOS,
                format!("is true, but {KEY_BOS} is not set"),
            ));
        }
        if add_eos && eos.is_none() {
            return Err(TokenizerError::invalid(
                KEY_ADD_EOS,
                format!("is true, but {KEY_EOS} is not set"),
            ));
        }

        let find = |t: &str| token_to_id.get(t).copied();
        if eot.is_none() {
            eot = EOT_TEXTS.iter().find_map(|t| find(t));
        }
        if eom.is_none() {
            eom = find("<|eom_id|>");
        }
        let by_text: Vec<u32> = EOG_TEXTS
            .iter()
            .chain(FIM_EOG_TEXTS)
            .filter_map(|t| find(t))
            .chain(if spec.eot_id.is_none() { eot } else { None })
            .chain(if spec.eom_id.is_none() { eom } else { None })
            .collect();
        // Like llama.cpp: a token recognised by its end-of-turn text is control-like, even
        // if the file typed it normal.
        for &id in &by_text {
            tokens[id as usize].control = true;
        }
        let mut eog = by_text;
        eog.extend([eos, eot, eom].into_iter().flatten());
        eog.sort_unstable();
        eog.dedup();

        let merges = match (kind, spec.merges) {
            (TokenizerKind::Bpe, None) => {
                return Err(TokenizerError::MissingKey { key: KEY_MERGES });
            }
            (TokenizerKind::Bpe, Some(m)) => build_merges(&m, &token_to_id)?,
            (TokenizerKind::Spm, _) => FxMap::default(),
        };

        let mut byte_tokens = [NO_TOKEN; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            let found = match kind {
                TokenizerKind::Bpe => {
                    let c = unicode::byte_to_char_table()[b];
                    find(c.encode_utf8(&mut [0u8; 4]))
                }
                TokenizerKind::Spm => find(&format!("<0x{b:02X}>")).or_else(|| {
                    // llama.cpp falls back to the byte as a one-character token.
                    (b < 0x80)
                        .then(|| find(&char::from(b as u8).to_string()))
                        .flatten()
                }),
            };
            *slot = found.unwrap_or(NO_TOKEN);
        }

        Ok(Vocab {
            kind,
            pre_name,
            pre,
            tokens,
            token_to_id,
            merges,
            byte_tokens,
            bos,
            eos,
            eot,
            eom,
            unk,
            pad,
            eog,
            add_bos,
            add_eos,
            add_space_prefix,
            ignore_merges,
        })
    }

    /// The id of the token whose text is exactly `text`.
    #[inline]
    pub(crate) fn id_of(&self, text: &str) -> Option<u32> {
        self.token_to_id.get(text).copied()
    }
}

/// Ranks of the merges: the key packs the two ids, the value is `(rank, merged id)`. The
/// first occurrence of a pair wins, as in llama.cpp.
///
/// Resolving 280k merges (Llama-3) is three hash look-ups each and dominated by cache misses,
/// so large tables are resolved on a few scoped threads; the table itself is filled in rank
/// order on the calling thread, and the error reported is that of the lowest bad rank.
fn build_merges(
    merges: &[String],
    token_to_id: &FxMap<String, u32>,
) -> Result<FxMap<u64, (u32, u32)>, TokenizerError> {
    if u32::try_from(merges.len()).is_err() {
        return Err(TokenizerError::invalid(KEY_MERGES, "too many merges"));
    }
    const PER_THREAD: usize = 32 * 1024;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8)
        .min(merges.len().div_ceil(PER_THREAD))
        .max(1);
    let chunk = merges.len().div_ceil(threads).max(1);
    let resolve_chunk = |start: usize| resolve_merges(&merges[start..], start, token_to_id);
    let mut parts: Vec<Result<Vec<(u64, u32)>, TokenizerError>> = Vec::with_capacity(threads);
    if threads > 1 {
        std::thread::scope(|scope| {
            let mut handles = Vec::with_capacity(threads);
            for t in 0..threads {
                let start = t * chunk;
                let end = (start + chunk).min(merges.len());
                let job = move || resolve_merges(&merges[start..end], start, token_to_id);
                // A thread that cannot be started is resolved here instead.
                match std::thread::Builder::new().spawn_scoped(scope, job) {
                    Ok(h) => handles.push(Ok(h)),
                    Err(_) => handles.push(Err(start)),
                }
            }
            for h in handles {
                parts.push(match h {
                    Ok(h) => h.join().unwrap_or_else(|_| {
                        Err(TokenizerError::invalid(
                            KEY_MERGES,
                            "merge resolution failed",
                        ))
                    }),
                    Err(start) => resolve_merges(
                        &merges[start..(start + chunk).min(merges.len())],
                        start,
                        token_to_id,
                    ),
                });
            }
        });
    } else {
        parts.push(resolve_chunk(0));
    }
    let mut map: FxMap<u64, (u32, u32)> = FxMap::default();
    map.reserve(merges.len());
    let mut rank = 0u32;
    for part in parts {
        for (key, merged) in part? {
            map.entry(key).or_insert((rank, merged));
            rank += 1;
        }
    }
    Ok(map)
}

/// `(pair key, merged id)` of each merge in `merges`, whose first rank is `first_rank`.
fn resolve_merges(
    merges: &[String],
    first_rank: usize,
    token_to_id: &FxMap<String, u32>,
) -> Result<Vec<(u64, u32)>, TokenizerError> {
    let mut out = Vec::with_capacity(merges.len());
    let mut joined = String::new();
    for (i, m) in merges.iter().enumerate() {
        let rank = first_rank + i;
        // The separator is searched from the second byte, so a merge may start with ' '.
        let sep = m
            .as_bytes()
            .iter()
            .skip(1)
            .position(|&b| b == b' ')
            .map(|p| p + 1)
            .ok_or_else(|| {
                TokenizerError::invalid(
                    KEY_MERGES,
                    format!("merge #{rank} {m:?} has no space separating its two parts"),
                )
            })?;
        let (a, b) = (&m[..sep], &m[sep + 1..]);
        joined.clear();
        joined.push_str(a);
        joined.push_str(b);
        let lookup = |t: &str| {
            token_to_id.get(t).copied().ok_or_else(|| {
                TokenizerError::invalid(
                    KEY_MERGES,
                    format!("merge #{rank} {m:?} refers to {t:?}, which is not a token"),
                )
            })
        };
        let (ia, ib, ij) = (lookup(a)?, lookup(b)?, lookup(&joined)?);
        out.push((pair_key(ia, ib), ij));
    }
    Ok(out)
}

#[inline]
pub(crate) fn pair_key(a: u32, b: u32) -> u64 {
    (u64::from(a) << 32) | u64::from(b)
}
