//! A request as a caller describes it ([`GenParams`], [`SubmitOptions`]) and as the
//! scheduler keeps it while it waits and runs: its prompt and how much of it the sequence
//! holds, its limits, sampler, stop matcher and text stream, and its timings.

use std::time::Instant;

use super::output::{GenStats, StopReason, TokenLogprobs};
use super::policy::ContextPolicy;
use super::speculate::{SpecParams, SpecState};
use crate::constrain::{Constraint, ConstraintState};
use crate::error::CoreError;
use crate::kv::SeqId;
use crate::sampling::{Sampler, SamplerConfig, StopMatcher};
use crate::tokenizer::TextStream;

/// How one request generates.
#[derive(Clone, Debug)]
pub struct GenParams {
    /// Tokens to generate at most; `usize::MAX` = until the sequence's context is full.
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    /// Stop when one of these appears in the text (it is not reported).
    pub stop: Vec<String>,
    /// Keep generating past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Keep the sequence and its KV when done, for [`super::Scheduler::submit_on`].
    pub keep: bool,
    /// What happens when the sequence fills its context.
    pub context: ContextPolicy,
    /// Structured output: only tokens that continue a valid output may be sampled, and the
    /// request ends (as at an end-of-generation token) once the output is complete. Token
    /// healing does not apply under a constraint.
    pub constraint: Option<Constraint>,
    /// Speculative decoding (see [`super::speculate`]): propose tokens and verify them
    /// together. Greedy output is unchanged by it and sampled output keeps the target's
    /// distribution. Not applied (the request decodes one token a step) under a
    /// constraint or under a context policy other than [`ContextPolicy::Stop`].
    pub speculate: Option<SpecParams>,
}

impl Default for GenParams {
    fn default() -> Self {
        GenParams {
            max_tokens: 128,
            sampler: SamplerConfig::default(),
            stop: Vec::new(),
            ignore_eos: false,
            keep: false,
            context: ContextPolicy::Stop,
            constraint: None,
            speculate: None,
        }
    }
}

/// What a request wants besides [`GenParams`] (see [`super::Scheduler::submit_with`]).
#[derive(Clone, Debug, Default)]
pub struct SubmitOptions {
    /// Report each sampled token's log probability and this many most likely tokens.
    pub logprobs: Option<usize>,
    /// Share the prompt of this request (same prompt tokens): wait until its prompt is
    /// evaluated, then fork its sequence instead of evaluating the prompt again.
    pub after: Option<SeqId>,
    /// Token healing: the first generated token must begin with this text, and the text is
    /// left out of what is reported. A chat whose prompt ends in text the reply's first
    /// token would absorb (BitNet's "Assistant: " with its trailing space) takes that text
    /// off the prompt and passes it here (see [`crate::chat::HealedPrompt`]).
    pub heal: String,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Prefill,
    Decode,
}

#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) seq: SeqId,
    /// Tokens to evaluate before generating (the prompt, or a continuation's new tokens).
    pub(crate) prompt: Vec<u32>,
    /// How many of them the sequence holds already.
    pub(crate) fed: usize,
    /// Sequence length when the request was submitted (a continuation's start).
    pub(crate) base: usize,
    /// Prompt tokens found in the prefix cache.
    pub(crate) cached: usize,
    /// Positions the request may fill in all (prompt and generation); under a shifting
    /// policy, the most its sequence holds at once.
    pub(crate) total: usize,
    /// Positions its sequence holds at most ([`ContextPolicy::limit`]).
    pub(crate) limit: usize,
    /// Positions removed by the context policy.
    pub(crate) discarded: usize,
    pub(crate) params: GenParams,
    pub(crate) extra: SubmitOptions,
    /// Log probabilities of the tokens in `sampled`, row by row, when asked for.
    pub(crate) lp: Vec<TokenLogprobs>,
    pub(crate) sampler: Sampler,
    /// Where the output stands in its constraint, if it has one.
    pub(crate) constraint: Option<ConstraintState>,
    /// Why the request must end with an error at the next retirement (a constraint that
    /// failed while sampling).
    pub(crate) error: Option<CoreError>,
    pub(crate) stop: StopMatcher,
    pub(crate) text: TextStream,
    /// What is left to take off the front of the reported text (token healing).
    pub(crate) unheal: String,
    /// What the repetition penalties see: the prompt and the generated tokens.
    pub(crate) history: Vec<u32>,
    pub(crate) generated: Vec<u32>,
    /// The sampled token waiting to be evaluated.
    pub(crate) next: Option<u32>,
    /// Tokens sampled in this step's pass, in order (more than one when a draft was
    /// accepted), and whether the pass's remaining rows are past a rejected draft token.
    pub(crate) sampled: Vec<u32>,
    pub(crate) rejected: bool,
    /// Speculation, when the request speculates, and this step's draft.
    pub(crate) spec: Option<SpecState>,
    pub(crate) drafts: Vec<u32>,
    pub(crate) phase: Phase,
    pub(crate) cancelled: bool,
    pub(crate) t_admit: Option<Instant>,
    pub(crate) t_first: Option<Instant>,
    pub(crate) prompt_secs: f64,
}

impl Request {
    /// The figures of the request as it ends for `reason`.
    pub(crate) fn stats(&self, reason: StopReason) -> GenStats {
        GenStats {
            prompt_tokens: self.prompt.len(),
            cached_tokens: self.cached,
            prompt_read: self.fed.saturating_sub(self.cached),
            prompt_secs: match (&self.phase, self.t_admit) {
                (Phase::Prefill, Some(t)) => t.elapsed().as_secs_f64(),
                _ => self.prompt_secs,
            },
            gen_tokens: self.generated.len(),
            gen_secs: self.t_first.map_or(0.0, |t| t.elapsed().as_secs_f64()),
            stop_reason: reason,
            tokens: self.generated.clone(),
            discarded_tokens: self.discarded,
            constraint_masks: self.constraint.as_ref().map_or(0, |c| c.mask_time().0),
            constraint_secs: self.constraint.as_ref().map_or(0.0, |c| c.mask_time().1),
            draft_tokens: self.spec.as_ref().map_or(0, |s| s.drafted),
            draft_accepted: self.spec.as_ref().map_or(0, |s| s.accepted),
            draft_verifies: self.spec.as_ref().map_or(0, |s| s.verified),
        }
    }
}
