//! The generation loop behind `bitnet generate`: a thin loop over the [`Scheduler`] with one
//! request. Text reaches the caller only as whole UTF-8 characters and never includes a
//! stop string.

use crate::error::CoreError;
use crate::scheduler::{Event, GenParams, Scheduler};

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
    /// Wall time from admission to the first sampled token.
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
}

impl GenStats {
    /// Prompt tokens evaluated per second.
    pub fn prompt_tps(&self) -> f64 {
        rate(self.prompt_tokens - self.cached_tokens, self.prompt_secs)
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

/// Generates from `prompt` on the scheduler (which should have nothing else to do),
/// calling `on_text` with each piece of text as it becomes final; `on_text` returns false
/// to stop (a closed pipe). As in every request, the last sampled token is not evaluated
/// into the KV cache: a sequence kept with `params.keep` holds the prompt and all
/// generated tokens but the last.
pub fn generate(
    sched: &mut Scheduler,
    prompt: &[u32],
    params: GenParams,
    mut on_text: impl FnMut(&str) -> bool,
) -> Result<(crate::model::SeqId, GenStats), CoreError> {
    let id = sched.submit(prompt, params)?;
    let mut done: Option<GenStats> = None;
    let mut failed: Option<CoreError> = None;
    let mut stopped = false;
    while done.is_none() && failed.is_none() {
        sched.step(&mut |ev| match ev {
            Event::Text { seq, text } if seq == id && !stopped && !on_text(text) => {
                stopped = true;
            }
            Event::Done { seq, stats } if seq == id => done = Some(stats),
            Event::Error { seq, error } if seq == id => failed = Some(error),
            _ => {}
        })?;
        if stopped && done.is_none() {
            sched.cancel(id);
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let mut stats = done.expect("loop ends with a result");
    if stopped {
        stats.stop_reason = StopReason::Callback;
    }
    Ok((id, stats))
}
