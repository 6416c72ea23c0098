//! A request as a caller describes it ([`GenParams`], [`SubmitOptions`]) and as the
//! scheduler keeps it while it waits and runs: its prompt and how much of it the sequence
//! holds, its limits, sampler, stop matcher and text stream, and its timings. What happens
//! to one request is its own business: being checked and built at submit
//! ([`Request::new`]), sampling a row of logits ([`Request::sample`]), taking a pass's
//! samples ([`Request::take_pass`], [`Request::accept_token`]) and flushing its text at
//! the end ([`Request::finish`]).

use std::time::Instant;

use super::draft::Drafter;
use super::embed::EmbedState;
use super::output::{Event, GenStats, StopReason, TokenLogprobs, log_probs, unheal};
use super::policy::ContextPolicy;
use super::speculate::{DraftSource, SpecParams, SpecState};
use super::validate::RequestError;
use crate::constrain::{Constraint, ConstraintState};
use crate::engine::Engine;
use crate::error::CoreError;
use crate::kv::SeqId;
use crate::sampling::{Sampler, SamplerConfig, StopMatcher};
use crate::tokenizer::{TextStream, Tokenizer};

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
    /// Keep the sequence and its KV when done, for `Scheduler::submit_on`.
    pub keep: bool,
    /// What happens when the sequence fills its context.
    pub context: ContextPolicy,
    /// Structured output: only tokens that continue a valid output may be sampled, and the
    /// request ends (as at an end-of-generation token) once the output is complete. Token
    /// healing does not apply under a constraint.
    pub constraint: Option<Constraint>,
    /// Speculative decoding (see `scheduler::speculate`): propose tokens and verify them
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

/// What a request wants besides [`GenParams`] (see `Scheduler::submit_with`).
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
    /// Refuse, rather than cut short, a request whose prompt leaves no room to generate or
    /// whose `max_tokens` does not fit the context (OpenAI's rule; a shifting context
    /// policy has room for anything).
    pub strict_context: bool,
}

impl GenParams {
    /// Tokens the context leaves to generate after a prompt of `prompt` tokens (unbounded
    /// under a shifting policy).
    pub fn room(&self, prompt: usize, n_ctx: usize) -> usize {
        if self.context == ContextPolicy::Stop {
            n_ctx.saturating_sub(prompt)
        } else {
            usize::MAX
        }
    }

    /// Checks what the request asks of a context of `n_ctx` positions per sequence, for
    /// `prompt` new tokens after `held` ones: the policy, the prompt, and with `strict`
    /// room to generate and all of `max_tokens` (see [`SubmitOptions::strict_context`]).
    /// Submit runs it; a server runs it too, to answer before it queues anything.
    pub fn check_context(
        &self,
        held: usize,
        prompt: usize,
        n_ctx: usize,
        strict: bool,
    ) -> Result<(), RequestError> {
        let stops = self.context == ContextPolicy::Stop;
        if strict && stops && held + prompt >= n_ctx {
            return Err(RequestError::NoRoomToGenerate {
                prompt: held + prompt,
                n_ctx,
            });
        }
        self.context.validate(n_ctx)?;
        // The last prompt position may fill the context: generation then stops at once
        // with "context full", but a prompt past the cache can never run. A shifting policy
        // reads a longer prompt through its window.
        if stops && held + prompt > n_ctx {
            return Err(RequestError::PromptPastContext {
                n_past: held,
                n_new: prompt,
                n_ctx,
            });
        }
        let limit = self.context.limit(n_ctx);
        if held > limit {
            return Err(RequestError::PastPolicyLimit { held, limit });
        }
        if strict && self.max_tokens > self.room(held + prompt, n_ctx) {
            return Err(RequestError::MaxTokensPastContext {
                prompt: held + prompt,
                max_tokens: self.max_tokens,
                n_ctx,
            });
        }
        Ok(())
    }
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
    /// An embedding request's rows (see `embed.rs`): it ends once its prompt is in.
    pub(crate) embed: Option<EmbedState>,
    pub(crate) cancelled: bool,
    pub(crate) t_admit: Option<Instant>,
    pub(crate) t_first: Option<Instant>,
    pub(crate) prompt_secs: f64,
}

impl Request {
    /// Checks request `params` for `prompt` on sequence `seq` of `engine` and builds it.
    /// With `again`, `prompt` is the sequence's last token, to be evaluated again (the
    /// caller cuts it from the cache once this succeeded); `drafter` says whether a draft
    /// model is loaded.
    pub(crate) fn new(
        engine: &Engine,
        seq: SeqId,
        prompt: &[u32],
        again: bool,
        params: GenParams,
        extra: SubmitOptions,
        drafter: bool,
    ) -> Result<Request, CoreError> {
        if prompt.is_empty() {
            return Err(RequestError::EmptyPrompt.into());
        }
        let n_vocab = engine.n_vocab();
        if let Some(index) = prompt.iter().position(|&t| t as usize >= n_vocab) {
            return Err(RequestError::TokenOutOfRange {
                token: prompt[index],
                index,
                n_vocab,
            }
            .into());
        }
        let held = engine.sequence_tokens(seq)?;
        let base = held.len() - usize::from(again);
        let max_len = engine.max_seq_len();
        params.check_context(base, prompt.len(), max_len, extra.strict_context)?;
        let limit = params.context.limit(max_len);
        let total = (base + prompt.len())
            .saturating_add(params.max_tokens)
            .min(limit);
        let mut sampler =
            Sampler::new(params.sampler.clone(), n_vocab).map_err(RequestError::from)?;
        let constraint = params.constraint.as_ref().map(|c| c.start());
        // A constrained output starts where the grammar says, not with healed text.
        let heal = if constraint.is_some() {
            String::new()
        } else {
            extra.heal.clone()
        };
        if !heal.is_empty() {
            sampler.restrict_next(healing_tokens(engine, &heal)?);
        }
        let spec = match &params.speculate {
            Some(p) => {
                p.validate(engine.max_batch())?;
                if p.source == DraftSource::Model && !drafter {
                    return Err(RequestError::NoDraftModel.into());
                }
                // Drafts are verified only where a row's token needs nothing but the row:
                // no constraint (its state would have to follow each row), no shifting.
                let plain = params.constraint.is_none() && params.context == ContextPolicy::Stop;
                plain.then(|| SpecState::new(p.clone()))
            }
            None => None,
        };
        let mut history = Vec::with_capacity(total.min(1 << 20));
        history.extend_from_slice(&held[..base]);
        history.extend_from_slice(prompt);
        Ok(Request {
            seq,
            prompt: prompt.to_vec(),
            fed: 0,
            base,
            cached: 0,
            total,
            limit,
            discarded: 0,
            sampler,
            constraint,
            error: None,
            stop: StopMatcher::new(params.stop.clone()),
            text: TextStream::default(),
            unheal: heal,
            history,
            generated: Vec::with_capacity(params.max_tokens.min(total)),
            params,
            extra,
            lp: Vec::new(),
            next: None,
            sampled: Vec::new(),
            rejected: false,
            spec,
            drafts: Vec::new(),
            phase: Phase::Prefill,
            embed: None,
            cancelled: false,
            t_admit: None,
            t_first: None,
            prompt_secs: 0.0,
        })
    }

    /// Tokens this request may still sample, the next one included: what `max_tokens`
    /// leaves, and under the stopping context policy what the context leaves.
    fn budget_left(&self) -> usize {
        let by_count = self.params.max_tokens.saturating_sub(self.generated.len());
        if self.params.context != ContextPolicy::Stop {
            return by_count;
        }
        let len = self.base + self.prompt.len() + self.generated.len();
        by_count.min(self.limit.saturating_sub(len))
    }

    /// Samples the logits of row `row` of this request's item in the pass (a decode item's
    /// row `row` predicts draft token `row`; a prompt chunk asks for its last row only).
    pub(crate) fn sample(&mut self, row: usize, logits: &[f32]) {
        if self.rejected {
            // Past a draft token the target did not agree with: nothing to sample.
            return;
        }
        let left = self.budget_left();
        let token = match &mut self.constraint {
            None => self.sampler.sample(logits, &self.history),
            Some(c) => match c.compute_mask() {
                Ok(mask) => {
                    let t = self.sampler.sample_masked(logits, &self.history, mask);
                    // Near the end of the budget, a token that leaves no way to close the
                    // output in time gives way to one that closes it.
                    c.within_budget(t, left)
                }
                Err(e) => {
                    self.error = Some(e.into());
                    0
                }
            },
        };
        if let Some(k) = self.extra.logprobs {
            let i = self.sampled.len();
            if self.lp.len() <= i {
                self.lp.resize_with(i + 1, TokenLogprobs::default);
            }
            log_probs(logits, token, k, &mut self.lp[i]);
        }
        // The penalties of the next row see this token.
        self.history.push(token);
        self.sampled.push(token);
        let agrees = self.phase == Phase::Decode && self.drafts.get(row) == Some(&token);
        self.rejected = !agrees;
    }

    /// Takes a pass that read `n` of this request's positions: the prompt moves on, and
    /// the tokens sampled are accepted in order until one ends the request.
    pub(crate) fn take_pass(
        &mut self,
        n: usize,
        tokenizer: Option<&Tokenizer>,
        max_len: usize,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Taken {
        if self.phase == Phase::Prefill {
            self.fed += n;
            if self.fed < self.prompt.len() {
                return Taken::Nothing;
            }
            if self.embed.is_some() {
                // An embedding is its prompt's hidden rows: nothing is generated after them.
                return Taken::Ended(StopReason::MaxTokens);
            }
            self.phase = Phase::Decode;
            self.prompt_secs = self.t_admit.map_or(0.0, |t| t.elapsed().as_secs_f64());
            self.t_first = Some(Instant::now());
        }
        if self.sampled.is_empty() {
            return Taken::Nothing;
        }
        if self.error.is_some() {
            self.next = None;
            return Taken::Ended(StopReason::Cancelled);
        }
        if self.params.max_tokens == 0 {
            // Only the prompt was asked for (`-n 0`): it is in the cache, nothing more.
            self.next = None;
            return Taken::Ended(StopReason::MaxTokens);
        }
        let sampled = std::mem::take(&mut self.sampled);
        let mut used = 0;
        let mut end = None;
        for (j, &t) in sampled.iter().enumerate() {
            used += 1;
            self.next = Some(t);
            end = self.accept_token(j, t, tokenizer, max_len, on_event);
            if end.is_some() {
                break;
            }
        }
        // The sequence holds the pending token and the whole draft: the drafts taken as
        // sampled tokens before the last one used stay (that one is pending now, or ended
        // the request), the rest goes.
        let cut = (!self.drafts.is_empty()).then(|| {
            let proposed = self.drafts.len();
            if let Some(s) = &mut self.spec {
                s.record(proposed, sampled.len() - 1);
            }
            self.drafts.clear();
            proposed - (used - 1)
        });
        self.sampled = sampled;
        self.sampled.clear();
        Taken::Tokens { end, cut }
    }

    /// Takes sampled token `t` (row `j` of the pass's samples): an end-of-generation token
    /// ends the request (unless ignored), else the token joins the output and its text is
    /// reported; returns why the request ends, if it does.
    pub(crate) fn accept_token(
        &mut self,
        j: usize,
        t: u32,
        tokenizer: Option<&Tokenizer>,
        max_len: usize,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Option<StopReason> {
        let eog = tokenizer.is_some_and(|tk| tk.is_eog(t));
        if eog && !self.params.ignore_eos {
            self.next = None;
            return Some(StopReason::Eog);
        }
        if let Some(c) = &mut self.constraint
            && let Err(e) = c.accept(t)
        {
            self.error = Some(e.into());
            self.next = None;
            return Some(StopReason::Cancelled);
        }
        self.generated.push(t);
        on_event(Event::Token {
            seq: self.seq,
            token: t,
            logprobs: self.extra.logprobs.and_then(|_| self.lp.get(j)),
        });
        if let Some(tk) = tokenizer {
            let piece = self.text.push(tk, t);
            let piece = unheal(&mut self.unheal, &piece);
            if !piece.is_empty() {
                let feed = self.stop.feed(piece);
                if !feed.emit.is_empty() {
                    on_event(Event::Text {
                        seq: self.seq,
                        text: feed.emit,
                    });
                }
                if feed.stopped {
                    return Some(StopReason::StopString);
                }
            }
        }
        let len = self.base + self.prompt.len() + self.generated.len();
        if self.constraint.as_ref().is_some_and(|c| c.is_finished()) {
            // The output is complete: nothing but its end may follow.
            self.next = None;
            Some(StopReason::Eog)
        } else if self.generated.len() >= self.params.max_tokens {
            Some(StopReason::MaxTokens)
        } else if self.params.context == ContextPolicy::Stop && len >= max_len {
            Some(StopReason::ContextFull)
        } else {
            None
        }
    }

    /// Reports the text the request still holds as it ends for `reason` (a stop string may
    /// complete in it, which then is the reason); returns the reason it ends for.
    pub(crate) fn finish(
        &mut self,
        reason: StopReason,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> StopReason {
        if reason == StopReason::StopString {
            return reason;
        }
        let rest = self.text.finish();
        let feed = self.stop.feed(unheal(&mut self.unheal, &rest));
        if !feed.emit.is_empty() {
            on_event(Event::Text {
                seq: self.seq,
                text: feed.emit,
            });
        }
        if feed.stopped {
            return StopReason::StopString;
        }
        let held = self.stop.finish();
        if !held.is_empty() {
            on_event(Event::Text {
                seq: self.seq,
                text: held,
            });
        }
        reason
    }

    /// Lets go of what the request held: its draft sequence, and its sequence unless kept.
    pub(crate) fn release(&self, engine: &mut Engine, drafter: Option<&mut Drafter>) {
        if let Some(d) = drafter {
            d.forget(self.seq);
        }
        if !self.params.keep {
            let _ = engine.free_sequence(self.seq);
        }
    }

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

/// What a pass did to a request ([`Request::take_pass`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// Its prompt is still being read, or nothing was sampled for it.
    Nothing,
    /// It ends without taking a token (a failed constraint, `max_tokens` 0, an embedding
    /// whose prompt is in).
    Ended(StopReason),
    /// It took tokens; `end` says why it ends, if it does, and `cut` how many of the
    /// positions the pass added (a draft's) go from its sequence.
    Tokens {
        end: Option<StopReason>,
        cut: Option<usize>,
    },
}

/// The tokens a healed reply may start with: every text token whose piece begins with
/// `heal`. None is an error (the text cannot be healed with this vocabulary).
fn healing_tokens(engine: &Engine, heal: &str) -> Result<Vec<u32>, RequestError> {
    let Some(tk) = engine.model().tokenizer() else {
        return Err(RequestError::HealWithoutTokenizer);
    };
    let allowed: Vec<u32> = (0..engine.n_vocab().min(tk.n_vocab()) as u32)
        .filter(|&t| !tk.is_control(t) && tk.token_to_piece(t).starts_with(heal.as_bytes()))
        .collect();
    if allowed.is_empty() {
        return Err(RequestError::NothingToHeal(heal.to_owned()));
    }
    Ok(allowed)
}
