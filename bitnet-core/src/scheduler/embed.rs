//! Embedding requests on the scheduler ([`crate::scheduler::Scheduler::submit_embedding`]):
//! a prompt evaluated for its final normed hidden states instead of a reply, as llama-server
//! runs `/v1/embeddings` beside its completions. Such a request is a prefill and nothing
//! more: its chunks ride in the same passes as other requests' prompt chunks and decode
//! tokens, asking the engine for hidden rows ([`Logits::HiddenAll`], or
//! [`Logits::HiddenLast`] on the last chunk for last-token pooling) where a generation's
//! prompt asks for logits; once its last token is in, the rows are pooled and normalized
//! ([`crate::embed`]), reported, and its sequence is freed. Nothing is sampled or decoded.
//!
//! This file is the request's own part (what it asks for, the rows it gathers); the
//! scheduler's other files give it the path every request takes: admission under the same
//! `max_running` and KV rules, cancellation, retirement.

use crate::embed::{Normalize, Pooling, pool};
use crate::engine::Logits;

/// How an embedding request turns its hidden states into vectors.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct EmbedParams {
    pub pooling: Pooling,
    /// Applied to each pooled vector (and to each token's row under [`Pooling::None`]);
    /// `Normalize(-1)` leaves them as the model gave them.
    pub normalize: Normalize,
}

/// An embedding request's rows while it runs.
#[derive(Debug)]
pub(crate) struct EmbedState {
    params: EmbedParams,
    /// `[rows][n_embd]`, in token order: every evaluated token's, or only the last one's
    /// under last-token pooling.
    hidden: Vec<f32>,
}

impl EmbedState {
    pub(crate) fn new(params: EmbedParams) -> EmbedState {
        EmbedState {
            params,
            hidden: Vec::new(),
        }
    }

    /// Whether the pooling reads every token's row. Such a request evaluates its whole
    /// prompt: a prefix taken from the cache would have no rows.
    pub(crate) fn reads_every_row(&self) -> bool {
        self.params.pooling != Pooling::Last
    }

    /// The rows a prompt chunk asks the engine for; `ends`: the chunk ends the prompt.
    pub(crate) fn rows(&self, ends: bool) -> Logits {
        match (self.reads_every_row(), ends) {
            (true, _) => Logits::HiddenAll,
            (false, true) => Logits::HiddenLast,
            (false, false) => Logits::None,
        }
    }

    /// Takes one hidden row of a pass (they come in token order).
    pub(crate) fn take_row(&mut self, row: &[f32]) {
        self.hidden.extend_from_slice(row);
    }

    /// The request's vectors, pooled from rows of `n_embd` values and normalized: one, or
    /// one a token under [`Pooling::None`].
    pub(crate) fn finish(self, n_embd: usize) -> Vec<Vec<f32>> {
        let mut out = pool(&self.hidden, n_embd, self.params.pooling);
        for v in &mut out {
            self.params.normalize.apply(v);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_pooling_asks_for_the_final_row_only() {
        let last = EmbedState::new(EmbedParams {
            pooling: Pooling::Last,
            normalize: Normalize(2),
        });
        assert!(!last.reads_every_row());
        assert_eq!(last.rows(false), Logits::None);
        assert_eq!(last.rows(true), Logits::HiddenLast);
        for pooling in [Pooling::Mean, Pooling::Cls, Pooling::None] {
            let s = EmbedState::new(EmbedParams {
                pooling,
                normalize: Normalize(2),
            });
            assert!(s.reads_every_row());
            assert_eq!(s.rows(false), Logits::HiddenAll);
            assert_eq!(s.rows(true), Logits::HiddenAll);
        }
    }

    #[test]
    fn rows_are_pooled_then_normalized() {
        let mut s = EmbedState::new(EmbedParams {
            pooling: Pooling::Mean,
            normalize: Normalize(2),
        });
        s.take_row(&[1.0, 2.0]);
        s.take_row(&[5.0, 6.0]);
        assert_eq!(s.finish(2), vec![vec![0.6, 0.8]]);
        let mut s = EmbedState::new(EmbedParams {
            pooling: Pooling::None,
            normalize: Normalize(-1),
        });
        s.take_row(&[1.0, 2.0]);
        s.take_row(&[5.0, 6.0]);
        assert_eq!(s.finish(2), vec![vec![1.0, 2.0], vec![5.0, 6.0]]);
    }
}
