//! What a request produces: the events a scheduler step reports ([`Event`]: sampled
//! tokens with their log probabilities, text that became final, an embedding's vectors, the
//! end and its [`StopReason`] with the request's [`GenStats`], or an error), and the text
//! handling behind them (taking healed text off the reply, log probabilities of the raw
//! logits).

use crate::error::CoreError;
use crate::kv::SeqId;

/// Why generation ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token.
    Eog,
    /// A stop string appeared in the text.
    StopString,
    /// `max_tokens` tokens were generated.
    MaxTokens,
    /// The context is full.
    ContextFull,
    /// The text callback asked to stop (e.g. the output pipe was closed).
    Callback,
    /// The request was cancelled.
    Cancelled,
}

impl StopReason {
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Eog => "eog",
            StopReason::StopString => "stop string",
            StopReason::MaxTokens => "max tokens",
            StopReason::ContextFull => "context full",
            StopReason::Callback => "stopped by caller",
            StopReason::Cancelled => "cancelled",
        }
    }
}

/// Counts and timings of one generation request.
#[derive(Clone, Debug)]
pub struct GenStats {
    /// Prompt tokens of the request (cached ones included).
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache (not evaluated).
    pub cached_tokens: usize,
    /// Prompt tokens evaluated: `prompt_tokens - cached_tokens`, or fewer when the request
    /// ended while its prompt was being read (cancelled).
    pub prompt_read: usize,
    /// Wall time from admission to the first sampled token (or to the end, when the request
    /// ended while reading its prompt).
    pub prompt_secs: f64,
    /// Tokens sampled (an end-of-generation token is not counted).
    pub gen_tokens: usize,
    /// Wall time from the first sample to the end.
    pub gen_secs: f64,
    pub stop_reason: StopReason,
    /// The generated token ids.
    pub tokens: Vec<u32>,
    /// Positions the context policy removed from the sequence to go on (0 unless it
    /// shifts; see [`crate::scheduler::ContextPolicy`]).
    pub discarded_tokens: usize,
    /// Token masks a structured-output constraint computed, and the seconds they took.
    pub constraint_masks: u64,
    pub constraint_secs: f64,
    /// Speculative decoding: draft tokens proposed, how many the target accepted, and the
    /// passes that verified a draft (0 without speculation).
    pub draft_tokens: usize,
    pub draft_accepted: usize,
    pub draft_verifies: usize,
}

impl GenStats {
    /// Prompt tokens evaluated per second.
    pub fn prompt_tps(&self) -> f64 {
        rate(self.prompt_read, self.prompt_secs)
    }

    /// The share of draft tokens the target accepted (0 when none was proposed).
    pub fn acceptance(&self) -> f64 {
        if self.draft_tokens == 0 {
            0.0
        } else {
            self.draft_accepted as f64 / self.draft_tokens as f64
        }
    }

    /// Tokens each verification pass produced on average (its accepted drafts and the
    /// target's own token; 0 when nothing was verified).
    pub fn mean_accepted_length(&self) -> f64 {
        if self.draft_verifies == 0 {
            0.0
        } else {
            (self.draft_accepted + self.draft_verifies) as f64 / self.draft_verifies as f64
        }
    }

    /// Generated tokens per second (the first one came with the prompt, so the rate
    /// counts the tokens decoded after it).
    pub fn gen_tps(&self) -> f64 {
        rate(self.gen_tokens.saturating_sub(1), self.gen_secs)
    }
}

fn rate(n: usize, secs: f64) -> f64 {
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

/// Log probabilities at one generated position: of the raw logits (temperature 1, before
/// penalties and truncation), as OpenAI reports them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TokenLogprobs {
    pub logprob: f32,
    /// The most likely tokens and their log probabilities, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// What a step reports.
#[derive(Debug)]
pub enum Event<'a> {
    /// Sequence `seq` sampled `token` (reported before the text it completes, which may come
    /// later or, inside a stop string, never); `logprobs` when the request asked for them.
    Token {
        seq: SeqId,
        token: u32,
        logprobs: Option<&'a TokenLogprobs>,
    },
    /// Text that became final for sequence `seq`.
    Text { seq: SeqId, text: &'a str },
    /// The vectors of embedding request `seq` (pooled and normalized as it asked: one, or
    /// one a token without pooling), reported once its prompt is evaluated, just before its
    /// `Done`.
    Embedding {
        seq: SeqId,
        embedding: Vec<Vec<f32>>,
    },
    /// Sequence `seq` is done (its sequence freed unless it was submitted with `keep`).
    Done { seq: SeqId, stats: GenStats },
    /// Sequence `seq` failed and was ended.
    Error { seq: SeqId, error: CoreError },
}

/// Takes what is left of the healed text off the front of `piece` (it begins with that
/// text, or with a part of it when it ends within it).
pub(crate) fn unheal<'a>(left: &mut String, piece: &'a str) -> &'a str {
    if left.is_empty() || piece.is_empty() {
        return piece;
    }
    let mut n = left
        .bytes()
        .zip(piece.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    while !left.is_char_boundary(n) {
        n -= 1;
    }
    left.drain(..n);
    if n < piece.len() {
        // The text goes on past what was healed: nothing more to take off.
        left.clear();
    }
    &piece[n..]
}

/// The log-softmax of `logits` at `token`, and the `k` largest, into `out`.
pub(crate) fn log_probs(logits: &[f32], token: u32, k: usize, out: &mut TokenLogprobs) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&x| f64::from((x - max).exp())).sum();
    let lse = max + sum.ln() as f32;
    out.logprob = logits
        .get(token as usize)
        .map_or(f32::NEG_INFINITY, |&x| x - lse);
    out.top.clear();
    if k == 0 {
        return;
    }
    // k is small (OpenAI allows 20): a sorted insert into k slots beats a full sort.
    for (i, &x) in logits.iter().enumerate() {
        if out.top.len() == k && out.top.last().is_some_and(|&(_, y)| y >= x) {
            continue;
        }
        let at = out.top.partition_point(|&(_, y)| y >= x);
        out.top.insert(at, (i as u32, x));
        out.top.truncate(k);
    }
    for e in &mut out.top {
        e.1 -= lse;
    }
}
