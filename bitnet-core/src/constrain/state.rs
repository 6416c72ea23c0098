//! One sequence's position in a constraint: the mask of the tokens that may come next, and
//! the advance with each accepted token.

use std::sync::Arc;
use std::time::Instant;

use llguidance::Matcher;
use toktrie::SimpleVob;

use super::ConstraintVocab;
use super::closing::{CLOSE_WINDOW, closing_path};
use super::error::{ConstraintError, first_lines};

/// See the module docs of [`super`].
pub struct ConstraintState {
    kind: &'static str,
    matcher: Matcher,
    vocab: Arc<ConstraintVocab>,
    /// The last mask computed, one bit a token (valid until the next [`Self::accept`]).
    mask: SimpleVob,
    masks: u64,
    mask_secs: f64,
    closings: u64,
}

impl std::fmt::Debug for ConstraintState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConstraintState")
            .field("kind", &self.kind)
            .field("masks", &self.masks)
            .field("finished", &self.is_finished())
            .finish_non_exhaustive()
    }
}

impl ConstraintState {
    pub(super) fn new(
        kind: &'static str,
        matcher: Matcher,
        vocab: Arc<ConstraintVocab>,
    ) -> ConstraintState {
        ConstraintState {
            kind,
            matcher,
            vocab,
            mask: SimpleVob::new(),
            masks: 0,
            mask_secs: 0.0,
            closings: 0,
        }
    }

    fn failed(&self, detail: impl Into<String>) -> ConstraintError {
        ConstraintError::Failed {
            kind: self.kind,
            detail: detail.into(),
        }
    }

    /// Computes which tokens may come next and returns the mask: bit `t % 32` of word
    /// `t / 32` is set when token `t` may be sampled. Every end-of-generation token is
    /// allowed exactly when the output may end here. An empty mask is an error (nothing
    /// can continue: a grammar that admits no string, or a lexer limit hit).
    pub fn compute_mask(&mut self) -> Result<&[u32], ConstraintError> {
        let t = Instant::now();
        let mask = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| self.failed(first_lines(&e.to_string())))?;
        self.mask = mask;
        let eog = self.vocab.eog();
        if eog.iter().any(|&t| self.mask.is_allowed(t)) {
            for &t in eog {
                self.mask.allow_token(t);
            }
        }
        self.masks += 1;
        self.mask_secs += t.elapsed().as_secs_f64();
        if self.mask.is_zero() {
            return Err(self.failed("no token of the vocabulary can continue the output"));
        }
        Ok(self.mask.as_slice())
    }

    /// Whether the last computed mask allows `token`.
    pub fn allows(&self, token: u32) -> bool {
        (token as usize) < self.mask.len() && self.mask.is_allowed(token)
    }

    /// Advances past `token` (which the last mask allowed). An end-of-generation token ends
    /// the output and is not fed to the parser.
    pub fn accept(&mut self, token: u32) -> Result<(), ConstraintError> {
        if self.is_end(token) {
            return Ok(());
        }
        self.matcher
            .consume_token(token)
            .map_err(|e| self.failed(first_lines(&e.to_string())))
    }

    /// `token`, sampled from the last mask, if the output can still end complete in the
    /// tokens left after it (`left`: what the request may still sample, `token` included),
    /// else the token that starts a way to close from here: the end of the output when it may
    /// end now, else the first token of the walk of [`super::closing`]. A token that itself
    /// completes the output in the budget's last slot is kept (the answer is complete; the
    /// budget ends it). Checked only in the last [`CLOSE_WINDOW`] tokens of a budget.
    pub fn within_budget(&mut self, token: u32, left: usize) -> u32 {
        if left > CLOSE_WINDOW || self.is_end(token) {
            return token;
        }
        let t = Instant::now();
        let mut after = self.matcher.deep_clone();
        let fits = after.consume_token(token).is_ok()
            && closing_path(after, &self.vocab, left - 1)
                .is_some_and(|p| p.cost() < left || (p.tokens.is_empty() && left == 1));
        let chosen = if fits {
            token
        } else if let Some(&end) = self.vocab.eog().iter().find(|&&e| self.allows(e)) {
            end
        } else {
            // No way found from the token: the walk's first token from here brings the end
            // closest (a budget already too short for any still ends cut, but nearer).
            closing_path(self.matcher.deep_clone(), &self.vocab, 4 * CLOSE_WINDOW)
                .and_then(|p| p.tokens.first().copied())
                .filter(|&t| self.allows(t))
                .unwrap_or(token)
        };
        self.closings += u64::from(chosen != token);
        self.mask_secs += t.elapsed().as_secs_f64();
        chosen
    }

    fn is_end(&self, token: u32) -> bool {
        self.vocab.eog().binary_search(&token).is_ok()
    }

    /// Tokens replaced by [`Self::within_budget`] so far.
    pub fn closings(&self) -> u64 {
        self.closings
    }

    /// Whether the output is complete and nothing may follow (only end of generation).
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// Whether the output could end here (a complete value, a full grammar match).
    pub fn is_accepting(&mut self) -> bool {
        self.matcher.is_accepting().unwrap_or(false)
    }

    /// A copy at the same position, for a sequence forked from this one.
    pub fn fork(&self) -> ConstraintState {
        ConstraintState {
            kind: self.kind,
            matcher: self.matcher.deep_clone(),
            vocab: self.vocab.clone(),
            mask: self.mask.clone(),
            masks: 0,
            mask_secs: 0.0,
            closings: 0,
        }
    }

    /// Masks computed so far and the seconds they took.
    pub fn mask_time(&self) -> (u64, f64) {
        (self.masks, self.mask_secs)
    }
}
