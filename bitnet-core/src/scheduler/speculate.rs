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
//! How many tokens to propose adapts per request ([`SpecState`]): the length doubles while
//! every proposed token is accepted and falls to one more than the accepted count when not;
//! after consecutive verifications that accept nothing, proposing pauses for a number of
//! steps that doubles each time (up to [`MAX_PAUSE`]), so a text with nothing to copy or a
//! draft model that keeps missing costs a few wasted positions now and then, not one a step.

use crate::error::CoreError;

/// Where a request's drafts come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DraftSource {
    /// The scheduler's draft model ([`super::Scheduler::set_draft`]): its greedy tokens,
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
}

/// Tokens proposed per step at most, by default (llama.cpp's `--draft-max`).
pub const DEFAULT_DRAFT_MAX: usize = 16;
/// Draft-probability floor of a draft model's proposals, by default (llama.cpp's).
pub const DEFAULT_P_MIN: f32 = 0.75;
/// Longest pause (in steps) after drafts that were all rejected.
pub const MAX_PAUSE: u32 = 64;
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
        }
    }

    /// Draft-model drafting with llama.cpp's default lengths.
    pub fn model() -> SpecParams {
        SpecParams {
            source: DraftSource::Model,
            draft_max: DEFAULT_DRAFT_MAX,
            draft_min: 0,
            p_min: DEFAULT_P_MIN,
        }
    }

    /// Checks the values against the engine's largest pass (`max_batch` tokens).
    pub fn validate(&self, max_batch: usize) -> Result<(), CoreError> {
        let bad = |option, reason: String| Err(CoreError::InvalidOption { option, reason });
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

/// A request's speculation: its parameters, the adaptive draft length, this step's draft
/// and the figures.
#[derive(Clone, Debug)]
pub(crate) struct SpecState {
    pub(crate) params: SpecParams,
    /// Tokens to propose next time at most (adapts between 1 and `draft_max`).
    length: usize,
    /// Steps left without proposing, and the next pause's length.
    paused: u32,
    next_pause: u32,
    /// Verifications in a row that accepted nothing.
    misses: u32,
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
            length: params.draft_max.div_ceil(2).max(1),
            params,
            paused: 0,
            next_pause: 1,
            misses: 0,
            stopped: false,
            drafted: 0,
            accepted: 0,
            verified: 0,
        }
    }

    /// How many tokens to propose this step (0: none), given that `room` fit. Counts down
    /// a pause.
    pub(crate) fn wanted(&mut self, room: usize) -> usize {
        if self.stopped {
            return 0;
        }
        if self.paused > 0 {
            self.paused -= 1;
            return 0;
        }
        let n = self.length.min(room);
        if n < self.params.draft_min.max(1) {
            0
        } else {
            n
        }
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
        if accepted == proposed {
            self.length = (self.length * 2).min(self.params.draft_max);
        } else {
            self.length = (accepted + 1).min(self.params.draft_max);
        }
        if accepted == 0 {
            self.misses += 1;
            if self.misses >= 2 {
                self.paused = self.next_pause;
                self.next_pause = (self.next_pause * 2).min(MAX_PAUSE);
                self.misses = 0;
            }
        } else {
            self.misses = 0;
            self.next_pause = 1;
        }
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

    #[test]
    fn length_adapts_and_pauses_after_misses() {
        let mut s = SpecState::new(SpecParams {
            draft_max: 8,
            ..SpecParams::lookup(3)
        });
        assert_eq!(s.wanted(100), 4);
        s.record(4, 4);
        assert_eq!(s.wanted(100), 8);
        assert_eq!(s.wanted(3), 3);
        s.record(8, 2);
        assert_eq!(s.wanted(100), 3);
        s.record(3, 0);
        assert_eq!(s.wanted(100), 1);
        // A second miss in a row pauses one step, the next pair two, then four.
        s.record(1, 0);
        assert_eq!(s.wanted(100), 0);
        assert_eq!(s.wanted(100), 1);
        s.record(1, 0);
        s.record(1, 0);
        assert_eq!((s.wanted(100), s.wanted(100), s.wanted(100)), (0, 0, 1));
        // An acceptance ends the backoff.
        s.record(1, 1);
        assert_eq!(s.wanted(100), 2);
        assert_eq!((s.drafted, s.accepted, s.verified), (19, 7, 7));
    }

    #[test]
    fn draft_min_suppresses_short_drafts() {
        let mut s = SpecState::new(SpecParams {
            draft_max: 8,
            draft_min: 3,
            ..SpecParams::lookup(3)
        });
        assert_eq!(s.wanted(2), 0);
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
