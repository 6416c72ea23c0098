//! The batch of one step ([`Plan`]): a decode token of every generating request (with its
//! draft, when it speculates), then prompt chunks of new requests (an embedding request's
//! asking for hidden rows where a generation's asks for logits), under the engine's
//! per-pass token budget, so a long prompt is spread over several steps and never stalls
//! the others. The drafts are proposed first ([`propose_drafts`]), within the same budget.

use super::draft::{DraftJob, Drafter};
use super::request::{Phase, Request};
use super::speculate::{self, DraftSource, PassCosts};
use crate::engine::{BatchItem, Engine, Logits};

/// The tokens of a pass and whose they are (kept across steps to reuse the memory).
#[derive(Debug, Default)]
pub(crate) struct Plan {
    tokens: Vec<u32>,
    /// Per item: where its tokens start in `tokens`, how many, which logits it wants.
    pub(crate) spans: Vec<(usize, usize, Logits)>,
    /// Per item: its request's index in the running list.
    pub(crate) item_req: Vec<usize>,
}

impl Plan {
    pub(crate) fn with_capacity(cap: usize) -> Plan {
        Plan {
            tokens: Vec::with_capacity(cap),
            spans: Vec::with_capacity(cap),
            item_req: Vec::with_capacity(cap),
        }
    }

    /// Tokens the pass evaluates.
    pub(crate) fn n_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// Lays out the pass over the `running` requests of `engine` (their drafts proposed).
    pub(crate) fn build(&mut self, running: &mut [Request], engine: &Engine) {
        let budget = engine.max_batch();
        self.tokens.clear();
        self.item_req.clear();
        self.spans.clear();
        for (i, r) in running.iter_mut().enumerate() {
            r.sampled.clear();
            r.rejected = false;
            if let (Phase::Decode, Some(t)) = (&r.phase, r.next)
                && self.tokens.len() < budget
            {
                if self.tokens.len() + 1 + r.drafts.len() > budget {
                    r.drafts.clear();
                }
                let logits = if r.drafts.is_empty() {
                    Logits::Last
                } else {
                    Logits::All
                };
                self.spans
                    .push((self.tokens.len(), 1 + r.drafts.len(), logits));
                self.tokens.push(t);
                self.tokens.extend_from_slice(&r.drafts);
                self.item_req.push(i);
            }
        }
        for (i, r) in running.iter().enumerate() {
            let left = budget - self.tokens.len();
            if r.phase != Phase::Prefill || left == 0 {
                continue;
            }
            let held = engine.sequence_len(r.seq).unwrap_or(0);
            let n = (r.prompt.len() - r.fed)
                .min(left)
                .min(r.limit.saturating_sub(held));
            if n == 0 {
                continue;
            }
            let ends = r.fed + n == r.prompt.len();
            let logits = match &r.embed {
                Some(e) => e.rows(ends),
                None if ends => Logits::Last,
                None => Logits::None,
            };
            self.spans.push((self.tokens.len(), n, logits));
            self.tokens.extend_from_slice(&r.prompt[r.fed..r.fed + n]);
            self.item_req.push(i);
        }
    }

    /// The pass's items, as the engine takes them.
    pub(crate) fn items<'a>(&'a self, running: &[Request]) -> Vec<BatchItem<'a>> {
        self.spans
            .iter()
            .zip(&self.item_req)
            .map(|(&(start, n, logits), &i)| BatchItem {
                seq: running[i].seq,
                tokens: &self.tokens[start..start + n],
                logits,
            })
            .collect()
    }

    /// The request of a pass that is one decode item alone (what a verification of its
    /// length costs is measured on such passes), and the item's length.
    pub(crate) fn lone_decode(&self, running: &[Request]) -> Option<usize> {
        match self.spans[..] {
            [(_, n, _)] if running[self.item_req[0]].phase == Phase::Decode => Some(n),
            _ => None,
        }
    }
}

/// Fills the draft of every decoding request that speculates this step, within the pass's
/// budget (at most half of what the decode tokens leave, so prompt chunks of new requests
/// still move) and each request's own room (its reserved positions and `max_tokens`).
/// Draft-model failures are not the request's: it decodes without a draft and stops
/// speculating.
pub(crate) fn propose_drafts(
    running: &mut [Request],
    engine: &Engine,
    drafter: Option<&mut Drafter>,
    costs: &PassCosts,
) {
    let budget = engine.max_batch();
    let decoding = running
        .iter()
        .filter(|r| r.phase == Phase::Decode && r.next.is_some())
        .count();
    let mut room = budget.saturating_sub(decoding) / 2;
    // (request, draft length) of the requests the draft model proposes for.
    let mut model_jobs: Vec<(usize, usize)> = Vec::new();
    for (i, r) in running.iter_mut().enumerate() {
        r.drafts.clear();
        let (Phase::Decode, Some(_), Some(spec)) = (&r.phase, r.next, &mut r.spec) else {
            continue;
        };
        let held = engine.sequence_len(r.seq).unwrap_or(0);
        // The pass adds the pending token and the draft to the sequence; a verified pass
        // yields one token more than the draft.
        let positions = r.total.saturating_sub(held + 1);
        let tokens = r.params.max_tokens.saturating_sub(r.generated.len() + 1);
        // A draft model's tokens cost their own passes besides the verification's.
        let draft_cost = match (&spec.params.source, &drafter) {
            (DraftSource::Model, Some(d)) => match (d.token_secs(), costs.decode_secs()) {
                (Some(td), Some(t1)) => td / t1,
                _ => speculate::DEFAULT_POSITION_COST,
            },
            _ => 0.0,
        };
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
    let Some(drafter) = drafter else {
        return;
    };
    let mut jobs: Vec<DraftJob<'_>> = model_jobs
        .iter()
        .map(|&(i, want)| {
            let r = &running[i];
            DraftJob {
                target: r.seq,
                context: engine.sequence_tokens(r.seq).unwrap_or(&[]),
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
        let Some(spec) = &mut running[i].spec else {
            continue;
        };
        if failed {
            spec.stop();
        } else if spec.worth_verifying(out.len()) {
            running[i].drafts = out;
        }
    }
}
