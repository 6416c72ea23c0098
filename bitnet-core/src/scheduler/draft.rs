//! The draft model of speculative decoding: a second, smaller [`Engine`] with the target's
//! vocabulary, holding one sequence per speculating request. Each step it catches its
//! sequences up with the target's (the tokens accepted since the last step and the pending
//! one; a fresh sequence starts from its own prefix cache, then reads the rest in chunks),
//! then proposes greedy tokens for all of them together, one draft pass per position,
//! until each has what it asked for or meets a token its draft probability puts below
//! `p_min`. Rejected draft positions are cut from its sequences at the next catch-up.

use std::collections::HashMap;

use crate::engine::{BatchItem, Engine, Logits};
use crate::error::CoreError;
use crate::kv::SeqId;

/// What one request wants from the draft model this step.
#[derive(Debug)]
pub(crate) struct DraftJob<'a> {
    /// The target's sequence (names the request's draft sequence).
    pub(crate) target: SeqId,
    /// What the target's sequence holds, and the pending token after it.
    pub(crate) context: &'a [u32],
    pub(crate) last: u32,
    /// Tokens to propose at most, and the draft-probability floor.
    pub(crate) want: usize,
    pub(crate) p_min: f32,
    /// The proposal.
    pub(crate) out: Vec<u32>,
}

impl DraftJob<'_> {
    /// Takes the draft model's most likely token after `logits` into the proposal, unless
    /// its probability is below the floor; returns whether the proposal goes on.
    fn take(&mut self, logits: &[f32]) -> bool {
        let (token, p) = argmax_prob(logits);
        if p < self.p_min {
            return false;
        }
        self.out.push(token);
        true
    }
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Drafter {
    engine: Engine,
    seqs: HashMap<SeqId, SeqId>,
    /// Seconds of a proposal pass for one request (an exponential moving average), what a
    /// draft token costs.
    step_secs: f64,
}

/// Checks that a draft model reads and writes the target's tokens: the same vocabulary
/// size and, where both have a tokenizer, the same piece and kind for every id.
pub(crate) fn check_vocabulary(target: &Engine, draft: &Engine) -> Result<(), CoreError> {
    let mismatch = |reason: String| {
        Err(CoreError::InvalidOption {
            option: "model_draft",
            reason: format!(
                "the draft model's vocabulary differs from the target's: {reason} (a draft \
                 must share the target's tokenizer)"
            ),
        })
    };
    let (nt, nd) = (target.n_vocab(), draft.n_vocab());
    if nt != nd {
        return mismatch(format!("{nd} tokens against {nt}"));
    }
    match (target.model().tokenizer(), draft.model().tokenizer()) {
        (Some(t), Some(d)) => {
            for id in 0..nt.min(t.n_vocab()).min(d.n_vocab()) as u32 {
                let (pt, pd) = (
                    t.token_to_piece_special(id, true),
                    d.token_to_piece_special(id, true),
                );
                if pt != pd || t.is_control(id) != d.is_control(id) {
                    return mismatch(format!(
                        "token {id} is {:?} there and {:?} here",
                        String::from_utf8_lossy(pd),
                        String::from_utf8_lossy(pt)
                    ));
                }
            }
            Ok(())
        }
        (None, None) => Ok(()),
        _ => mismatch("one of the two files has no tokenizer".into()),
    }
}

/// The most likely token of `logits` and its softmax probability (NaN counts as
/// impossible; ties go to the lowest id).
fn argmax_prob(logits: &[f32]) -> (u32, f32) {
    let mut best = 0usize;
    let mut max = f32::NEG_INFINITY;
    for (i, &l) in logits.iter().enumerate() {
        if l > max {
            max = l;
            best = i;
        }
    }
    if max == f32::NEG_INFINITY {
        return (0, 0.0);
    }
    let sum: f64 = logits
        .iter()
        .filter(|l| !l.is_nan())
        .map(|&l| f64::from((l - max).exp()))
        .sum();
    (best as u32, (1.0 / sum) as f32)
}

impl Drafter {
    pub(crate) fn new(engine: Engine) -> Drafter {
        Drafter {
            engine,
            seqs: HashMap::new(),
            step_secs: 0.0,
        }
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Seconds a draft token costs (a one-request proposal pass), once measured.
    pub(crate) fn token_secs(&self) -> Option<f64> {
        (self.step_secs > 0.0).then_some(self.step_secs)
    }

    /// Frees the draft sequence of a request that ended.
    pub(crate) fn forget(&mut self, target: SeqId) {
        if let Some(ds) = self.seqs.remove(&target) {
            let _ = self.engine.free_sequence(ds);
        }
    }

    /// Fills each job's `out` with its proposal (see the module docs). On an error the
    /// jobs' draft sequences are dropped (the next step starts them again) and the error
    /// is returned: the caller verifies no draft this step.
    pub(crate) fn propose(&mut self, jobs: &mut [DraftJob<'_>]) -> Result<(), CoreError> {
        let result = self.propose_inner(jobs);
        if result.is_err() {
            for job in jobs.iter_mut() {
                job.out.clear();
                self.forget(job.target);
            }
        }
        result
    }

    fn propose_inner(&mut self, jobs: &mut [DraftJob<'_>]) -> Result<(), CoreError> {
        let max_len = self.engine.max_seq_len();
        // What each job's draft sequence still has to read, and whether it is proposing.
        let mut pending: Vec<Vec<u32>> = Vec::with_capacity(jobs.len());
        let mut active: Vec<bool> = Vec::with_capacity(jobs.len());
        for job in jobs.iter_mut() {
            job.out.clear();
            let full_len = job.context.len() + 1;
            if job.want == 0 || full_len + job.want > max_len {
                pending.push(Vec::new());
                active.push(false);
                continue;
            }
            let full = |i: usize| {
                if i < job.context.len() {
                    job.context[i]
                } else {
                    job.last
                }
            };
            let engine = &mut self.engine;
            let ds = match self.seqs.get(&job.target) {
                Some(&ds) => ds,
                None => {
                    let ds = engine.new_sequence();
                    self.seqs.insert(job.target, ds);
                    engine.reuse_prefix(ds, job.context)?;
                    ds
                }
            };
            let held = engine.sequence_tokens(ds)?;
            let mut common = held
                .iter()
                .enumerate()
                .take_while(|&(i, &t)| i < full_len && t == full(i))
                .count();
            // The last token is read again when held: its logits were not kept.
            common = common.min(full_len - 1);
            engine.truncate(ds, common)?;
            pending.push((common..full_len).map(full).collect());
            active.push(true);
        }

        // Catch up, in chunks the draft engine takes; the chunk that ends a sequence's
        // catch-up gives its first proposal.
        let budget = self.engine.max_batch();
        let mut fed = vec![0usize; jobs.len()];
        loop {
            let mut items = Vec::new();
            let mut owners = Vec::new();
            let mut room = budget;
            for (j, job) in jobs.iter().enumerate() {
                let left = pending[j].len() - fed[j];
                if !active[j] || left == 0 || room == 0 {
                    continue;
                }
                let n = left.min(room);
                room -= n;
                let ends = n == left;
                items.push(BatchItem {
                    seq: self.seqs[&job.target],
                    tokens: &pending[j][fed[j]..fed[j] + n],
                    logits: if ends { Logits::Last } else { Logits::None },
                });
                owners.push(j);
            }
            if items.is_empty() {
                break;
            }
            self.engine.forward(&items, |item, _, logits| {
                let j = owners[item];
                active[j] = jobs[j].take(logits);
            })?;
            for (item, &j) in items.iter().zip(&owners) {
                fed[j] += item.tokens.len();
            }
        }

        // Propose, one position a pass for every job still going.
        let mut tokens: Vec<u32> = Vec::with_capacity(jobs.len());
        loop {
            tokens.clear();
            let mut owners = Vec::new();
            for (j, job) in jobs.iter().enumerate() {
                if active[j] && !job.out.is_empty() && job.out.len() < job.want {
                    tokens.push(*job.out.last().expect("not empty"));
                    owners.push(j);
                }
            }
            if owners.is_empty() {
                break;
            }
            let items: Vec<BatchItem<'_>> = owners
                .iter()
                .zip(&tokens)
                .map(|(&j, t)| BatchItem {
                    seq: self.seqs[&jobs[j].target],
                    tokens: std::slice::from_ref(t),
                    logits: Logits::Last,
                })
                .collect();
            let t = std::time::Instant::now();
            self.engine.forward(&items, |item, _, logits| {
                let j = owners[item];
                active[j] = jobs[j].take(logits);
            })?;
            if owners.len() == 1 {
                let secs = t.elapsed().as_secs_f64();
                self.step_secs = if self.step_secs == 0.0 {
                    secs
                } else {
                    0.8 * self.step_secs + 0.2 * secs
                };
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::argmax_prob;

    #[test]
    fn argmax_prob_is_the_softmax_maximum() {
        let (t, p) = argmax_prob(&[0.0, 2.0_f32.ln(), f32::NAN, f32::NEG_INFINITY, 0.0]);
        assert_eq!(t, 1);
        assert!((p - 0.5).abs() < 1e-6, "{p}");
        assert_eq!(argmax_prob(&[f32::NEG_INFINITY; 3]), (0, 0.0));
        let (t, p) = argmax_prob(&[1.0, 1.0]);
        assert_eq!(t, 0);
        assert!((p - 0.5).abs() < 1e-6);
    }
}
