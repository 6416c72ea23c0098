//! The [`Scheduler`] itself: its queues, the public API (submit, cancel, the sequence
//! operations a caller needs between requests) and [`Scheduler::step`], which plans a
//! pass, runs it and applies its results.

use std::cell::Cell;
use std::collections::VecDeque;
use std::time::Instant;

use super::admission::Queues;
use super::apply;
use super::draft::{self, Drafter};
use super::embed::{EmbedParams, EmbedState};
use super::output::{Event, StopReason};
use super::plan::{self, Plan};
use super::policy::ContextPolicy;
use super::request::{GenParams, Request, SubmitOptions};
use super::speculate::PassCosts;
use super::validate::RequestError;
use crate::engine::Engine;
use crate::error::CoreError;
use crate::kv::{KvError, KvSnapshot, SeqId};

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

/// Many generation (and embedding) requests on one [`Engine`], decoded together; see
/// [the scheduler's docs](crate::scheduler).
#[derive(Debug)]
pub struct Scheduler {
    engine: Engine,
    opts: SchedulerOptions,
    waiting: VecDeque<Request>,
    running: Vec<Request>,
    /// The pass being built (its memory reused from step to step).
    plan: Plan,
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
            plan: Plan::with_capacity(cap),
            finished: Vec::with_capacity(cap),
            drafter: None,
            pass_costs: PassCosts::new(),
        }
    }

    /// Sets the draft model that requests speculating with
    /// [`super::speculate::DraftSource::Model`] draw their drafts from: an engine over a
    /// smaller model with the same vocabulary (checked here: size, and every token's piece
    /// when both files have a tokenizer). Make it on the thread that runs the scheduler, as
    /// the target's engine.
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

    /// Positions one sequence may hold at most.
    pub fn max_seq_len(&self) -> usize {
        self.engine.max_seq_len()
    }

    /// The tokens sequence `seq` holds (empty for a sequence that is gone).
    pub fn held(&self, seq: SeqId) -> &[u32] {
        self.engine.sequence_tokens(seq).unwrap_or(&[])
    }

    /// Cuts a sequence kept by an earlier request to its first `len` positions.
    pub fn truncate(&mut self, seq: SeqId, len: usize) -> Result<(), KvError> {
        self.engine.truncate(seq, len)
    }

    /// Frees a sequence kept by an earlier request.
    pub fn free(&mut self, seq: SeqId) -> Result<(), KvError> {
        self.engine.free_sequence(seq)
    }

    /// Forgets the prompts kept for reuse (a new conversation, a warm-up's leftovers).
    pub fn clear_prefix_cache(&mut self) {
        self.engine.clear_prefix_cache();
    }

    /// The rows of the longest prefix of `tokens` the prefix cache holds, to save
    /// (`None`: it holds none); the cache is left as it was.
    pub fn export_cached(&mut self, tokens: &[u32]) -> Result<Option<KvSnapshot>, KvError> {
        self.engine.kv_mut().export_cached(tokens)
    }

    /// Puts saved rows into the prefix cache: a request whose prompt starts with their
    /// tokens then evaluates only the rest. Refused (the cache unchanged) when the blocks
    /// they need are not free of what running requests may still take. Returns the
    /// positions put back.
    pub fn import_cached(&mut self, snap: &KvSnapshot) -> Result<usize, CoreError> {
        let room = Queues {
            engine: &mut self.engine,
            waiting: &mut self.waiting,
            running: &mut self.running,
        }
        .room();
        let kv = self.engine.kv_mut();
        if snap.len().div_ceil(kv.block_tokens()) > room {
            return Err(KvError::Full {
                needed: snap.len(),
                stats: kv.pool_stats(),
            }
            .into());
        }
        let seq = kv.import(snap)?;
        kv.free_sequence(seq)?;
        Ok(snap.len())
    }

    /// Queues a new request for `prompt`; its sequence id names it in events. A request
    /// refused here ([`RequestError`]) leaves nothing behind.
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
        let seq = self.engine.new_sequence();
        match self.enqueue(seq, prompt, params, extra, false) {
            Ok(()) => Ok(seq),
            Err(e) => {
                let _ = self.engine.free_sequence(seq);
                Err(e)
            }
        }
    }

    /// Queues an embedding request: `tokens` (specials and all, as the tokenizer made them)
    /// evaluated from an empty sequence in the passes of the other requests, for their final
    /// normed hidden states, pooled and normalized as `params` say. Its id names it in
    /// events: [`Event::Embedding`] with the vectors, then `Done` (`Done` alone, with
    /// [`StopReason::Cancelled`], when it was cancelled). It waits for a place under
    /// `max_running` and KV room as any request does, and frees its sequence when done. A
    /// request refused here ([`RequestError`]: no tokens, an id past the vocabulary, more
    /// tokens than a sequence holds) leaves nothing behind.
    pub fn submit_embedding(
        &mut self,
        tokens: &[u32],
        params: EmbedParams,
    ) -> Result<SeqId, CoreError> {
        let seq = self.engine.new_sequence();
        // A prefill that generates nothing: the checks and the KV reservation of a request
        // with `max_tokens` 0.
        let prefill = GenParams {
            max_tokens: 0,
            ..GenParams::default()
        };
        let extra = SubmitOptions::default();
        match Request::new(&self.engine, seq, tokens, false, prefill, extra, false) {
            Ok(mut r) => {
                r.embed = Some(EmbedState::new(params));
                self.waiting.push_back(r);
                Ok(seq)
            }
            Err(e) => {
                let _ = self.engine.free_sequence(seq);
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
            return Err(RequestError::SharedContinuation.into());
        }
        if self.find(seq).is_some() {
            return Err(RequestError::SequenceBusy(seq).into());
        }
        if tokens.is_empty() {
            let Some(&last) = self.engine.sequence_tokens(seq)?.last() else {
                return Err(RequestError::EmptyPrompt.into());
            };
            return self.enqueue(seq, &[last], params, extra, true);
        }
        self.enqueue(seq, tokens, params, extra, false)
    }

    /// Checks a request and queues it. With `again`, `prompt` is the sequence's last token,
    /// evaluated again: it is cut from the cache only once everything has been checked, so
    /// a refused request leaves the sequence as it was.
    fn enqueue(
        &mut self,
        seq: SeqId,
        prompt: &[u32],
        params: GenParams,
        extra: SubmitOptions,
        again: bool,
    ) -> Result<(), CoreError> {
        let drafter = self.drafter.is_some();
        let r = Request::new(&self.engine, seq, prompt, again, params, extra, drafter)?;
        if let ContextPolicy::HeavyHitters { .. } = r.params.context {
            self.engine.track_attention_mass(seq, true)?;
        }
        if again {
            self.engine.truncate(seq, r.base)?;
        }
        self.waiting.push_back(r);
        Ok(())
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

    /// One scheduling step (see [the scheduler's docs](crate::scheduler)): plan a pass,
    /// run it, apply its results. Returns the number of tokens evaluated (0 when there was
    /// nothing to do).
    pub fn step(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> Result<usize, CoreError> {
        self.plan(on_event)?;
        if self.running.is_empty() {
            return Ok(0);
        }
        self.run(on_event)?;
        self.apply(on_event);
        Ok(self.plan.n_tokens())
    }

    /// Ends cancelled requests, admits waiting ones, makes room under shifting policies,
    /// proposes drafts and lays out the pass.
    fn plan(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> Result<(), CoreError> {
        // Cancelled requests end before any work is spent on them.
        for r in self.waiting.iter().filter(|r| r.cancelled) {
            on_event(Event::Done {
                seq: r.seq,
                stats: r.stats(StopReason::Cancelled),
            });
        }
        let engine = &mut self.engine;
        self.waiting.retain(|r| {
            if r.cancelled {
                // A waiting request has no draft sequence.
                r.release(engine, None);
            }
            !r.cancelled
        });
        self.finished.clear();
        for (i, r) in self.running.iter().enumerate() {
            if r.cancelled {
                self.finished.push((i, StopReason::Cancelled));
            }
        }
        self.retire(on_event);
        let mut queues = Queues {
            engine: &mut self.engine,
            waiting: &mut self.waiting,
            running: &mut self.running,
        };
        queues.admit(self.opts.max_running, on_event)?;
        queues.make_room(self.drafter.as_mut(), on_event);
        if self.running.is_empty() {
            return Ok(());
        }
        let drafter = self.drafter.as_mut();
        plan::propose_drafts(&mut self.running, &self.engine, drafter, &self.pass_costs);
        self.plan.build(&mut self.running, &self.engine);
        Ok(())
    }

    /// Runs the planned pass, each request sampling its rows as their logits come. On a
    /// failure nothing was committed: the pass's requests end with the error.
    fn run(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> Result<(), CoreError> {
        let items = self.plan.items(&self.running);
        let (running, item_req) = (&mut self.running, &self.plan.item_req);
        let t_sample = Cell::new(0.0f64);
        let t_pass = Instant::now();
        let result = self.engine.forward(&items, |item, row, values| {
            let r = &mut running[item_req[item]];
            if let Some(e) = &mut r.embed {
                // A hidden row of an embedding request: nothing to sample.
                e.take_row(values);
                return;
            }
            let t = Instant::now();
            r.sample(row, values);
            t_sample.set(t_sample.get() + t.elapsed().as_secs_f64());
        });
        drop(items);
        // A pass over one decode item alone times what a verification of its length costs
        // (its rows' sampling included: a verification samples each of them).
        if let Some(n) = self.plan.lone_decode(&self.running) {
            self.pass_costs.record(n, t_pass.elapsed().as_secs_f64());
        }
        self.engine.add_sampling_time(t_sample.get());
        let Err(e) = result else { return Ok(()) };
        let mut seen: Vec<usize> = self.plan.item_req.clone();
        seen.sort_unstable();
        seen.dedup();
        for &i in seen.iter().rev() {
            let r = self.running.remove(i);
            r.release(&mut self.engine, self.drafter.as_mut());
            on_event(Event::Error {
                seq: r.seq,
                error: CoreError::Unsupported(format!("forward pass failed: {e}")),
            });
        }
        Err(e)
    }

    /// Advances every request of the pass and retires those that ended.
    fn apply(&mut self, on_event: &mut dyn FnMut(Event<'_>)) {
        let (plan, running, engine) = (&self.plan, &mut self.running, &mut self.engine);
        apply::take_pass(plan, running, engine, &mut self.finished, on_event);
        self.retire(on_event);
    }

    fn retire(&mut self, on_event: &mut dyn FnMut(Event<'_>)) {
        let drafter = self.drafter.as_mut();
        let (running, engine) = (&mut self.running, &mut self.engine);
        apply::retire(&mut self.finished, running, engine, drafter, on_event);
    }
}
