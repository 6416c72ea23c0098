//! The scheduler: many generation requests on one [`Engine`], decoded together.
//!
//! [`Scheduler::submit`] queues a prompt with its own sampler, seed, stop strings and
//! limits and returns the sequence's id; [`Scheduler::step`] admits waiting requests while
//! the KV pool has room for them (each reserves the blocks its prompt and `max_tokens`
//! can fill, so a running request never runs out of cache), builds one batch with a decode
//! token of every running request plus prefill chunks of new ones under the engine's
//! per-pass token budget (a long prompt is spread over several steps and never stalls the
//! others), runs the forward pass, samples, and reports events: text that is whole UTF-8
//! and free of stop strings, then `Done` with the stop reason and figures.
//! [`Scheduler::cancel`] takes effect at the next step, also during a long prefill.
//!
//! A request may keep its sequence when done (`keep`): a chat continues it with
//! [`Scheduler::submit_on`], evaluating only the new turn's tokens. Otherwise the
//! sequence is freed and its blocks stay in the prefix cache for the next request that
//! starts with the same tokens.
//!
//! A server asks for more with [`Scheduler::submit_with`]: each sampled token's log
//! probability and the most likely alternatives ([`Event::Token`]), and requests that
//! follow a leader with the same prompt (OpenAI's `n`): a follower waits until the leader's
//! prompt is evaluated, then forks the leader's sequence, so the prompt's KV is computed
//! once and shared.
//!
//! A request may speculate ([`GenParams::speculate`], [`speculate`]): its decode item then
//! carries the pending token and a draft (from prompt lookup or the draft model set with
//! [`Scheduler::set_draft`]) with every row's logits, in the same batch as the other
//! requests' tokens; the rows are sampled in order while they agree with the draft, and the
//! positions past the first disagreement are cut from the sequence.

mod draft;
mod generate;
mod output;
mod policy;
mod request;
pub mod speculate;

use std::collections::VecDeque;
use std::time::Instant;

use crate::engine::{BatchItem, Engine, Logits};
use crate::error::CoreError;
use crate::kv::{KvError, SeqId};
use crate::sampling::{Sampler, StopMatcher};
use crate::tokenizer::TextStream;

use draft::{DraftJob, Drafter};
pub use generate::{generate, generate_until, warm_up};
pub use output::{Event, GenStats, StopReason, TokenLogprobs};
use output::{log_probs, unheal};
pub use policy::{ContextMode, ContextPolicy, MIN_HEAVY, heavy_hitter_batch, heavy_hitter_victims};
pub use request::{GenParams, SubmitOptions};
use request::{Phase, Request};
pub use speculate::{DraftSource, SpecParams};
use speculate::{PassCosts, SpecState};

/// Limits of a [`Scheduler`].
#[derive(Clone, Debug)]
pub struct SchedulerOptions {
    /// Requests decoded together at most (llama.cpp's `--parallel`).
    pub max_running: usize,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions { max_running: 64 }
    }
}

/// Where a follower's leader is (see [`SubmitOptions::after`]).
#[derive(Debug, PartialEq, Eq)]
enum Leader {
    /// Still waiting or evaluating its prompt.
    NotReady,
    /// Its sequence holds the prompt: fork it.
    Ready(SeqId),
    /// Done or unknown: start like any request.
    Gone,
}

/// See the module docs.
#[derive(Debug)]
pub struct Scheduler {
    engine: Engine,
    opts: SchedulerOptions,
    waiting: VecDeque<Request>,
    running: Vec<Request>,
    /// Tokens of the batch being built, and the request of each item.
    tok_buf: Vec<u32>,
    item_req: Vec<usize>,
    spans: Vec<(usize, usize, Logits)>,
    /// Finished requests' indices in `running` (reused each step).
    finished: Vec<(usize, StopReason)>,
    /// The draft model of speculative decoding, when one is set.
    drafter: Option<Drafter>,
    /// What passes over one decode item of n positions cost (the draft length's cost).
    pass_costs: PassCosts,
}

impl Scheduler {
    pub fn new(engine: Engine, opts: SchedulerOptions) -> Scheduler {
        let cap = engine.max_batch();
        Scheduler {
            engine,
            opts,
            waiting: VecDeque::new(),
            running: Vec::new(),
            tok_buf: Vec::with_capacity(cap),
            item_req: Vec::with_capacity(cap),
            spans: Vec::with_capacity(cap),
            finished: Vec::with_capacity(cap),
            drafter: None,
            pass_costs: PassCosts::new(),
        }
    }

    /// Sets the draft model that requests speculating with [`DraftSource::Model`] draw
    /// their drafts from: an engine over a smaller model with the same vocabulary (checked
    /// here: size, and every token's piece when both files have a tokenizer). Make it on
    /// the thread that runs the scheduler, as the target's engine.
    pub fn set_draft(&mut self, draft: Engine) -> Result<(), CoreError> {
        draft::check_vocabulary(&self.engine, &draft)?;
        if !self.running.is_empty() || !self.waiting.is_empty() {
            return Err(CoreError::InvalidOption {
                option: "model_draft",
                reason: "the draft model is set before any request is submitted".into(),
            });
        }
        self.drafter = Some(Drafter::new(draft));
        Ok(())
    }

    /// The draft model's engine, when one is set.
    pub fn draft_engine(&self) -> Option<&Engine> {
        self.drafter.as_ref().map(Drafter::engine)
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// Requests waiting for room.
    pub fn n_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Requests being prefilled or decoded.
    pub fn n_running(&self) -> usize {
        self.running.len()
    }

    /// Whether nothing is waiting or running.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    /// Queues a new request for `prompt`; its sequence id names it in events.
    pub fn submit(&mut self, prompt: &[u32], params: GenParams) -> Result<SeqId, CoreError> {
        self.submit_with(prompt, params, SubmitOptions::default())
    }

    /// [`Scheduler::submit`] with a server's extras (log probabilities, a shared prompt).
    pub fn submit_with(
        &mut self,
        prompt: &[u32],
        params: GenParams,
        extra: SubmitOptions,
    ) -> Result<SeqId, CoreError> {
        let seq = self.engine.kv_mut().new_sequence();
        match self.enqueue(seq, prompt, params, extra, false) {
            Ok(()) => Ok(seq),
            Err(e) => {
                let _ = self.engine.kv_mut().free_sequence(seq);
                Err(e)
            }
        }
    }

    /// Queues more tokens (a new turn) on a sequence kept by an earlier request; only
    /// `tokens` are evaluated. An empty `tokens` generates straight from the sequence's
    /// last token (which is then evaluated again: its logits were not kept).
    pub fn submit_on(
        &mut self,
        seq: SeqId,
        tokens: &[u32],
        params: GenParams,
    ) -> Result<(), CoreError> {
        self.submit_on_with(seq, tokens, params, SubmitOptions::default())
    }

    /// [`Scheduler::submit_on`] with extras (log probabilities, token healing); a shared
    /// prompt (`after`) does not apply to a continuation and is refused.
    pub fn submit_on_with(
        &mut self,
        seq: SeqId,
        tokens: &[u32],
        params: GenParams,
        extra: SubmitOptions,
    ) -> Result<(), CoreError> {
        if extra.after.is_some() {
            return Err(CoreError::InvalidOption {
                option: "after",
                reason: "a continuation of a kept sequence cannot share another prompt".into(),
            });
        }
        if self.find(seq).is_some() {
            return Err(CoreError::InvalidOption {
                option: "sequence",
                reason: format!("sequence {seq} already has a request"),
            });
        }
        if tokens.is_empty() {
            let Some(&last) = self.engine.kv().sequence(seq)?.tokens().last() else {
                return Err(CoreError::EmptyInput);
            };
            return self.enqueue(seq, &[last], params, extra, true);
        }
        self.enqueue(seq, tokens, params, extra, false)
    }

    /// Checks a request and queues it. With `again`, `prompt` is the sequence's last token,
    /// evaluated again: it is cut from the cache only once everything else has been checked,
    /// so a refused request leaves the sequence as it was.
    fn enqueue(
        &mut self,
        seq: SeqId,
        prompt: &[u32],
        params: GenParams,
        extra: SubmitOptions,
        again: bool,
    ) -> Result<(), CoreError> {
        if prompt.is_empty() {
            return Err(CoreError::EmptyInput);
        }
        self.engine.check_token_ids(prompt)?;
        let n_vocab = self.engine.n_vocab();
        let base = self.engine.kv().sequence(seq)?.len() - usize::from(again);
        let max_len = self.engine.kv().max_seq_len();
        params.context.validate(max_len)?;
        let limit = params.context.limit(max_len);
        if let ContextPolicy::HeavyHitters { .. } = params.context {
            self.engine.kv_mut().track_attention_mass(seq, true)?;
        }
        // The last prompt position must leave room for nothing more: generation then
        // stops at once with "context full", but a prompt past the cache can never run.
        // A shifting policy reads a longer prompt through its window.
        if params.context == ContextPolicy::Stop && base + prompt.len() > max_len {
            return Err(CoreError::ContextOverflow {
                n_past: base,
                n_new: prompt.len(),
                n_ctx: max_len,
            });
        }
        if base > limit {
            return Err(CoreError::InvalidOption {
                option: "context policy",
                reason: format!(
                    "the sequence holds {base} positions, more than the policy's {limit}"
                ),
            });
        }
        let total = (base + prompt.len())
            .saturating_add(params.max_tokens)
            .min(limit);
        let mut sampler = Sampler::new(params.sampler.clone(), n_vocab)?;
        let constraint = params.constraint.as_ref().map(|c| c.start());
        // A constrained output starts where the grammar says, not with healed text.
        let heal = if constraint.is_some() {
            String::new()
        } else {
            extra.heal.clone()
        };
        if !heal.is_empty() {
            sampler.restrict_next(self.healing_tokens(&heal)?);
        }
        let spec = match &params.speculate {
            Some(p) => {
                p.validate(self.engine.max_batch())?;
                if p.source == DraftSource::Model && self.drafter.is_none() {
                    return Err(CoreError::InvalidOption {
                        option: "model_draft",
                        reason: "the request speculates with a draft model and none is loaded"
                            .into(),
                    });
                }
                // Drafts are verified only where a row's token needs nothing but the row:
                // no constraint (its state would have to follow each row), no shifting.
                let plain = params.constraint.is_none() && params.context == ContextPolicy::Stop;
                plain.then(|| SpecState::new(p.clone()))
            }
            None => None,
        };
        let stop = StopMatcher::new(params.stop.clone());
        if again {
            self.engine.kv_mut().truncate(seq, base)?;
        }
        let mut history = Vec::with_capacity(total.min(1 << 20));
        history.extend_from_slice(self.engine.kv().sequence(seq)?.tokens());
        history.extend_from_slice(prompt);
        self.waiting.push_back(Request {
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
            stop,
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
            cancelled: false,
            t_admit: None,
            t_first: None,
            prompt_secs: 0.0,
        });
        Ok(())
    }

    /// The tokens a healed reply may start with: every text token whose piece begins with
    /// `heal`. None is an error (the text cannot be healed with this vocabulary).
    fn healing_tokens(&self, heal: &str) -> Result<Vec<u32>, CoreError> {
        let model = self.engine.model();
        let Some(tk) = model.tokenizer() else {
            return Err(CoreError::InvalidOption {
                option: "heal",
                reason: "token healing needs the model's tokenizer".into(),
            });
        };
        let allowed: Vec<u32> = (0..self.engine.n_vocab().min(tk.n_vocab()) as u32)
            .filter(|&t| !tk.is_control(t) && tk.token_to_piece(t).starts_with(heal.as_bytes()))
            .collect();
        if allowed.is_empty() {
            return Err(CoreError::InvalidOption {
                option: "heal",
                reason: format!("no token of the vocabulary begins with {heal:?}"),
            });
        }
        Ok(allowed)
    }

    fn find(&self, seq: SeqId) -> Option<&Request> {
        self.running
            .iter()
            .chain(self.waiting.iter())
            .find(|r| r.seq == seq)
    }

    /// Stops request `seq` at the next step (a waiting one never starts). Its `Done`
    /// event says [`StopReason::Cancelled`]; returns false if no such request exists.
    pub fn cancel(&mut self, seq: SeqId) -> bool {
        match self
            .running
            .iter_mut()
            .chain(self.waiting.iter_mut())
            .find(|r| r.seq == seq)
        {
            Some(r) => {
                r.cancelled = true;
                true
            }
            None => false,
        }
    }

    /// Whether the leader of a follower holding `prompt` has evaluated it.
    fn leader_state(&self, leader: SeqId, prompt: &[u32]) -> Leader {
        if let Some(r) = self.running.iter().find(|r| r.seq == leader) {
            let held = self
                .engine
                .kv()
                .sequence(leader)
                .map_or(&[][..], |s| s.tokens());
            if r.phase == Phase::Prefill {
                return Leader::NotReady;
            }
            if held.len() >= prompt.len() && held[..prompt.len()] == *prompt {
                return Leader::Ready(leader);
            }
            return Leader::Gone;
        }
        if self.waiting.iter().any(|r| r.seq == leader) {
            return Leader::NotReady;
        }
        // Done (or cancelled): its blocks are in the prefix cache.
        Leader::Gone
    }

    /// Blocks the running requests may still take.
    fn outstanding_blocks(&self) -> usize {
        self.running
            .iter()
            .map(|r| self.engine.kv().blocks_needed(r.seq, r.total).unwrap_or(0))
            .sum()
    }

    /// Moves waiting requests to running while the pool can hold all they may need.
    /// A request that can never be admitted (blocked by blocks that nothing running will
    /// free) ends with an error event; a kept sequence stays, empty, for its owner to free.
    fn admit(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> Result<(), CoreError> {
        while self.running.len() < self.opts.max_running {
            let Some(front) = self.waiting.front() else {
                break;
            };
            let seq = front.seq;
            let fresh = front.base == 0;
            let prompt_len = front.prompt.len();
            // Under heavy-hitter eviction a sequence starts from nothing of another's: which
            // positions it keeps follows the attention its own evaluation gave them (a
            // reused prefix has none, so the text would depend on what the cache held), and
            // its evictions rewrite blocks that sharing would have left to others.
            let shares = !matches!(front.params.context, ContextPolicy::HeavyHitters { .. });
            let leader = match front.extra.after {
                Some(l) if fresh && shares => self.leader_state(l, &front.prompt),
                _ => Leader::Gone,
            };
            if leader == Leader::NotReady {
                // Admitted in order: the leader runs ahead, its prompt is done in a step or
                // a few.
                break;
            }
            // A new sequence starts from its leader's prompt, or the longest cached prefix.
            let total = front.total;
            let mut cached = if let Leader::Ready(l) = leader {
                self.engine.kv_mut().share_prefix(l, seq, prompt_len - 1)?;
                prompt_len - 1
            } else if fresh && shares {
                // Never more than the policy lets the sequence hold.
                let prompt = front.prompt[..prompt_len.min(front.limit)].to_vec();
                self.engine.kv_mut().reuse_prefix(seq, &prompt)?
            } else {
                0
            };
            let room = |engine: &Engine, outstanding| {
                engine.kv().available_blocks().saturating_sub(outstanding)
            };
            let outstanding = self.outstanding_blocks();
            let mut need = self.engine.kv().blocks_needed(seq, total)?;
            if need > room(&self.engine, outstanding) && fresh && cached > 0 {
                // A partly matched block that another sequence also holds is copied at the
                // first write: one block more than starting without it. Whole matched
                // blocks cost what they save. Cut the match back to whole blocks, so a
                // sequence that fits the pool alone does not wait for a block its own match
                // keeps it from.
                cached = self.engine.kv_mut().trim_to_whole_blocks(seq)?;
                need = self.engine.kv().blocks_needed(seq, total)?;
            }
            if need > room(&self.engine, outstanding) {
                if fresh {
                    // Give the matched blocks back while waiting; matched again later.
                    self.engine.kv_mut().truncate(seq, 0)?;
                }
                if !self.running.is_empty() {
                    break;
                }
                // Nothing running will free a block. A request never needs more than the
                // pool (`enqueue` caps it at the context), so the rest is held by sequences
                // kept after their requests, and waiting would spin forever.
                let r = self.waiting.pop_front().expect("front exists");
                let error = CoreError::Kv(KvError::Full {
                    needed: r.total - r.base,
                    stats: self.engine.kv().pool_stats(),
                });
                self.release(&r);
                on_event(Event::Error { seq: r.seq, error });
                continue;
            }
            let mut r = self.waiting.pop_front().expect("front exists");
            r.fed = cached;
            r.cached = cached;
            debug_assert!(cached < prompt_len);
            r.t_admit = Some(Instant::now());
            self.running.push(r);
        }
        Ok(())
    }

    /// One scheduling step; see the module docs. Returns the number of tokens evaluated
    /// (0 when there was nothing to do).
    pub fn step(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> Result<usize, CoreError> {
        // Cancelled requests end before any work is spent on them.
        for r in self.waiting.iter().filter(|r| r.cancelled) {
            on_event(Event::Done {
                seq: r.seq,
                stats: r.stats(StopReason::Cancelled),
            });
        }
        let mut i = 0;
        while i < self.waiting.len() {
            if self.waiting[i].cancelled {
                let r = self.waiting.remove(i).expect("index in range");
                self.release(&r);
            } else {
                i += 1;
            }
        }
        self.finished.clear();
        for (i, r) in self.running.iter().enumerate() {
            if r.cancelled {
                self.finished.push((i, StopReason::Cancelled));
            }
        }
        self.retire(on_event);
        self.admit(on_event)?;
        self.make_room(on_event);
        if self.running.is_empty() {
            return Ok(0);
        }

        // The batch: one decode token per generating request (and its draft, when it
        // speculates), then prompt chunks.
        let budget = self.engine.max_batch();
        self.propose_drafts();
        self.tok_buf.clear();
        self.item_req.clear();
        self.spans.clear();
        for (i, r) in self.running.iter_mut().enumerate() {
            r.sampled.clear();
            r.rejected = false;
            if let (Phase::Decode, Some(t)) = (&r.phase, r.next)
                && self.tok_buf.len() < budget
            {
                if self.tok_buf.len() + 1 + r.drafts.len() > budget {
                    r.drafts.clear();
                }
                let logits = if r.drafts.is_empty() {
                    Logits::Last
                } else {
                    Logits::All
                };
                self.spans
                    .push((self.tok_buf.len(), 1 + r.drafts.len(), logits));
                self.tok_buf.push(t);
                self.tok_buf.extend_from_slice(&r.drafts);
                self.item_req.push(i);
            }
        }
        for (i, r) in self.running.iter().enumerate() {
            let left = budget - self.tok_buf.len();
            if r.phase != Phase::Prefill || left == 0 {
                continue;
            }
            let held = self.engine.kv().sequence(r.seq).map_or(0, |s| s.len());
            let n = (r.prompt.len() - r.fed)
                .min(left)
                .min(r.limit.saturating_sub(held));
            if n == 0 {
                continue;
            }
            let ends = r.fed + n == r.prompt.len();
            let logits = if ends { Logits::Last } else { Logits::None };
            self.spans.push((self.tok_buf.len(), n, logits));
            self.tok_buf.extend_from_slice(&r.prompt[r.fed..r.fed + n]);
            self.item_req.push(i);
        }
        let n_tokens = self.tok_buf.len();
        let items: Vec<BatchItem<'_>> = self
            .spans
            .iter()
            .zip(&self.item_req)
            .map(|(&(start, n, logits), &i)| BatchItem {
                seq: self.running[i].seq,
                tokens: &self.tok_buf[start..start + n],
                logits,
            })
            .collect();
        let Scheduler {
            engine,
            running,
            item_req,
            ..
        } = self;
        let t_sample = std::cell::Cell::new(0.0f64);
        let t_pass = Instant::now();
        let result = engine.forward(&items, |item, row, logits| {
            let t = Instant::now();
            let r = &mut running[item_req[item]];
            if r.rejected {
                // Past a draft token the target did not agree with: nothing to sample.
                return;
            }
            let token = match &mut r.constraint {
                None => r.sampler.sample(logits, &r.history),
                Some(c) => match c.compute_mask() {
                    Ok(mask) => r.sampler.sample_masked(logits, &r.history, mask),
                    Err(e) => {
                        r.error = Some(e.into());
                        0
                    }
                },
            };
            if let Some(k) = r.extra.logprobs {
                let i = r.sampled.len();
                if r.lp.len() <= i {
                    r.lp.resize_with(i + 1, TokenLogprobs::default);
                }
                log_probs(logits, token, k, &mut r.lp[i]);
            }
            // The penalties of the next row see this token.
            r.history.push(token);
            r.sampled.push(token);
            // A decode item's row `row` predicts draft token `row`; a prompt chunk asks
            // for its last row only.
            let agrees = r.phase == Phase::Decode && r.drafts.get(row) == Some(&token);
            r.rejected = !agrees;
            t_sample.set(t_sample.get() + t.elapsed().as_secs_f64());
        });
        drop(items);
        // A pass over one decode item alone times what a verification of its length costs.
        if let [(_, n, _)] = self.spans[..]
            && self.running[self.item_req[0]].phase == Phase::Decode
        {
            // Its rows' sampling included: a verification samples each of them.
            self.pass_costs.record(n, t_pass.elapsed().as_secs_f64());
        }
        let engine = &mut self.engine;
        engine.add_sampling_time(t_sample.get());
        if let Err(e) = result {
            // Nothing was committed for this batch: end its requests with the error.
            let mut seen: Vec<usize> = self.item_req.clone();
            seen.sort_unstable();
            seen.dedup();
            for &i in seen.iter().rev() {
                let r = self.running.remove(i);
                self.release(&r);
                on_event(Event::Error {
                    seq: r.seq,
                    error: CoreError::Unsupported(format!("forward pass failed: {e}")),
                });
            }
            return Err(e);
        }

        // Advance every request of the batch.
        let tok = self.engine.model().clone();
        let tokenizer = tok.tokenizer();
        let max_len = self.engine.kv().max_seq_len();
        for (k, &(_, n, _)) in self.spans.iter().enumerate() {
            let i = self.item_req[k];
            let r = &mut self.running[i];
            if r.phase == Phase::Prefill {
                r.fed += n;
                if r.fed < r.prompt.len() {
                    continue;
                }
                r.phase = Phase::Decode;
                r.prompt_secs = r.t_admit.map_or(0.0, |t| t.elapsed().as_secs_f64());
                r.t_first = Some(Instant::now());
            }
            if r.sampled.is_empty() {
                continue;
            }
            if r.error.is_some() {
                r.next = None;
                self.finished.push((i, StopReason::Cancelled));
                continue;
            }
            if r.params.max_tokens == 0 {
                // Only the prompt was asked for (`-n 0`): it is in the cache, nothing more.
                r.next = None;
                self.finished.push((i, StopReason::MaxTokens));
                continue;
            }
            let sampled = std::mem::take(&mut r.sampled);
            let mut used = 0;
            for (j, &t) in sampled.iter().enumerate() {
                used += 1;
                r.next = Some(t);
                if let Some(reason) = Self::accept_token(r, j, t, tokenizer, max_len, on_event) {
                    self.finished.push((i, reason));
                    break;
                }
            }
            if !r.drafts.is_empty() {
                let proposed = r.drafts.len();
                if let Some(s) = &mut r.spec {
                    s.record(proposed, sampled.len() - 1);
                }
                // The sequence holds the pending token and the whole draft: keep the
                // pending token and the drafts that were taken as sampled tokens before
                // the last one used (that one is pending now, or ended the request).
                let held = self.engine.kv().sequence(r.seq).map_or(0, |s| s.len());
                let keep = held - proposed + (used - 1);
                r.drafts.clear();
                if let Err(e) = self.engine.kv_mut().truncate(r.seq, keep) {
                    r.error = Some(e.into());
                    r.next = None;
                    self.finished.push((i, StopReason::Cancelled));
                }
            }
            r.sampled = sampled;
            r.sampled.clear();
        }
        self.retire(on_event);
        Ok(n_tokens)
    }

    /// Takes sampled token `t` (row `j` of the step's samples) into request `r`: an
    /// end-of-generation token ends it (unless ignored), else the token joins the output and
    /// its text is reported; returns why the request ends, if it does.
    fn accept_token(
        r: &mut Request,
        j: usize,
        t: u32,
        tokenizer: Option<&crate::tokenizer::Tokenizer>,
        max_len: usize,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Option<StopReason> {
        let eog = tokenizer.is_some_and(|tk| tk.is_eog(t));
        if eog && !r.params.ignore_eos {
            r.next = None;
            return Some(StopReason::Eog);
        }
        if let Some(c) = &mut r.constraint
            && let Err(e) = c.accept(t)
        {
            r.error = Some(e.into());
            r.next = None;
            return Some(StopReason::Cancelled);
        }
        r.generated.push(t);
        on_event(Event::Token {
            seq: r.seq,
            token: t,
            logprobs: r.extra.logprobs.and_then(|_| r.lp.get(j)),
        });
        if let Some(tk) = tokenizer {
            let piece = r.text.push(tk, t);
            let piece = unheal(&mut r.unheal, &piece);
            if !piece.is_empty() {
                let feed = r.stop.feed(piece);
                if !feed.emit.is_empty() {
                    on_event(Event::Text {
                        seq: r.seq,
                        text: feed.emit,
                    });
                }
                if feed.stopped {
                    return Some(StopReason::StopString);
                }
            }
        }
        let len = r.base + r.prompt.len() + r.generated.len();
        if r.constraint.as_ref().is_some_and(|c| c.is_finished()) {
            // The output is complete: nothing but its end may follow.
            r.next = None;
            Some(StopReason::Eog)
        } else if r.generated.len() >= r.params.max_tokens {
            Some(StopReason::MaxTokens)
        } else if r.params.context == ContextPolicy::Stop && len >= max_len {
            Some(StopReason::ContextFull)
        } else {
            None
        }
    }

    /// Fills the draft of every decoding request that speculates this step, within the
    /// pass's budget (at most half of what the decode tokens leave, so prompt chunks of
    /// new requests still move) and each request's own room (its reserved positions and
    /// `max_tokens`). Draft-model failures are not the request's: it decodes without a
    /// draft and stops speculating.
    fn propose_drafts(&mut self) {
        let budget = self.engine.max_batch();
        let decoding = self
            .running
            .iter()
            .filter(|r| r.phase == Phase::Decode && r.next.is_some())
            .count();
        let mut room = budget.saturating_sub(decoding) / 2;
        // (request, draft length) of the requests the draft model proposes for.
        let mut model_jobs: Vec<(usize, usize)> = Vec::new();
        for (i, r) in self.running.iter_mut().enumerate() {
            r.drafts.clear();
            let (Phase::Decode, Some(_), Some(spec)) = (&r.phase, r.next, &mut r.spec) else {
                continue;
            };
            let held = self.engine.kv().sequence(r.seq).map_or(0, |s| s.len());
            // The pass adds the pending token and the draft to the sequence; a verified
            // pass yields one token more than the draft.
            let positions = r.total.saturating_sub(held + 1);
            let tokens = r.params.max_tokens.saturating_sub(r.generated.len() + 1);
            // A draft model's tokens cost their own passes besides the verification's.
            let draft_cost = match (&spec.params.source, &self.drafter) {
                (DraftSource::Model, Some(d)) => {
                    match (d.token_secs(), self.pass_costs.decode_secs()) {
                        (Some(td), Some(t1)) => td / t1,
                        _ => speculate::DEFAULT_POSITION_COST,
                    }
                }
                _ => 0.0,
            };
            let costs = &self.pass_costs;
            let want = spec.wanted(positions.min(tokens).min(room), |n| {
                costs.cost(n) + draft_cost * (n - 1) as f64
            });
            if want == 0 {
                continue;
            }
            match spec.params.source {
                DraftSource::Lookup { ngram } => {
                    speculate::lookup_draft(&r.history, ngram, want, &mut r.drafts);
                    if !spec.worth_verifying(r.drafts.len()) {
                        r.drafts.clear();
                    }
                    room -= r.drafts.len();
                }
                DraftSource::Model => {
                    model_jobs.push((i, want));
                    room -= want;
                }
            }
        }
        if model_jobs.is_empty() {
            return;
        }
        let Some(drafter) = &mut self.drafter else {
            return;
        };
        let kv = self.engine.kv();
        let mut jobs: Vec<DraftJob<'_>> = model_jobs
            .iter()
            .map(|&(i, want)| {
                let r = &self.running[i];
                DraftJob {
                    target: r.seq,
                    context: kv.sequence(r.seq).map_or(&[][..], |s| s.tokens()),
                    last: r.next.expect("decoding"),
                    want,
                    p_min: r.spec.as_ref().map_or(1.0, |s| s.params.p_min),
                    out: Vec::new(),
                }
            })
            .collect();
        let failed = drafter.propose(&mut jobs).is_err();
        let outs: Vec<Vec<u32>> = jobs.into_iter().map(|j| j.out).collect();
        for (out, &(i, _)) in outs.into_iter().zip(&model_jobs) {
            let Some(spec) = &mut self.running[i].spec else {
                continue;
            };
            if failed {
                spec.stop();
            } else if spec.worth_verifying(out.len()) {
                self.running[i].drafts = out;
            }
        }
    }

    /// Under a shifting policy, removes positions from every running sequence that has no
    /// room for what this step would give it (a decode token, or a prompt chunk as large as
    /// the batch). A shift that fails (the pool cannot give a private copy of a shared block)
    /// ends that request with an error.
    fn make_room(&mut self, on_event: &mut dyn FnMut(Event<'_>)) {
        let budget = self.engine.max_batch();
        let mut i = 0;
        while i < self.running.len() {
            let r = &self.running[i];
            let need = match r.phase {
                Phase::Decode => usize::from(r.next.is_some()),
                Phase::Prefill => (r.prompt.len() - r.fed).min(budget),
            };
            let (seq, policy, limit) = (r.seq, r.params.context, r.limit);
            match policy.make_room_in(&mut self.engine, seq, need, limit) {
                Ok(removed) => self.running[i].discarded += removed,
                Err(error) => {
                    let r = self.running.remove(i);
                    self.release(&r);
                    on_event(Event::Error { seq, error });
                    continue;
                }
            }
            i += 1;
        }
    }

    /// Ends the requests listed in `finished`: flushes their text, reports `Done`, and
    /// frees (or keeps) their sequences.
    fn retire(&mut self, on_event: &mut dyn FnMut(Event<'_>)) {
        if self.finished.is_empty() {
            return;
        }
        self.finished
            .sort_unstable_by_key(|&(i, _)| std::cmp::Reverse(i));
        self.finished.dedup_by_key(|&mut (i, _)| i);
        let finished = std::mem::take(&mut self.finished);
        for &(i, reason) in &finished {
            let mut r = self.running.remove(i);
            if let Some(error) = r.error.take() {
                on_event(Event::Error { seq: r.seq, error });
                self.release(&r);
                continue;
            }
            let mut reason = reason;
            if reason != StopReason::StopString {
                let rest = r.text.finish();
                let feed = r.stop.feed(unheal(&mut r.unheal, &rest));
                if !feed.emit.is_empty() {
                    on_event(Event::Text {
                        seq: r.seq,
                        text: feed.emit,
                    });
                }
                if feed.stopped {
                    reason = StopReason::StopString;
                } else {
                    let held = r.stop.finish();
                    if !held.is_empty() {
                        on_event(Event::Text {
                            seq: r.seq,
                            text: held,
                        });
                    }
                }
            }
            on_event(Event::Done {
                seq: r.seq,
                stats: r.stats(reason),
            });
            self.release(&r);
        }
        self.finished = finished;
        self.finished.clear();
    }

    fn release(&mut self, r: &Request) {
        if let Some(d) = &mut self.drafter {
            d.forget(r.seq);
        }
        if !r.params.keep {
            let _ = self.engine.kv_mut().free_sequence(r.seq);
        }
    }
}
