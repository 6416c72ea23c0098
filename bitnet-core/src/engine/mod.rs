//! The engine: runs batches of tokens from many sequences over one shared [`Model`]. It
//! owns the KV cache (through its [`KvManager`], which keeps the sequences), one batch
//! layout ([`batch`]) and the workspace a forward pass computes in (the thread pool, one,
//! pinned; activation buffers sized for a batch; attention scratch; the head's buffers),
//! all allocated once in [`Engine::new`].
//!
//! [`Engine::forward`] evaluates one batch: every item's tokens after what its sequence
//! holds, at their own positions. It reserves the items' KV blocks, lays the batch out, runs
//! the layers (`forward.rs`: every weight matrix streamed once for the whole batch, attention
//! over each token's own blocks) and hands out logits only for the rows that ask for them,
//! one row at a time, into preallocated memory; then it commits the tokens to their
//! sequences.
//!
//! Files: `weight_read.rs` the in-place read of a token's weights (decode's bound);
//! `batch.rs` the batch; `workspace.rs` the pool and buffers a pass computes in;
//! `forward.rs` the per-layer math;
//! `matmul.rs` products across threads (and the head); `buffers.rs` the per-token buffers;
//! `attention.rs` paged attention; `compact.rs` removing positions (shift, evict);
//! `attn_stats.rs` optional attention statistics; `profile.rs` the per-op timer;
//! `session.rs` one sequence on its own engine.

mod attention;
mod attn_stats;
pub mod batch;
mod buffers;
mod compact;
mod forward;
mod head_acts;
mod matmul;
mod options;
pub mod profile;
mod session;
mod weight_read;
mod workspace;

use std::sync::Arc;

use bitnet_kernels::Isa;

use crate::error::CoreError;
use crate::kv::{KvError, KvManager, KvRotate, PoolStats, SeqId};
use crate::model::Model;

pub use attn_stats::ENTROPY_EMA_WEIGHT;
use batch::Batch;
pub use batch::{BatchItem, Logits};
pub use options::{ActPrecision, DEFAULT_BLOCK_TOKENS, EngineOptions};
pub use profile::{OpKind, Profile, ProfileRow};
pub use session::Session;
pub use weight_read::WeightRead;
use workspace::Workspace;

impl EngineOptions {
    /// The threads a pass runs on: `threads`, or the physical cores when it is 0.
    pub fn thread_count(&self) -> usize {
        if self.threads == 0 {
            default_threads()
        } else {
            self.threads
        }
    }
}

/// The engine; see the module docs.
#[derive(Debug)]
pub struct Engine {
    model: Arc<Model>,
    kv: KvManager,
    /// The pass under way, laid out (kept to reuse its memory).
    batch: Batch,
    work: Workspace,
    /// Tokens evaluated by forward passes since the engine started (a debug counter).
    evaluated: u64,
}

// The model is shared across threads (a server hands it to its engine thread).
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<Model>();
    const fn sendable<T: Send>() {}
    sendable::<Engine>();
};

/// Physical cores (logical CPUs when the topology is unknown).
pub fn default_threads() -> usize {
    crate::threadpool::physical_core_count().max(1)
}

impl Engine {
    /// An engine over `model`: the pool, buffers and KV cache are allocated here, once. The
    /// pool pins the calling thread (its thread 0), so make the engine on the thread that
    /// will run it.
    pub fn new(model: Arc<Model>, opts: &EngineOptions) -> Result<Engine, CoreError> {
        let cfg = &model.config;
        let n_ctx = if opts.n_ctx == 0 {
            model.default_n_ctx()
        } else {
            opts.n_ctx
        };
        if n_ctx > 1 << 24 {
            return Err(CoreError::InvalidOption {
                option: "n_ctx",
                reason: format!("{n_ctx} is not in 1..=16777216"),
            });
        }
        if opts.batch == 0 {
            return Err(CoreError::InvalidOption {
                option: "batch",
                reason: "must be at least 1".into(),
            });
        }
        if cfg.rope_freq_scale != 1.0 {
            return Err(CoreError::Unsupported(format!(
                "rope frequency scaling {} (linear rope scaling)",
                cfg.rope_freq_scale
            )));
        }
        let layer_types = opts.checked_layer_kv_types(cfg.n_layer, cfg.head_dim)?;
        let mut kv = KvManager::with_layers(
            cfg.n_head_kv,
            cfg.head_dim,
            &layer_types,
            n_ctx,
            opts.block_tokens,
            model.isa,
        )?;
        let auto_skips = opts.kv_rotate == KvRotate::Auto
            && !bitnet_kernels::float::hadamard_supported(cfg.head_dim);
        if !auto_skips {
            let sides: Vec<(bool, bool)> = layer_types
                .iter()
                .map(|&(k, v)| opts.kv_rotate.sides(k, v))
                .collect();
            kv.set_rotation(&sides)?;
        }
        let work = Workspace::new(&model, opts, &kv)?;
        let batch = Batch::with_capacity(work.max_batch(), kv.storage().n_blocks());
        Ok(Engine {
            kv,
            batch,
            work,
            evaluated: 0,
            model,
        })
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// The kernel set the engine runs (the model's).
    pub fn isa(&self) -> Isa {
        self.model.isa
    }

    pub fn threads(&self) -> usize {
        self.work.threads()
    }

    /// Tokens one forward pass takes at most.
    pub fn max_batch(&self) -> usize {
        self.work.max_batch()
    }

    pub fn n_vocab(&self) -> usize {
        self.model.config.n_vocab
    }

    /// The KV cache: its sequences, blocks and figures.
    pub fn kv(&self) -> &KvManager {
        &self.kv
    }

    /// The KV cache, to create, fork, truncate and free sequences or reuse a cached prefix.
    pub fn kv_mut(&mut self) -> &mut KvManager {
        &mut self.kv
    }

    /// A new, empty sequence.
    pub fn new_sequence(&mut self) -> SeqId {
        self.kv.new_sequence()
    }

    /// Frees sequence `seq`; its full blocks stay in the prefix cache.
    pub fn free_sequence(&mut self, seq: SeqId) -> Result<(), KvError> {
        self.kv.free_sequence(seq)
    }

    /// Forgets every position of `seq` after its first `len` (no-op past its end).
    pub fn truncate(&mut self, seq: SeqId, len: usize) -> Result<(), KvError> {
        self.kv.truncate(seq, len)
    }

    /// Forgets the blocks kept for reuse by later prompts.
    pub fn clear_prefix_cache(&mut self) {
        self.kv.clear_prefix_cache();
    }

    /// The tokens whose K/V rows sequence `seq` holds.
    pub fn sequence_tokens(&self, seq: SeqId) -> Result<&[u32], KvError> {
        Ok(self.kv.sequence(seq)?.tokens())
    }

    /// Positions sequence `seq` holds.
    pub fn sequence_len(&self, seq: SeqId) -> Result<usize, KvError> {
        Ok(self.kv.sequence(seq)?.len())
    }

    /// Positions one sequence may hold at most.
    pub fn max_seq_len(&self) -> usize {
        self.kv.max_seq_len()
    }

    /// Has `seq` record the attention mass each position receives (heavy-hitter eviction).
    pub fn track_attention_mass(&mut self, seq: SeqId, on: bool) -> Result<(), KvError> {
        self.kv.track_attention_mass(seq, on)
    }

    /// Makes the empty sequence `dst` start with the first `n` positions of `src`, sharing
    /// their blocks.
    pub fn share_prefix(&mut self, src: SeqId, dst: SeqId, n: usize) -> Result<(), KvError> {
        self.kv.share_prefix(src, dst, n)
    }

    /// Starts the empty sequence `seq` with the longest prefix of `prompt` the prefix cache
    /// holds; returns its length.
    pub fn reuse_prefix(&mut self, seq: SeqId, prompt: &[u32]) -> Result<usize, KvError> {
        self.kv.reuse_prefix(seq, prompt)
    }

    /// Cuts `seq` back to whole blocks; returns its new length.
    pub fn trim_to_whole_blocks(&mut self, seq: SeqId) -> Result<usize, KvError> {
        self.kv.trim_to_whole_blocks(seq)
    }

    /// Blocks `seq` still needs to hold `n_total` positions.
    pub fn blocks_needed(&self, seq: SeqId, n_total: usize) -> Result<usize, KvError> {
        self.kv.blocks_needed(seq, n_total)
    }

    /// Blocks free in the pool (those only the prefix cache holds included).
    pub fn available_blocks(&self) -> usize {
        self.kv.available_blocks()
    }

    /// The pool's block figures.
    pub fn pool_stats(&self) -> PoolStats {
        self.kv.pool_stats()
    }

    /// Whether b1 keys are scored by XNOR/popcount.
    pub fn kv_xnor(&self) -> bool {
        self.work.kv_xnor
    }

    /// Tokens evaluated by forward passes so far (prompt reuse shows here as tokens not
    /// evaluated).
    pub fn evaluated_tokens(&self) -> u64 {
        self.evaluated
    }

    /// Turns per-op timing on or off (see [`Profile`]); turning it on clears the counters.
    pub fn set_profiling(&mut self, on: bool) {
        self.work.set_profiling(on);
    }

    /// The timings accumulated since profiling was turned on.
    pub fn profile(&self) -> &Profile {
        &self.work.profile
    }

    /// The mean attention entropy (nats) of each layer's decode rows, averaged over heads
    /// and tokens of a sampled pass and then over passes by an exponential moving average
    /// ([`ENTROPY_EMA_WEIGHT`]); `None` when sampling is off
    /// ([`EngineOptions::attn_entropy_every`]) or nothing was sampled yet.
    pub fn attention_entropy(&self) -> Option<&[f32]> {
        self.work.attn_stats.entropy()
    }

    /// Decode passes sampled for [`Engine::attention_entropy`] so far.
    pub fn attention_entropy_samples(&self) -> u64 {
        self.work.attn_stats.entropy_samples()
    }

    /// The sampling interval of [`Engine::attention_entropy`] (0 = off).
    pub fn attention_entropy_every(&self) -> usize {
        self.work.attn_stats.entropy_every()
    }

    /// Charges sampling time to the profile.
    pub fn add_sampling_time(&mut self, secs: f64) {
        if self.work.profile.is_enabled() {
            self.work.profile.add(OpKind::Sampling, secs, 1);
        }
    }

    /// Refuses a token id outside the vocabulary (naming the first one and its index).
    pub(crate) fn check_token_ids(&self, tokens: &[u32]) -> Result<(), CoreError> {
        let n_vocab = self.n_vocab();
        match tokens.iter().position(|&t| t as usize >= n_vocab) {
            Some(index) => Err(CoreError::TokenOutOfRange {
                token: tokens[index],
                index,
                n_vocab,
            }),
            None => Ok(()),
        }
    }

    /// Checks a batch before anything is reserved: its size, one item per sequence, token
    /// ids in the vocabulary, and room in every sequence.
    fn check(&self, items: &[BatchItem<'_>]) -> Result<usize, CoreError> {
        let total: usize = items.iter().map(|it| it.tokens.len()).sum();
        if total == 0 {
            return Err(CoreError::EmptyInput);
        }
        if total > self.max_batch() {
            return Err(CoreError::InvalidOption {
                option: "batch",
                reason: format!(
                    "{total} tokens in one forward pass, the engine takes {} at most",
                    self.max_batch()
                ),
            });
        }
        let max_pos = self.kv.max_seq_len();
        for (i, it) in items.iter().enumerate() {
            if items[..i].iter().any(|o| o.seq == it.seq) {
                return Err(CoreError::InvalidOption {
                    option: "batch",
                    reason: format!("sequence {} appears twice in one batch", it.seq),
                });
            }
            self.check_token_ids(it.tokens)?;
            let n_past = self.kv.sequence(it.seq)?.len();
            if n_past + it.tokens.len() > max_pos {
                return Err(CoreError::ContextOverflow {
                    n_past,
                    n_new: it.tokens.len(),
                    n_ctx: max_pos,
                });
            }
        }
        Ok(total)
    }

    /// Evaluates a batch: each item's tokens after what its sequence holds, at their own
    /// positions, all in one pass over the weights (at most [`Engine::max_batch`] tokens
    /// in all; one item per sequence). The tokens are appended to their sequences.
    /// `on_logits(item, token index in item, logits)` is called for each row an item asks
    /// for, in batch order; the slice is valid during the call only.
    pub fn forward(
        &mut self,
        items: &[BatchItem<'_>],
        mut on_logits: impl FnMut(usize, usize, &[f32]),
    ) -> Result<(), CoreError> {
        let total = self.check(items)?;
        for it in items {
            if !it.tokens.is_empty() {
                self.kv.reserve(it.seq, it.tokens.len())?;
            }
        }
        self.batch.lay_out(items, &self.kv)?;
        let mut track = false;
        for it in items {
            track |= self.kv.sequence(it.seq)?.attention_mass().is_some();
        }
        let Engine {
            model,
            kv,
            batch,
            work,
            ..
        } = self;
        let bt = kv.block_tokens();
        work.begin_pass(batch, track, bt);
        work.run(model, kv.storage_mut(), batch, &mut on_logits)?;
        work.attn_stats.end_pass(model.config.n_head);
        self.evaluated += total as u64;
        // Commit: the sequences now hold the tokens; blocks that became full join the
        // prefix cache.
        let mut first_tok = 0;
        for it in items {
            let (work, batch) = (&self.work, &self.batch);
            self.kv.commit(it.seq, it.tokens, |mass| {
                let table_start = batch.table[first_tok].0 as usize;
                work.attn_stats.add_mass(table_start, bt, mass);
            })?;
            first_tok += it.tokens.len();
        }
        Ok(())
    }
}
