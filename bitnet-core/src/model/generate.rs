//! The generation loop behind `bitnet generate` / `chat`: prefill the prompt, then sample,
//! stream and evaluate one token at a time. Text reaches the caller only as whole UTF-8
//! characters ([`StreamDecoder`]) and never includes a stop string ([`StopMatcher`]).

use std::time::Instant;

use super::session::Session;
use crate::error::CoreError;
use crate::sampling::{Sampler, StopMatcher};
use crate::tokenizer::{StreamDecoder, Tokenizer};

/// Why generation ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token.
    Eog,
    /// A stop string appeared in the text.
    StopString,
    /// `max_new` tokens were generated.
    MaxTokens,
    /// The context is full.
    ContextFull,
    /// The text callback asked to stop (e.g. the output pipe was closed).
    Callback,
}

impl StopReason {
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Eog => "eog",
            StopReason::StopString => "stop string",
            StopReason::MaxTokens => "max tokens",
            StopReason::ContextFull => "context full",
            StopReason::Callback => "stopped by caller",
        }
    }
}

/// Counts and timings of one [`generate`] call.
#[derive(Clone, Debug)]
pub struct GenStats {
    pub prompt_tokens: usize,
    /// Wall time of the prompt evaluation.
    pub prompt_secs: f64,
    /// Tokens sampled (an end-of-generation token is not counted).
    pub gen_tokens: usize,
    /// Wall time from the first sample to the end (sampling, streaming and decode steps).
    pub gen_secs: f64,
    pub stop_reason: StopReason,
    /// The generated token ids.
    pub tokens: Vec<u32>,
}

impl GenStats {
    /// Prompt tokens per second.
    pub fn prompt_tps(&self) -> f64 {
        rate(self.prompt_tokens, self.prompt_secs)
    }

    /// Generated tokens per second.
    pub fn gen_tps(&self) -> f64 {
        rate(self.gen_tokens, self.gen_secs)
    }
}

fn rate(n: usize, secs: f64) -> f64 {
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

/// Evaluates `prompt_tokens` after the session's context, then generates up to `max_new`
/// tokens, calling `on_text` with each piece of text as it becomes final. `on_text` returns
/// false to stop (a closed pipe). The sampler sees the prompt and the generated tokens as
/// history (for repetition penalties).
///
/// Each sampled token is evaluated before the next one is sampled, so when generation ends
/// the last sampled token (and an end-of-generation token) is not in the KV cache yet: a
/// caller continuing the conversation passes it in the next prompt (`session.n_past()` says
/// how far the cache got). With an empty `prompt_tokens` generation continues from the
/// logits of the session's last `eval`.
pub fn generate(
    session: &mut Session<'_>,
    tokenizer: &Tokenizer,
    prompt_tokens: &[u32],
    max_new: usize,
    sampler: &mut Sampler,
    stop: &mut StopMatcher,
    mut on_text: impl FnMut(&str) -> bool,
) -> Result<GenStats, CoreError> {
    let t0 = Instant::now();
    if !prompt_tokens.is_empty() {
        session.eval(prompt_tokens, false)?;
    } else if session.n_past() == 0 {
        return Err(CoreError::EmptyInput);
    }
    let prompt_secs = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let mut history: Vec<u32> = Vec::with_capacity(prompt_tokens.len() + max_new);
    history.extend_from_slice(prompt_tokens);
    let mut out = Vec::with_capacity(max_new);
    let mut decoder = StreamDecoder::new(tokenizer);
    let mut reason = StopReason::MaxTokens;
    let mut emit = |text: &str, stop: &mut StopMatcher| -> Option<StopReason> {
        if text.is_empty() {
            return None;
        }
        let feed = stop.feed(text);
        if !feed.emit.is_empty() && !on_text(feed.emit) {
            return Some(StopReason::Callback);
        }
        feed.stopped.then_some(StopReason::StopString)
    };
    let mut ended = false;
    for i in 0..max_new {
        let ts = Instant::now();
        let tok = sampler.sample(session.last_logits(), &history);
        session.add_sampling_time(ts.elapsed().as_secs_f64());
        if tokenizer.is_eog(tok) {
            reason = StopReason::Eog;
            break;
        }
        out.push(tok);
        history.push(tok);
        let text = decoder.push(tok);
        if let Some(r) = emit(&text, stop) {
            reason = r;
            ended = true;
            break;
        }
        if i + 1 == max_new {
            break;
        }
        if session.n_past() >= session.n_ctx() {
            reason = StopReason::ContextFull;
            break;
        }
        session.eval(&[tok], false)?;
    }
    if !ended {
        let rest = decoder.finish();
        if let Some(r) = emit(&rest, stop) {
            reason = r;
        } else {
            let held = stop.finish().to_owned();
            if !held.is_empty() && !on_text(&held) {
                reason = StopReason::Callback;
            }
        }
    }
    Ok(GenStats {
        prompt_tokens: prompt_tokens.len(),
        prompt_secs,
        gen_tokens: out.len(),
        gen_secs: t1.elapsed().as_secs_f64(),
        stop_reason: reason,
        tokens: out,
    })
}
