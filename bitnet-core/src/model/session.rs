//! An inference session: the KV cache, every activation buffer, the rope table and the
//! thread pool, all allocated once in [`Session::new`] (the decode path allocates nothing).
//! [`Session::eval`] appends tokens: prompts in chunks through the matrix-matrix kernels, a
//! single token through the matrix-vector ones.

use bitnet_kernels::float::{Q8_0_BLOCK_BYTES, QK8_0, RopeTable};
use bitnet_kernels::{ActScale, Isa};

use super::Model;
use super::linear::{bit_words, padded};
use super::par::Bufs;
use super::profile::{OpKind, Profile, SubTimer};
use crate::error::CoreError;
use crate::kv_cache::{KvCache, KvType};
use crate::threadpool::{PinPolicy, ThreadPool};

/// Tokens per head call when every position's logits are wanted.
pub(crate) const HEAD_BATCH: usize = 32;

/// A session over a [`Model`]; see the module docs.
#[derive(Debug)]
pub struct Session<'m> {
    pub(crate) model: &'m Model,
    pub(crate) isa: Isa,
    pub(crate) pool: ThreadPool,
    pub(crate) kv: KvCache,
    pub(crate) rope: RopeTable,
    pub(crate) n_ctx: usize,
    pub(crate) chunk: usize,
    pub(crate) bufs: Bufs,
    /// Blocked outputs of up to three projections of a group.
    pub(crate) blk: [Vec<f32>; 3],
    /// Attention scores, `group` context-sized rows per thread.
    pub(crate) scores: Vec<f32>,
    /// Final normed hidden states for the head, `[HEAD_BATCH][n_embd]`.
    pub(crate) hn: Vec<f32>,
    /// The same as Q8_0 rows (`--head q8`).
    pub(crate) hq8: Vec<u8>,
    /// Last-position logits.
    pub(crate) logits: Vec<f32>,
    /// `[n][vocab]` logits of an `all_logits` call (grown on demand, never in decode).
    pub(crate) all_logits: Vec<f32>,
    /// Blocked head output for `HEAD_BATCH` tokens (allocated with `all_logits`).
    pub(crate) head_blk: Vec<f32>,
    pub(crate) profile: Profile,
    pub(crate) timer: SubTimer,
}

impl<'m> Session<'m> {
    /// A session with room for `n_ctx` tokens (0: the model's default).
    pub fn new(model: &'m Model, n_ctx: usize) -> Result<Session<'m>, CoreError> {
        let cfg = &model.config;
        let n_ctx = if n_ctx == 0 { model.n_ctx } else { n_ctx };
        if n_ctx == 0 || n_ctx > 1 << 24 {
            return Err(CoreError::InvalidOption {
                option: "n_ctx",
                reason: format!("{n_ctx} is not in 1..=16777216"),
            });
        }
        if cfg.rope_freq_scale != 1.0 {
            return Err(CoreError::Unsupported(format!(
                "rope frequency scaling {} (linear rope scaling)",
                cfg.rope_freq_scale
            )));
        }
        let chunk = model.prefill_chunk.clamp(1, n_ctx);
        let pin = if model.pin {
            PinPolicy::Cores
        } else {
            PinPolicy::None
        };
        let pool = ThreadPool::new(model.threads, pin)?;
        if model.kv_type == KvType::Q8 && !cfg.head_dim.is_multiple_of(QK8_0) {
            return Err(CoreError::InvalidOption {
                option: "kv_type",
                reason: format!(
                    "a Q8_0 KV cache needs the head dimension a multiple of {QK8_0}, got {}",
                    cfg.head_dim
                ),
            });
        }
        let mut kv = KvCache::new(
            cfg.n_layer,
            n_ctx,
            cfg.n_head_kv,
            cfg.head_dim,
            model.kv_type,
        )?;
        kv.set_isa(model.isa);
        let rope = RopeTable::new(cfg.rope_dim, cfg.rope_theta, n_ctx);

        let (e, qd, kvd, ff) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim(), cfg.n_ff);
        let max_in = e.max(qd).max(ff);
        let bufs = Bufs {
            x: vec![0.0; chunk * e],
            xn: vec![0.0; chunk * max_in],
            xq: vec![0; chunk * padded(max_in)],
            acts: vec![ActScale { scale: 1.0, sum: 0 }; chunk],
            bits: vec![0; chunk * bit_words(max_in)],
            bit_scales: vec![0.0; chunk],
            q: vec![0.0; chunk * qd],
            k: vec![0.0; chunk * kvd],
            v: vec![0.0; chunk * kvd],
            att: vec![0.0; chunk * qd],
            ff: vec![0.0; chunk * ff],
        };
        let blk = [
            vec![0.0; chunk * qd.max(ff).max(e)],
            vec![0.0; chunk * kvd.max(ff)],
            vec![0.0; chunk * kvd],
        ];
        let q8_row = e.div_ceil(QK8_0) * Q8_0_BLOCK_BYTES;
        let mut s = Session {
            model,
            isa: model.isa,
            kv,
            rope,
            n_ctx,
            chunk,
            bufs,
            blk,
            scores: vec![0.0; pool.n_threads() * cfg.gqa_group() * n_ctx],
            pool,
            hn: vec![0.0; HEAD_BATCH * e],
            hq8: vec![0; HEAD_BATCH * q8_row],
            logits: vec![0.0; cfg.n_vocab],
            all_logits: Vec::new(),
            head_blk: Vec::new(),
            profile: Profile::new(false),
            timer: SubTimer::default(),
        };
        s.reset();
        Ok(s)
    }

    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// Tokens in the KV cache.
    pub fn n_past(&self) -> usize {
        self.kv.len()
    }

    /// Capacity of the KV cache.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    pub fn n_vocab(&self) -> usize {
        self.model.config.n_vocab
    }

    pub fn threads(&self) -> usize {
        self.pool.n_threads()
    }

    /// Bytes held by the KV cache.
    pub fn kv_bytes(&self) -> u64 {
        self.kv.bytes()
    }

    /// Prompt tokens evaluated per batch.
    pub fn prefill_chunk(&self) -> usize {
        self.chunk
    }

    /// Forgets everything after the first `n` tokens (no-op if `n >= n_past`).
    pub fn truncate(&mut self, n: usize) {
        self.kv.truncate(n);
    }

    /// Empties the context.
    pub fn reset(&mut self) {
        self.kv.clear();
    }

    /// Turns per-op timing on or off (see [`Profile`]); turning it on clears the counters.
    pub fn set_profiling(&mut self, on: bool) {
        if on && !self.profile.is_enabled() {
            self.profile.clear();
            let _ = self.pool.take_wait_stats();
        }
        self.profile.set_enabled(on);
        self.pool.set_profiling(on);
    }

    /// The timings accumulated since profiling was turned on. Each parallel region is
    /// charged to its op less the time the calling thread waited for the other threads, which
    /// is the `pool_wait` row: the rows add up to the wall time of the evals (plus sampling).
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Logits of the last evaluated position (valid after an `eval`).
    pub fn last_logits(&self) -> &[f32] {
        &self.logits
    }

    /// Charges the sampling time of a token to the profile (for the generation loop).
    pub fn add_sampling_time(&mut self, secs: f64) {
        if self.profile.is_enabled() {
            self.profile.add(OpKind::Sampling, secs, 1);
        }
    }

    /// Evaluates `tokens` after the current context and returns the logits of the last one
    /// (`[vocab]`), or of every one (`[tokens.len()][vocab]`) with `all_logits`.
    pub fn eval(&mut self, tokens: &[u32], all_logits: bool) -> Result<&[f32], CoreError> {
        let n_vocab = self.model.config.n_vocab;
        if tokens.is_empty() {
            return Err(CoreError::EmptyInput);
        }
        if let Some((index, &token)) = tokens
            .iter()
            .enumerate()
            .find(|&(_, &t)| t as usize >= n_vocab)
        {
            return Err(CoreError::TokenOutOfRange {
                token,
                index,
                n_vocab,
            });
        }
        let n_past = self.n_past();
        if n_past + tokens.len() > self.n_ctx {
            return Err(CoreError::ContextOverflow {
                n_past,
                n_new: tokens.len(),
                n_ctx: self.n_ctx,
            });
        }
        if all_logits {
            let need = tokens.len() * n_vocab;
            if self.all_logits.len() < need {
                self.all_logits.resize(need, 0.0);
            }
            if self.head_blk.len() < HEAD_BATCH * n_vocab {
                self.head_blk.resize(HEAD_BATCH * n_vocab, 0.0);
            }
        }
        let mut done = 0;
        while done < tokens.len() {
            let n = (tokens.len() - done).min(self.chunk);
            let chunk = &tokens[done..done + n];
            self.forward_chunk(chunk, if all_logits { Some(done) } else { None })?;
            done += n;
        }
        if all_logits {
            Ok(&self.all_logits[..tokens.len() * n_vocab])
        } else {
            Ok(&self.logits)
        }
    }
}
