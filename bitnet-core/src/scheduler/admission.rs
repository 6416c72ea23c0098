//! Which requests run: waiting requests are admitted in order while the KV pool can hold
//! all they may need (each reserves the blocks its prompt and `max_tokens` can fill, so a
//! running request never runs out of cache), starting from a leader's prompt or the longest
//! cached prefix; and under a shifting policy, room is made in running sequences before a
//! pass.

use std::collections::VecDeque;
use std::time::Instant;

use super::draft::Drafter;
use super::output::Event;
use super::policy::ContextPolicy;
use super::request::{Phase, Request};
use crate::engine::Engine;
use crate::error::CoreError;
use crate::kv::{KvError, SeqId};

/// Where a follower's leader is (see `SubmitOptions::after`).
#[derive(Debug, PartialEq, Eq)]
enum Leader {
    /// Still waiting or evaluating its prompt.
    NotReady,
    /// Its sequence holds the prompt: fork it.
    Ready(SeqId),
    /// Done or unknown: start like any request.
    Gone,
}

/// The requests waiting for room and those running, on one engine.
#[derive(Debug)]
pub(crate) struct Queues<'a> {
    pub(crate) engine: &'a mut Engine,
    pub(crate) waiting: &'a mut VecDeque<Request>,
    pub(crate) running: &'a mut Vec<Request>,
}

impl Queues<'_> {
    /// Whether the leader of a follower holding `prompt` has evaluated it.
    fn leader_state(&self, leader: SeqId, prompt: &[u32]) -> Leader {
        if let Some(r) = self.running.iter().find(|r| r.seq == leader) {
            let held = self.engine.sequence_tokens(leader).unwrap_or(&[]);
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
            .map(|r| self.engine.blocks_needed(r.seq, r.total).unwrap_or(0))
            .sum()
    }

    /// Blocks a new request may take.
    pub(crate) fn room(&self) -> usize {
        self.engine
            .available_blocks()
            .saturating_sub(self.outstanding_blocks())
    }

    /// Moves waiting requests to running, at most `max_running` in all, while the pool can
    /// hold all they may need. A request that can never be admitted (blocked by blocks that
    /// nothing running will free) ends with an error event; a kept sequence stays, empty,
    /// for its owner to free.
    pub(crate) fn admit(
        &mut self,
        max_running: usize,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), CoreError> {
        while self.running.len() < max_running {
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
            // An embedding that pools every token's row needs each of them evaluated.
            let shares = !matches!(front.params.context, ContextPolicy::HeavyHitters { .. })
                && !front.embed.as_ref().is_some_and(|e| e.reads_every_row());
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
                self.engine.share_prefix(l, seq, prompt_len - 1)?;
                prompt_len - 1
            } else if fresh && shares {
                // Never more than the policy lets the sequence hold.
                let prompt = front.prompt[..prompt_len.min(front.limit)].to_vec();
                self.engine.reuse_prefix(seq, &prompt)?
            } else {
                0
            };
            let room = self.room();
            let mut need = self.engine.blocks_needed(seq, total)?;
            if need > room && fresh && cached > 0 {
                // A partly matched block that another sequence also holds is copied at the
                // first write: one block more than starting without it. Whole matched
                // blocks cost what they save. Cut the match back to whole blocks, so a
                // sequence that fits the pool alone does not wait for a block its own match
                // keeps it from.
                cached = self.engine.trim_to_whole_blocks(seq)?;
                need = self.engine.blocks_needed(seq, total)?;
            }
            if need > self.room() {
                if fresh {
                    // Give the matched blocks back while waiting; matched again later.
                    self.engine.truncate(seq, 0)?;
                }
                if !self.running.is_empty() {
                    break;
                }
                // Nothing running will free a block. A request never needs more than the
                // pool (submit caps it at the context), so the rest is held by sequences
                // kept after their requests, and waiting would spin forever.
                let r = self.waiting.pop_front().expect("front exists");
                let error = CoreError::Kv(KvError::Full {
                    needed: r.total - r.base,
                    stats: self.engine.pool_stats(),
                });
                // A waiting request has no draft sequence.
                r.release(self.engine, None);
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

    /// Under a shifting policy, removes positions from every running sequence that has no
    /// room for what this step would give it (a decode token, or a prompt chunk as large as
    /// the batch). A shift that fails (the pool cannot give a private copy of a shared
    /// block) ends that request with an error.
    pub(crate) fn make_room(
        &mut self,
        mut drafter: Option<&mut Drafter>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) {
        let budget = self.engine.max_batch();
        let mut i = 0;
        while i < self.running.len() {
            let r = &self.running[i];
            let need = match r.phase {
                Phase::Decode => usize::from(r.next.is_some()),
                Phase::Prefill => (r.prompt.len() - r.fed).min(budget),
            };
            let (seq, policy, limit) = (r.seq, r.params.context, r.limit);
            match policy.make_room_in(self.engine, seq, need, limit) {
                Ok(removed) => self.running[i].discarded += removed,
                Err(error) => {
                    let r = self.running.remove(i);
                    r.release(self.engine, drafter.as_deref_mut());
                    on_event(Event::Error { seq, error });
                    continue;
                }
            }
            i += 1;
        }
    }
}
