//! Speculative decoding: a request proposes a few tokens cheaply (a draft), the scheduler
//! evaluates its pending token and the draft in one batch item with every row's logits, and
//! keeps the longest prefix the target model agrees with, plus the target's own token at
//! the first disagreement (or after the last draft token). The weights are read once for
//! up to `draft_max + 1` tokens.
//!
//! Drafts are deterministic: a draft model's argmax, or the continuation of an earlier
//! occurrence of the last n tokens (prompt lookup). For a point-mass draft `q`, the
//! speculative sampling rule (accept draft token `d` with probability `min(1, p(d)/q(d))`,
//! on rejection sample from `max(0, p - q)` normalised) is exactly: sample `x` from the
//! target's own distribution `p` with the request's sampler, accept while `x == d`; the
//! first `x != d` is the residual's sample. So every output token is a sample of the
//! target's distribution (greedy output is the target's greedy output, token for token),
//! and the request's sampler (temperature, top-k/p, min-p, penalties over the accepted
//! history) runs unchanged on each row.
//!
//! How many tokens to propose adapts per request ([`SpecState`]) so that speculation never
//! costs more than it saves: a running estimate of the probability that a draft token is
//! accepted (`a`, an exponentially weighted count of accepted tokens over tokens tried) and
//! the measured cost of a pass over `n` positions against a one-position pass (`c(n)`, which
//! the scheduler learns from its own single-request passes, see [`PassCosts`]; a draft
//! model's own passes add theirs) give the draft length `k` that maximises the expected
//! tokens a pass, `(1 - a^(k+1)) / (1 - a)`, over its cost `c(k + 1)`. When no `k >= 1` beats
//! plain decoding, the request decodes without drafts and proposes a single token again
//! after a pause that doubles each time (1, 2, 4, ... [`MAX_PAUSE`] steps), to keep the
//! estimate current. `SpecParams::adaptive = false` proposes `draft_max` every step.

use super::validate::RequestError;

/// Where a request's drafts come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DraftSource {
    /// The scheduler's draft model (`Scheduler::set_draft`): its greedy tokens,
    /// while its probability of the token stays at or above [`SpecParams::p_min`].
    Model,
    /// Prompt lookup, no model: the tokens that followed the most recent earlier occurrence
    /// (in the prompt and the output) of the last `ngram` tokens, else of the last
    /// `ngram - 1`, ..., down to 2 (1 when `ngram` is 1).
    Lookup { ngram: usize },
}

/// How a request speculates (llama.cpp's `--draft-max`, `--draft-min`, `--draft-p-min`).
#[derive(Clone, Debug, PartialEq)]
pub struct SpecParams {
    pub source: DraftSource,
    /// Tokens proposed per step at most.
    pub draft_max: usize,
    /// A draft shorter than this is not verified (the step decodes one token).
    pub draft_min: usize,
    /// A draft model's proposal ends before a token whose draft probability is below this.
    pub p_min: f32,
    /// Choose the draft length from the acceptance and the passes' cost (see the module
    /// docs); false proposes `draft_max` tokens every step (to measure acceptance).
    pub adaptive: bool,
}

/// Tokens proposed per step at most, by default (llama.cpp's `--draft-max`).
pub const DEFAULT_DRAFT_MAX: usize = 16;
/// Draft-probability floor of a draft model's proposals, by default (llama.cpp's).
pub const DEFAULT_P_MIN: f32 = 0.75;
/// Longest pause (in steps) between probes while drafting does not pay.
pub const MAX_PAUSE: u32 = 64;
/// The cost of one more position in a pass, as a share of a one-position pass, until the
/// scheduler has measured it: the 2B-4T shape's at 2 threads (0.15-0.2 with AVX-512,
/// 0.23-0.37 with AVX2; `bench/2026-11-27-60e0a7b-speculative.md`).
pub const DEFAULT_POSITION_COST: f64 = 0.25;
/// The acceptance a request assumes before its first verification, and the weight (in
/// tokens tried) of that assumption.
const PRIOR_ACCEPTANCE: f64 = 0.6;
const PRIOR_WEIGHT: f64 = 2.0;
/// How much of the acceptance estimate each verification keeps.
const DECAY: f64 = 0.9;
/// Longest n-gram a lookup draft matches.
pub const MAX_LOOKUP_NGRAM: usize = 64;

impl SpecParams {
    /// Lookup drafting with llama.cpp's default lengths.
    pub fn lookup(ngram: usize) -> SpecParams {
        SpecParams {
            source: DraftSource::Lookup { ngram },
            draft_max: DEFAULT_DRAFT_MAX,
            draft_min: 0,
            p_min: DEFAULT_P_MIN,
            adaptive: true,
        }
    }

    /// Draft-model drafting with llama.cpp's default lengths.
    pub fn model() -> SpecParams {
        SpecParams {
            source: DraftSource::Model,
            draft_max: DEFAULT_DRAFT_MAX,
            draft_min: 0,
            p_min: DEFAULT_P_MIN,
            adaptive: true,
        }
    }

    /// Checks the values against the engine's largest pass (`max_batch` tokens).
    pub fn validate(&self, max_batch: usize) -> Result<(), RequestError> {
        let bad = |option, reason: String| Err(RequestError::Speculation { option, reason });
        if let DraftSource::Lookup { ngram } = self.source
            && !(1..=MAX_LOOKUP_NGRAM).contains(&ngram)
        {
            return bad(
                "lookup_ngram",
                format!("{ngram} is not in 1..={MAX_LOOKUP_NGRAM}"),
            );
        }
        if self.draft_max == 0 {
            return bad("draft_max", "must be at least 1".into());
        }
        if self.draft_max >= max_batch {
            return bad(
                "draft_max",
                format!(
                    "{} draft tokens and the pending one do not fit a pass of {max_batch} \
                     tokens (raise the batch size or lower the draft length)",
                    self.draft_max
                ),
            );
        }
        if self.draft_min > self.draft_max {
            return bad(
                "draft_min",
                format!(
                    "{} is more than draft_max {}",
                    self.draft_min, self.draft_max
                ),
            );
        }
        if !(0.0..=1.0).contains(&self.p_min) {
            return bad("draft_p_min", format!("{} is not in [0, 1]", self.p_min));
        }
        Ok(())
    }
}

/// Pass times of the engine by the number of positions (1 ..= `MAX_POSITIONS`), learned
/// from passes that evaluate one decode item alone (an exponential moving average), so the
/// draft length follows what a verification costs on this machine and model.
#[derive(Clone, Debug)]
pub(crate) struct PassCosts {
    secs: Vec<f64>,
}

/// Positions a pass is timed for at most (a draft of [`DEFAULT_DRAFT_MAX`] and its pending
/// token; longer passes are costed linearly from the longest measured).
const MAX_POSITIONS: usize = 64;

impl PassCosts {
    pub(crate) fn new() -> PassCosts {
        PassCosts {
            secs: vec![0.0; MAX_POSITIONS + 1],
        }
    }

    /// Records a pass over `n` positions that took `secs`.
    pub(crate) fn record(&mut self, n: usize, secs: f64) {
        if let Some(t) = self.secs.get_mut(n) {
            *t = if *t == 0.0 {
                secs
            } else {
                0.8 * *t + 0.2 * secs
            };
        }
    }

    /// The one-position pass's time, once measured.
    pub(crate) fn decode_secs(&self) -> Option<f64> {
        (self.secs[1] > 0.0).then_some(self.secs[1])
    }

    /// A pass over `n` positions against a one-position pass: measured where both are;
    /// else at the per-position cost of the measured length nearest to `n`; else
    /// [`DEFAULT_POSITION_COST`] a position more.
    pub(crate) fn cost(&self, n: usize) -> f64 {
        let extra = n.saturating_sub(1) as f64;
        let Some(t1) = self.decode_secs() else {
            return 1.0 + DEFAULT_POSITION_COST * extra;
        };
        if let Some(&t) = self.secs.get(n)
            && t > 0.0
        {
            return t / t1;
        }
        let nearest = (2..self.secs.len())
            .filter(|&m| self.secs[m] > 0.0)
            .min_by_key(|&m| m.abs_diff(n));
        match nearest {
            Some(m) => 1.0 + (self.secs[m] / t1 - 1.0) / (m - 1) as f64 * extra,
            None => 1.0 + DEFAULT_POSITION_COST * extra,
        }
    }
}

/// A request's speculation: its parameters, the acceptance estimate, the pause between
/// probes, and the figures.
#[derive(Clone, Debug)]
pub(crate) struct SpecState {
    pub(crate) params: SpecParams,
    /// Draft tokens accepted and tried (accepted ones and the first rejected one),
    /// exponentially weighted.
    accepted_w: f64,
    tried_w: f64,
    /// Steps left without proposing, and the next pause's length.
    paused: u32,
    next_pause: u32,
    /// Speculation stopped for good (the draft model failed).
    stopped: bool,
    /// Tokens proposed, tokens accepted, verification passes (steps with a draft).
    pub(crate) drafted: usize,
    pub(crate) accepted: usize,
    pub(crate) verified: usize,
}

impl SpecState {
    pub(crate) fn new(params: SpecParams) -> SpecState {
        SpecState {
            params,
            accepted_w: PRIOR_ACCEPTANCE * PRIOR_WEIGHT,
            tried_w: PRIOR_WEIGHT,
            paused: 0,
            next_pause: 1,
            stopped: false,
            drafted: 0,
            accepted: 0,
            verified: 0,
        }
    }

    /// The estimated probability that a draft token is accepted.
    pub(crate) fn acceptance(&self) -> f64 {
        self.accepted_w / self.tried_w
    }

    /// How many tokens to propose this step (0: none), given that `room` fit and that
    /// `cost(n)` is a pass over `n` positions (drafting included) against a one-position
    /// pass. Counts down a pause.
    pub(crate) fn wanted(&mut self, room: usize, cost: impl Fn(usize) -> f64) -> usize {
        if self.stopped {
            return 0;
        }
        let most = self.params.draft_max.min(room);
        let least = self.params.draft_min.max(1);
        if most < least {
            return 0;
        }
        if !self.params.adaptive {
            return most;
        }
        if self.paused > 0 {
            self.paused -= 1;
            // The last step of a pause probes with the shortest draft.
            return if self.paused == 0 { least } else { 0 };
        }
        let a = self.acceptance().clamp(0.0, 0.999);
        let (mut best_k, mut best_gain) = (0, 1.0);
        let mut expected = 1.0;
        let mut term = 1.0;
        for k in 1..=most {
            term *= a;
            expected += term;
            let gain = expected / cost(k + 1);
            if k >= least && gain > best_gain {
                (best_k, best_gain) = (k, gain);
            }
        }
        if best_k == 0 {
            self.paused = self.next_pause;
            self.next_pause = (self.next_pause * 2).min(MAX_PAUSE);
        } else {
            self.next_pause = 1;
        }
        best_k
    }

    /// Stops proposing for the rest of the request.
    pub(crate) fn stop(&mut self) {
        self.stopped = true;
    }

    /// Whether a proposal of `n` tokens is long enough to verify.
    pub(crate) fn worth_verifying(&self, n: usize) -> bool {
        n >= self.params.draft_min.max(1)
    }

    /// Records a verification: `proposed` draft tokens, of which the first `accepted`
    /// matched the target.
    pub(crate) fn record(&mut self, proposed: usize, accepted: usize) {
        debug_assert!(accepted <= proposed && proposed > 0);
        self.drafted += proposed;
        self.accepted += accepted;
        self.verified += 1;
        let tried = accepted + usize::from(accepted < proposed);
        self.accepted_w = DECAY * self.accepted_w + accepted as f64;
        self.tried_w = DECAY * self.tried_w + tried as f64;
    }
}

/// Prompt lookup: the tokens after the most recent earlier occurrence of the last `n`
/// tokens of `history` (`n` from `ngram` down to 2, or 1 when `ngram` is 1), at most `max`
/// of them, appended to `out`. Nothing when no suffix recurs.
pub fn lookup_draft(history: &[u32], ngram: usize, max: usize, out: &mut Vec<u32>) {
    let len = history.len();
    let smallest = if ngram == 1 { 1 } else { 2 };
    for n in (smallest..=ngram.min(len.saturating_sub(1))).rev() {
        let key = &history[len - n..];
        // Most recent start first; an occurrence must be followed by at least one token.
        if let Some(start) = (0..len - n).rev().find(|&s| history[s..s + n] == *key) {
            let from = start + n;
            let to = (from + max).min(len);
            out.extend_from_slice(&history[from..to]);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(history: &[u32], ngram: usize, max: usize) -> Vec<u32> {
        let mut out = Vec::new();
        lookup_draft(history, ngram, max, &mut out);
        out
    }

    #[test]
    fn lookup_continues_the_most_recent_longest_match() {
        // "1 2 3" occurred twice; the later occurrence is followed by 9 9.
        let h = [1, 2, 3, 4, 5, 0, 1, 2, 3, 9, 9, 7, 1, 2, 3];
        assert_eq!(draft(&h, 3, 4), vec![9, 9, 7, 1]);
        assert_eq!(draft(&h, 3, 1), vec![9]);
        // A longer key that never recurred falls back to the longest one that did.
        assert_eq!(draft(&h, 5, 2), vec![9, 9]);
    }

    #[test]
    fn lookup_proposes_nothing_without_a_recurrence() {
        assert!(draft(&[1, 2, 3, 4, 5], 3, 4).is_empty());
        assert!(draft(&[], 3, 4).is_empty());
        assert!(draft(&[7], 1, 4).is_empty());
        // Only a one-token recurrence, and one-token keys only at ngram 1.
        assert!(draft(&[5, 1, 6, 5], 3, 4).is_empty());
        assert_eq!(draft(&[5, 1, 6, 5], 1, 4), vec![1, 6, 5]);
    }

    #[test]
    fn lookup_stops_at_the_end_of_the_history() {
        // The continuation of the match runs into the key itself.
        assert_eq!(draft(&[4, 4, 4], 2, 8), vec![4]);
        assert_eq!(draft(&[1, 2, 1, 2], 2, 8), vec![1, 2]);
    }

    /// A pass over n positions costing `1 + rho (n - 1)` decode steps.
    fn linear(rho: f64) -> impl Fn(usize) -> f64 {
        move |n| 1.0 + rho * (n - 1) as f64
    }

    #[test]
    fn length_follows_acceptance_and_cost() {
        let mut s = SpecState::new(SpecParams {
            draft_max: 8,
            ..SpecParams::lookup(3)
        });
        // The prior (0.6) at a quarter step a position: (1 + .6 + .36) / 1.5 beats the rest.
        assert_eq!(s.wanted(100, linear(0.25)), 2);
        // Free positions: as long as allowed; dear ones: none.
        assert_eq!(s.wanted(100, linear(0.0)), 8);
        assert_eq!(s.wanted(3, linear(0.0)), 3);
        // Everything accepted for a while: long drafts even at a cost.
        for _ in 0..20 {
            s.record(8, 8);
        }
        assert!(s.acceptance() > 0.95);
        assert_eq!(s.wanted(100, linear(0.25)), 8);
        // Nothing accepted for a while: no drafts, then a one-token probe after 1 step,
        // then after 2, 4, ...
        for _ in 0..60 {
            s.record(1, 0);
        }
        assert!(s.acceptance() < 0.05);
        let steps: Vec<usize> = (0..8).map(|_| s.wanted(100, linear(0.25))).collect();
        assert_eq!(steps, [0, 1, 0, 0, 1, 0, 0, 0]);
        assert_eq!((s.drafted, s.accepted, s.verified), (220, 160, 80));
    }

    #[test]
    fn fixed_length_ignores_the_estimate() {
        let mut s = SpecState::new(SpecParams {
            draft_max: 5,
            adaptive: false,
            ..SpecParams::lookup(3)
        });
        for _ in 0..40 {
            s.record(5, 0);
        }
        assert_eq!(s.wanted(100, linear(10.0)), 5);
        assert_eq!(s.wanted(2, linear(10.0)), 2);
    }

    #[test]
    fn pass_costs_are_learned() {
        let mut c = PassCosts::new();
        assert_eq!(c.cost(3), 1.5);
        c.record(1, 0.010);
        c.record(3, 0.013);
        assert!((c.cost(3) - 1.3).abs() < 1e-9);
        // An unmeasured length takes the nearest measured one's cost a position.
        assert!((c.cost(2) - 1.15).abs() < 1e-9);
        assert!((c.cost(9) - 2.2).abs() < 1e-9);
        c.record(3, 0.023);
        assert!((c.cost(3) - 1.5).abs() < 1e-9);
    }

    #[test]
    fn draft_min_suppresses_short_drafts() {
        let mut s = SpecState::new(SpecParams {
            draft_max: 8,
            draft_min: 3,
            ..SpecParams::lookup(3)
        });
        assert_eq!(s.wanted(2, linear(0.0)), 0);
        assert_eq!(s.wanted(100, linear(0.0)), 8);
        assert!(!s.worth_verifying(2));
        assert!(s.worth_verifying(3));
    }

    #[test]
    fn validate_refuses_bad_lengths() {
        assert!(SpecParams::lookup(3).validate(256).is_ok());
        assert!(SpecParams::lookup(0).validate(256).is_err());
        assert!(SpecParams::lookup(3).validate(16).is_err());
        let p = SpecParams {
            draft_min: 20,
            ..SpecParams::model()
        };
        assert!(p.validate(256).is_err());
        let p = SpecParams {
            p_min: 1.5,
            ..SpecParams::model()
        };
        assert!(p.validate(256).is_err());
    }
}
