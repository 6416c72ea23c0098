//! One sequence on its own engine: the simple interface for tools that evaluate one text
//! (`bitnet logits`, `perplexity`, the tests). [`Session::eval`] appends tokens, in
//! chunks of the engine's batch size, and hands back the logits of the last one or, row
//! by row, of every one.

use std::sync::Arc;

use super::batch::{BatchItem, Logits};
use super::profile::Profile;
use super::{Engine, EngineOptions};
use crate::error::CoreError;
use crate::kv::SeqId;
use crate::model::Model;

/// A sequence and the engine it runs on; see the module docs.
#[derive(Debug)]
pub struct Session {
    engine: Engine,
    seq: SeqId,
    /// Logits of the last evaluated position.
    last: Vec<f32>,
    /// `[n][vocab]` logits of an `eval(.., true)` call (grown on demand, never in decode).
    all: Vec<f32>,
}

impl Session {
    /// A session over `model` with the engine settings `opts` (`opts.n_ctx` is this one
    /// sequence's context).
    pub fn new(model: Arc<Model>, opts: &EngineOptions) -> Result<Session, CoreError> {
        let mut engine = Engine::new(model, opts)?;
        let seq = engine.kv_mut().new_sequence();
        let last = vec![0.0; engine.n_vocab()];
        Ok(Session {
            engine,
            seq,
            last,
            all: Vec::new(),
        })
    }

    pub fn model(&self) -> &Arc<Model> {
        self.engine.model()
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Tokens in the KV cache.
    pub fn n_past(&self) -> usize {
        self.engine.kv().sequence(self.seq).map_or(0, |s| s.len())
    }

    /// The tokens whose K/V rows the cache holds.
    pub fn tokens(&self) -> &[u32] {
        self.engine
            .kv()
            .sequence(self.seq)
            .map_or(&[], |s| s.tokens())
    }

    /// Capacity of the KV cache.
    pub fn n_ctx(&self) -> usize {
        self.engine.kv().max_seq_len()
    }

    pub fn n_vocab(&self) -> usize {
        self.engine.n_vocab()
    }

    pub fn threads(&self) -> usize {
        self.engine.threads()
    }

    /// Bytes held by the KV cache.
    pub fn kv_bytes(&self) -> u64 {
        self.engine.kv().bytes()
    }

    /// Prompt tokens evaluated per batch.
    pub fn prefill_chunk(&self) -> usize {
        self.engine.max_batch()
    }

    /// Forgets everything after the first `n` tokens (no-op if `n >= n_past`).
    pub fn truncate(&mut self, n: usize) {
        // The session's own sequence is always live.
        let _ = self.engine.kv_mut().truncate(self.seq, n);
    }

    /// Empties the context.
    pub fn reset(&mut self) {
        self.truncate(0);
    }

    /// Turns per-op timing on or off (see [`Profile`]).
    pub fn set_profiling(&mut self, on: bool) {
        self.engine.set_profiling(on);
    }

    pub fn profile(&self) -> &Profile {
        self.engine.profile()
    }

    /// Logits of the last evaluated position (valid after an `eval`).
    pub fn last_logits(&self) -> &[f32] {
        &self.last
    }

    /// Charges the sampling time of a token to the profile.
    pub fn add_sampling_time(&mut self, secs: f64) {
        self.engine.add_sampling_time(secs);
    }

    /// Evaluates `tokens` after the current context and returns the logits of the last one
    /// (`[vocab]`), or of every one (`[tokens.len()][vocab]`) with `all_logits`.
    pub fn eval(&mut self, tokens: &[u32], all_logits: bool) -> Result<&[f32], CoreError> {
        let vocab = self.engine.n_vocab();
        if all_logits {
            let need = tokens.len() * vocab;
            if self.all.len() < need {
                self.all.resize(need, 0.0);
            }
        }
        let Session {
            engine,
            seq,
            last,
            all,
        } = self;
        let want = if all_logits {
            Logits::All
        } else {
            Logits::Last
        };
        self::eval_rows(engine, *seq, tokens, want, |i, row| {
            if all_logits {
                all[i * vocab..][..vocab].copy_from_slice(row);
            }
            last.copy_from_slice(row);
        })?;
        if all_logits {
            Ok(&self.all[..tokens.len() * vocab])
        } else {
            Ok(&self.last)
        }
    }

    /// The final normed hidden states of `tokens` evaluated after the current context (what
    /// an embedding pools; the head is not run): `[tokens.len()][n_embd]` with `all`, else
    /// the last token's `[n_embd]`. The tokens join the context as `eval`'s do.
    pub fn hidden_states(&mut self, tokens: &[u32], all: bool) -> Result<Vec<f32>, CoreError> {
        let e = self.engine.model().config.n_embd;
        let mut out = vec![0.0f32; if all { tokens.len() * e } else { e }];
        let want = if all {
            Logits::HiddenAll
        } else {
            Logits::HiddenLast
        };
        self::eval_rows(&mut self.engine, self.seq, tokens, want, |i, row| {
            let at = if all { i * e } else { 0 };
            out[at..at + e].copy_from_slice(row);
        })?;
        Ok(out)
    }

    /// Evaluates `tokens` after the current context and calls `on_row(i, logits)` for
    /// every token `i` in order: no `[n][vocab]` buffer is ever made (perplexity).
    pub fn eval_each(
        &mut self,
        tokens: &[u32],
        mut on_row: impl FnMut(usize, &[f32]),
    ) -> Result<(), CoreError> {
        let Session {
            engine, seq, last, ..
        } = self;
        self::eval_rows(engine, *seq, tokens, Logits::All, |i, row| {
            on_row(i, row);
            last.copy_from_slice(row);
        })
    }
}

/// Evaluates `tokens` on sequence `seq` in chunks of the engine's batch; `on_row(i, row)`
/// gets the rows `want` asks for over the whole of `tokens` (every token's, or the last
/// one's; logits or hidden states).
pub(super) fn eval_rows(
    engine: &mut Engine,
    seq: SeqId,
    tokens: &[u32],
    want: Logits,
    mut on_row: impl FnMut(usize, &[f32]),
) -> Result<(), CoreError> {
    if tokens.is_empty() {
        return Err(CoreError::EmptyInput);
    }
    let n_past = engine.kv().sequence(seq)?.len();
    let max = engine.kv().max_seq_len();
    if n_past + tokens.len() > max {
        return Err(CoreError::ContextOverflow {
            n_past,
            n_new: tokens.len(),
            n_ctx: max,
        });
    }
    let chunk = engine.max_batch();
    let mut done = 0;
    while done < tokens.len() {
        let n = (tokens.len() - done).min(chunk);
        let last_chunk = done + n == tokens.len();
        let logits = match want {
            Logits::All | Logits::HiddenAll => want,
            _ if last_chunk => want,
            _ => Logits::None,
        };
        let item = BatchItem {
            seq,
            tokens: &tokens[done..done + n],
            logits,
        };
        engine.forward(std::slice::from_ref(&item), |_, j, row| {
            on_row(done + j, row)
        })?;
        done += n;
    }
    Ok(())
}
