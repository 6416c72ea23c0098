//! The engine: one per process. It holds the shared [`Model`], the thread pool (one,
//! pinned), activation buffers sized for a batch of tokens, the paged KV pool and the
//! table of live sequences. [`Engine::forward`] evaluates one batch of tokens drawn from
//! several sequences at their own positions: every weight matrix is streamed once for the
//! whole batch, attention reads each sequence's own blocks, and logits are produced only
//! for the rows that ask for them, one row at a time, into preallocated memory.
//!
//! Sequences are created, forked (sharing blocks), truncated and freed here; a freed
//! sequence's blocks stay in the prefix cache, and [`Engine::reuse_prefix`] lets a new
//! sequence start from the longest cached prefix of its prompt.

use std::sync::Arc;

use bitnet_kernels::float::{Q8_0_BLOCK_BYTES, QK8_0, RopeTable};
use bitnet_kernels::{ActScale, Isa};

use super::Model;
use super::attn_stats::AttnStats;
use super::linear::{bit_words, padded};
use super::par::Bufs;
use super::profile::{OpKind, Profile, SubTimer};
use crate::error::CoreError;
use crate::kv::pool::ROOT_NODE;
use crate::kv::{KvPool, KvRotate, KvType, PoolStats, Sequence};
use crate::threadpool::{PinPolicy, ThreadPool};

/// Tokens per head call when many rows want logits.
pub(crate) const HEAD_BATCH: usize = 32;

/// Run-time settings of an [`Engine`]: none of them is part of the model.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Threads for the forward pass, the caller included; 0 = the physical cores.
    pub threads: usize,
    /// Pin pool threads to cores.
    pub pin: bool,
    /// KV tokens in total, shared by all sequences (llama.cpp's unified cache); 0 = the
    /// model's training context, at most 4096.
    pub n_ctx: usize,
    /// Tokens one forward pass evaluates at most (sizes the activation buffers; prompts
    /// longer than this are evaluated in chunks).
    pub batch: usize,
    /// Element format of the K cache (`-ctk`).
    pub k_type: KvType,
    /// Element format of the V cache (`-ctv`), chosen independently of K's.
    pub v_type: KvType,
    /// Which of K and V are stored Hadamard-rotated (`--kv-rotate`; see
    /// [`KvPool::set_rotation`]). An explicit side with a head dimension that is not a
    /// power of two is an error; `Auto` then rotates nothing.
    pub kv_rotate: KvRotate,
    /// Score `b1` keys by XNOR/popcount against a sign-quantized query (`--kv-xnor`)
    /// instead of the float query; needs `k_type` B1.
    pub kv_xnor: bool,
    /// Positions per KV block (a power of two).
    pub block_tokens: usize,
    /// Sample the per-layer attention entropy every this many decode passes (see
    /// [`Engine::attention_entropy`]); 0 = off, at no cost.
    pub attn_entropy_every: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            threads: 0,
            pin: true,
            n_ctx: 0,
            batch: 256,
            k_type: KvType::F16,
            v_type: KvType::F16,
            kv_rotate: KvRotate::Off,
            kv_xnor: false,
            block_tokens: DEFAULT_BLOCK_TOKENS,
            attn_entropy_every: 0,
        }
    }
}

/// Positions per KV block by default (see the README's engine section for the measurement).
pub const DEFAULT_BLOCK_TOKENS: usize = 16;

/// A sequence's handle. Stale handles (of freed sequences) are refused, never confused
/// with a newer sequence in the same slot.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId {
    index: u32,
    generation: u32,
}

impl std::fmt::Display for SeqId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}.{}", self.index, self.generation)
    }
}

#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    seq: Option<Sequence>,
}

/// Which logits a batch item wants.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Logits {
    /// None (a prompt chunk that does not end the prompt).
    None,
    /// The last token's.
    Last,
    /// Every token's, in order.
    All,
}

/// Tokens of one sequence to evaluate after what it holds.
#[derive(Clone, Debug)]
pub struct BatchItem<'a> {
    pub seq: SeqId,
    pub tokens: &'a [u32],
    pub logits: Logits,
}

/// Per-token bookkeeping of the batch being evaluated (preallocated).
#[derive(Debug, Default)]
pub(crate) struct BatchScratch {
    pub(crate) tokens: Vec<u32>,
    /// Position of each token in its sequence.
    pub(crate) pos: Vec<usize>,
    /// KV block and row of each token's position.
    pub(crate) block: Vec<u32>,
    pub(crate) slot: Vec<u32>,
    /// Where each token's sequence's block table starts in `tables` (and its length).
    pub(crate) table: Vec<(u32, u32)>,
    /// The block tables of the batch's sequences, back to back.
    pub(crate) tables: Vec<u32>,
    /// `(item, token index in item, batch token)` of each logits row wanted, in order.
    pub(crate) rows: Vec<(u32, u32, u32)>,
    /// Whether each token is a decode row (its item evaluates that one token).
    pub(crate) decode: Vec<bool>,
}

/// What the pool holds and how it is used.
#[derive(Copy, Clone, Debug)]
pub struct KvStats {
    pub pool: PoolStats,
    /// Live sequences.
    pub sequences: usize,
    /// Positions held by live sequences (shared positions counted per sequence).
    pub tokens: usize,
}

/// The engine; see the module docs.
#[derive(Debug)]
pub struct Engine {
    pub(crate) model: Arc<Model>,
    pub(crate) isa: Isa,
    pub(crate) pool: ThreadPool,
    pub(crate) kv: KvPool,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    pub(crate) rope: RopeTable,
    /// Positions one sequence may reach (the pool's capacity).
    pub(crate) max_pos: usize,
    /// Tokens per forward pass at most.
    pub(crate) chunk: usize,
    pub(crate) bufs: Bufs,
    pub(crate) batch: BatchScratch,
    /// Blocked outputs of up to three projections of a group.
    pub(crate) blk: [Vec<f32>; 3],
    /// Attention scratch, [`super::par::attention_scratch`] floats per thread: scores, a
    /// run's copy, a chunk's output and statistics, the quantized query, and the thread's
    /// share of the chunk results left for merging.
    pub(crate) scores: Vec<f32>,
    /// Final normed hidden states for the head, `[HEAD_BATCH][n_embd]`.
    pub(crate) hn: Vec<f32>,
    /// The same as Q8_0 rows (`--head q8`).
    pub(crate) hq8: Vec<u8>,
    /// One row of logits (the last one handed out).
    pub(crate) logits: Vec<f32>,
    /// Blocked head output for up to `HEAD_BATCH` rows.
    pub(crate) head_blk: Vec<f32>,
    pub(crate) profile: Profile,
    pub(crate) timer: SubTimer,
    /// Attention entropy and received mass, when asked for.
    pub(crate) attn_stats: AttnStats,
    /// Tokens evaluated by forward passes since the engine started (a debug counter).
    evaluated: u64,
    /// B1 keys scored by XNOR/popcount (`EngineOptions::kv_xnor`).
    pub(crate) kv_xnor: bool,
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
    /// An engine over `model`: the pool, buffers and KV cache are allocated here, once.
    pub fn new(model: Arc<Model>, opts: &EngineOptions) -> Result<Engine, CoreError> {
        let cfg = &model.config;
        let n_ctx = if opts.n_ctx == 0 {
            cfg.n_ctx_train.clamp(1, 4096)
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
        for (option, t) in [("k_type", opts.k_type), ("v_type", opts.v_type)] {
            let f = t.format();
            if !cfg.head_dim.is_multiple_of(f.block_len) {
                return Err(CoreError::InvalidOption {
                    option,
                    reason: format!(
                        "the {} KV cache type stores blocks of {} values: the model's head \
                         dimension {} is not a multiple of {} (choose another cache type)",
                        f.name, f.block_len, cfg.head_dim, f.block_len
                    ),
                });
            }
        }
        let threads = if opts.threads == 0 {
            default_threads()
        } else {
            opts.threads
        };
        let pin = if opts.pin {
            PinPolicy::Cores
        } else {
            PinPolicy::None
        };
        if opts.kv_xnor && opts.k_type.format().xnor_scores.is_none() {
            return Err(CoreError::InvalidOption {
                option: "kv_xnor",
                reason: format!(
                    "XNOR/popcount scoring reads sign-bit keys: it needs the b1 K cache type \
                     (K is {})",
                    opts.k_type.name()
                ),
            });
        }
        let mut kv = KvPool::new(
            cfg.n_layer,
            cfg.n_head_kv,
            cfg.head_dim,
            (opts.k_type, opts.v_type),
            n_ctx,
            opts.block_tokens,
            model.isa,
        )?;
        let (rot_k, rot_v) = opts.kv_rotate.sides(opts.k_type, opts.v_type);
        let auto_skips = opts.kv_rotate == KvRotate::Auto
            && !bitnet_kernels::float::hadamard_supported(cfg.head_dim);
        if !auto_skips {
            kv.set_rotation(rot_k, rot_v)?;
        }
        let pool = ThreadPool::new(threads, pin)?;
        // A sequence holds at most `-c` positions, as asked. The pool is whole blocks, so
        // it may hold up to a block less one more in all; other sequences use that room.
        let max_pos = n_ctx.min(kv.capacity_tokens());
        let chunk = opts.batch.min(max_pos).max(1);
        let rope = RopeTable::new(cfg.rope_dim, cfg.rope_theta, max_pos);

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
        let group = cfg.gqa_group();
        // Sized for the pool's whole blocks, as the attention pass lays rows out.
        let per_thread = super::par::attention_scratch(
            group,
            cfg.head_dim,
            kv.capacity_tokens(),
            kv.block_tokens(),
            opts.kv_xnor,
            opts.k_type.format().int8_scores.is_some(),
        );
        let batch = BatchScratch {
            tokens: Vec::with_capacity(chunk),
            pos: Vec::with_capacity(chunk),
            block: Vec::with_capacity(chunk),
            slot: Vec::with_capacity(chunk),
            table: Vec::with_capacity(chunk),
            tables: Vec::with_capacity(kv.n_blocks()),
            rows: Vec::with_capacity(chunk),
            decode: Vec::with_capacity(chunk),
        };
        let attn_stats = AttnStats::new(
            opts.attn_entropy_every,
            cfg.n_layer,
            chunk * (cfg.n_head / group.max(1)),
        );
        Ok(Engine {
            isa: model.isa,
            kv,
            slots: Vec::new(),
            free_slots: Vec::new(),
            rope,
            max_pos,
            chunk,
            bufs,
            batch,
            blk,
            scores: vec![0.0; pool.n_threads() * per_thread],
            pool,
            hn: vec![0.0; HEAD_BATCH * e],
            hq8: vec![0; HEAD_BATCH * q8_row],
            logits: vec![0.0; cfg.n_vocab],
            // Untouched pages of a zeroed allocation cost no memory until a batch of
            // several logits rows first uses them.
            head_blk: vec![0.0; HEAD_BATCH * cfg.n_vocab],
            profile: Profile::new(false),
            timer: SubTimer::default(),
            attn_stats,
            evaluated: 0,
            kv_xnor: opts.kv_xnor,
            model,
        })
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    pub fn threads(&self) -> usize {
        self.pool.n_threads()
    }

    /// Positions one sequence may hold at most: `-c` as given (the pool, rounded up to whole
    /// blocks, may hold a few more in all).
    pub fn max_seq_len(&self) -> usize {
        self.max_pos
    }

    /// Tokens the KV pool holds in all: `-c` rounded up to whole blocks.
    pub fn n_ctx(&self) -> usize {
        self.kv.capacity_tokens()
    }

    /// Tokens one forward pass takes at most.
    pub fn max_batch(&self) -> usize {
        self.chunk
    }

    pub fn n_vocab(&self) -> usize {
        self.model.config.n_vocab
    }

    /// The K cache's element format.
    pub fn k_type(&self) -> KvType {
        self.kv.k_type()
    }

    /// The V cache's element format.
    pub fn v_type(&self) -> KvType {
        self.kv.v_type()
    }

    /// Whether K and whether V rows are stored Hadamard-rotated.
    pub fn kv_rotated(&self) -> (bool, bool) {
        (self.kv.k_rotated(), self.kv.v_rotated())
    }

    /// Whether b1 keys are scored by XNOR/popcount.
    pub fn kv_xnor(&self) -> bool {
        self.kv_xnor
    }

    /// Bytes of the KV pool.
    pub fn kv_bytes(&self) -> u64 {
        self.kv.bytes()
    }

    pub fn block_tokens(&self) -> usize {
        self.kv.block_tokens()
    }

    /// Tokens evaluated by forward passes so far (prompt reuse shows here as tokens not
    /// evaluated).
    pub fn evaluated_tokens(&self) -> u64 {
        self.evaluated
    }

    pub fn kv_stats(&self) -> KvStats {
        let live = self.slots.iter().filter_map(|s| s.seq.as_ref());
        let (mut sequences, mut tokens) = (0, 0);
        for s in live {
            sequences += 1;
            tokens += s.len();
        }
        KvStats {
            pool: self.kv.stats(),
            sequences,
            tokens,
        }
    }

    /// Drops every cached prefix (a `/clear`, or a test that wants a cold cache).
    pub fn clear_prefix_cache(&mut self) {
        self.kv.clear_cache();
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

    /// The timings accumulated since profiling was turned on.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The mean attention entropy (nats) of each layer's decode rows, averaged over heads
    /// and tokens of a sampled pass and then over passes by an exponential moving average
    /// ([`super::attn_stats::ENTROPY_EMA_WEIGHT`]); `None` when sampling is off
    /// ([`EngineOptions::attn_entropy_every`]) or nothing was sampled yet.
    pub fn attention_entropy(&self) -> Option<&[f32]> {
        self.attn_stats.entropy()
    }

    /// Decode passes sampled for [`Engine::attention_entropy`] so far.
    pub fn attention_entropy_samples(&self) -> u64 {
        self.attn_stats.entropy_samples()
    }

    /// The sampling interval of [`Engine::attention_entropy`] (0 = off).
    pub fn attention_entropy_every(&self) -> usize {
        self.attn_stats.entropy_every()
    }

    /// Charges sampling time to the profile.
    pub fn add_sampling_time(&mut self, secs: f64) {
        if self.profile.is_enabled() {
            self.profile.add(OpKind::Sampling, secs, 1);
        }
    }

    /// A new, empty sequence. Its token list and block table get their full capacity now
    /// (the most a sequence can hold), so evaluating tokens never grows them; untouched
    /// capacity costs address space, not memory.
    pub fn new_sequence(&mut self) -> SeqId {
        let bt = self.kv.block_tokens();
        let max_blocks = self.max_pos.div_ceil(bt);
        let seq = Some(Sequence {
            tokens: Vec::with_capacity(self.max_pos),
            blocks: Vec::with_capacity(max_blocks),
            nodes: Vec::with_capacity(max_blocks),
            shifted: 0,
            mass: None,
        });
        if let Some(index) = self.free_slots.pop() {
            let s = &mut self.slots[index as usize];
            s.seq = seq;
            return SeqId {
                index,
                generation: s.generation,
            };
        }
        self.slots.push(Slot { generation: 0, seq });
        SeqId {
            index: (self.slots.len() - 1) as u32,
            generation: 0,
        }
    }

    fn bad_seq(id: SeqId) -> CoreError {
        CoreError::InvalidOption {
            option: "sequence",
            reason: format!("no live sequence {id}"),
        }
    }

    /// The sequence `id`.
    pub fn sequence(&self, id: SeqId) -> Result<&Sequence, CoreError> {
        self.slots
            .get(id.index as usize)
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.seq.as_ref())
            .ok_or_else(|| Self::bad_seq(id))
    }

    pub(crate) fn sequence_mut(&mut self, id: SeqId) -> Result<&mut Sequence, CoreError> {
        self.slots
            .get_mut(id.index as usize)
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.seq.as_mut())
            .ok_or_else(|| Self::bad_seq(id))
    }

    /// A new sequence holding the same positions as `src`, sharing its blocks (the first
    /// write into a shared block copies it).
    pub fn fork(&mut self, src: SeqId) -> Result<SeqId, CoreError> {
        let (tokens, blocks, nodes, shifted, mass) = {
            let from = self.sequence(src)?;
            (
                from.tokens.clone(),
                from.blocks.clone(),
                from.nodes.clone(),
                from.shifted,
                from.mass.clone(),
            )
        };
        for &b in &blocks {
            self.kv.retain(b);
        }
        let id = self.new_sequence();
        let to = self.sequence_mut(id)?;
        to.tokens.extend_from_slice(&tokens);
        to.blocks.extend_from_slice(&blocks);
        to.nodes.extend_from_slice(&nodes);
        to.shifted = shifted;
        // The fork's mass starts as its parent's and goes its own way (it lives in the
        // sequence, not in the shared blocks, so copy-on-write does not touch it).
        if let Some(m) = mass {
            let mut own = Vec::with_capacity(self.max_pos);
            own.extend_from_slice(&m);
            self.sequence_mut(id)?.mass = Some(own);
        }
        Ok(id)
    }

    /// Makes the empty sequence `dst` hold the first `n` positions of `src`, sharing its
    /// blocks as [`Engine::fork`] does (a server's `n` answers to one prompt keep their ids).
    pub fn share_prefix(&mut self, src: SeqId, dst: SeqId, n: usize) -> Result<(), CoreError> {
        if !self.sequence(dst)?.is_empty() {
            return Err(CoreError::InvalidOption {
                option: "sequence",
                reason: format!("sharing a prefix needs an empty sequence, {dst} holds tokens"),
            });
        }
        let bt = self.kv.block_tokens();
        let (tokens, blocks, nodes) = {
            let from = self.sequence(src)?;
            let n = n.min(from.tokens.len());
            let nb = n.div_ceil(bt);
            let nn = (n / bt).min(from.nodes.len());
            (
                from.tokens[..n].to_vec(),
                from.blocks[..nb].to_vec(),
                from.nodes[..nn].to_vec(),
            )
        };
        for &b in &blocks {
            self.kv.retain(b);
        }
        let to = self.sequence_mut(dst)?;
        to.tokens.extend_from_slice(&tokens);
        to.blocks.extend_from_slice(&blocks);
        to.nodes.extend_from_slice(&nodes);
        if let Some(m) = &mut to.mass {
            m.resize(to.tokens.len(), 0.0);
        }
        Ok(())
    }

    /// Ends sequence `id`: its blocks are released, and the ones holding a known prefix
    /// (its full blocks, and the partly filled last one) stay in the prefix cache.
    pub fn free_sequence(&mut self, id: SeqId) -> Result<(), CoreError> {
        self.sequence(id)?;
        let bt = self.kv.block_tokens();
        let Engine { slots, kv, .. } = self;
        let seq = slots[id.index as usize]
            .seq
            .as_ref()
            .ok_or_else(|| Self::bad_seq(id))?;
        let n_full = seq.tokens.len() / bt;
        if n_full < seq.blocks.len() && !seq.tokens.is_empty() && seq.shifted == 0 {
            // Keep the partial block's rows findable too (the next chat turn or request
            // with the same text reuses them).
            let b = seq.blocks[n_full];
            let parent = if n_full == 0 {
                ROOT_NODE
            } else {
                seq.nodes[n_full - 1]
            };
            let tail = &seq.tokens[n_full * bt..];
            if !tail.is_empty() && kv.refs(b) == 1 && !kv.is_registered(b) {
                kv.register(b, parent, tail);
            }
        }
        let slot = &mut self.slots[id.index as usize];
        let seq = slot.seq.take().ok_or_else(|| Self::bad_seq(id))?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free_slots.push(id.index);
        for b in seq.blocks {
            self.kv.release(b);
        }
        Ok(())
    }

    /// Keeps only the first `n` positions of sequence `id` (no-op if it holds fewer); the
    /// blocks past them go back to the pool.
    pub fn truncate(&mut self, id: SeqId, n: usize) -> Result<(), CoreError> {
        let bt = self.kv.block_tokens();
        let seq = self.sequence_mut(id)?;
        if n >= seq.tokens.len() {
            return Ok(());
        }
        seq.tokens.truncate(n);
        if let Some(m) = &mut seq.mass {
            m.truncate(n);
        }
        seq.nodes.truncate(n / bt);
        let keep = n.div_ceil(bt);
        let dropped: Vec<u32> = seq.blocks.drain(keep..).collect();
        for b in dropped {
            self.kv.release(b);
        }
        Ok(())
    }

    /// The K (or V) row of position `pos` of sequence `id` in `layer`, decoded into `out`
    /// (`n_head_kv * head_dim` floats): for inspecting and testing what the cache holds.
    pub fn read_kv_row(
        &self,
        id: SeqId,
        layer: usize,
        pos: usize,
        is_k: bool,
        out: &mut [f32],
    ) -> Result<(), CoreError> {
        let cfg = &self.model.config;
        let seq = self.sequence(id)?;
        if layer >= cfg.n_layer || pos >= seq.len() || out.len() != cfg.n_head_kv * cfg.head_dim {
            return Err(CoreError::InvalidOption {
                option: "read_kv_row",
                reason: format!(
                    "layer {layer} position {pos} (of {} layers, {} positions), {} floats",
                    cfg.n_layer,
                    seq.len(),
                    out.len()
                ),
            });
        }
        let bt = self.kv.block_tokens();
        self.kv
            .read_row(layer, seq.blocks[pos / bt], pos % bt, is_k, out);
        Ok(())
    }

    /// Attaches to the empty sequence `id` the longest cached prefix of `prompt` (whole
    /// blocks by exact match, then the best partial match), leaving at least the last
    /// prompt token to evaluate. Returns how many prompt tokens the sequence now holds.
    pub fn reuse_prefix(&mut self, id: SeqId, prompt: &[u32]) -> Result<usize, CoreError> {
        let bt = self.kv.block_tokens();
        if !self.sequence(id)?.is_empty() {
            return Err(CoreError::InvalidOption {
                option: "sequence",
                reason: format!("prefix reuse needs an empty sequence, {id} holds tokens"),
            });
        }
        // The last token is always evaluated: its logits start the generation.
        let usable = prompt.len().saturating_sub(1);
        let (mut blocks, mut nodes) = (Vec::new(), Vec::new());
        let mut parent = ROOT_NODE;
        let mut n = 0;
        while n + bt <= usable {
            let Some((b, node)) = self.kv.lookup_full(parent, &prompt[n..n + bt]) else {
                break;
            };
            self.kv.retain(b);
            blocks.push(b);
            nodes.push(node);
            parent = node;
            n += bt;
        }
        if n < usable
            && let Some((b, m)) = self.kv.lookup_partial(parent, &prompt[n..usable])
        {
            let m = m.min(bt).min(usable - n);
            self.kv.retain(b);
            blocks.push(b);
            n += m;
        }
        let seq = self.sequence_mut(id)?;
        seq.tokens.extend_from_slice(&prompt[..n]);
        seq.blocks.extend_from_slice(&blocks);
        seq.nodes.extend_from_slice(&nodes);
        if let Some(m) = &mut seq.mass {
            // Reused rows were never attended to by this sequence: they start at zero.
            m.resize(seq.tokens.len(), 0.0);
        }
        Ok(n)
    }

    /// Blocks sequence `id` still needs to hold `n_total` positions, counting a copy of a
    /// shared or cached last block.
    pub fn blocks_needed(&self, id: SeqId, n_total: usize) -> Result<usize, CoreError> {
        let seq = self.sequence(id)?;
        let bt = self.kv.block_tokens();
        let want = n_total.div_ceil(bt);
        let mut need = want.saturating_sub(seq.blocks.len());
        let len = seq.tokens.len();
        if n_total > len && !len.is_multiple_of(bt) {
            let b = seq.blocks[len / bt];
            // Shared, it is copied at the first write. Held alone it costs nothing: a copy
            // out of the prefix cache returns the original to it, and with no block to copy
            // into, the block leaves the cache instead (`KvPool::make_writable`).
            if self.kv.refs(b) > 1 {
                need += 1;
            }
        }
        Ok(need)
    }

    /// Blocks a sequence can still get.
    pub fn available_blocks(&self) -> usize {
        self.kv.stats().available()
    }

    /// Gives sequence `id` writable blocks for positions `len..len + n`.
    fn reserve(&mut self, id: SeqId, n: usize) -> Result<(), CoreError> {
        let bt = self.kv.block_tokens();
        let (len, blocks_now) = {
            let s = self.sequence(id)?;
            (s.tokens.len(), s.blocks.len())
        };
        let kv_full = |kv: &KvPool, n_new: usize| CoreError::KvFull {
            needed: n_new,
            stats: kv.stats(),
        };
        if !len.is_multiple_of(bt) {
            let j = len / bt;
            let b = self.sequence(id)?.blocks[j];
            let nb = self
                .kv
                .make_writable(b, len % bt)
                .ok_or_else(|| kv_full(&self.kv, n))?;
            self.sequence_mut(id)?.blocks[j] = nb;
        }
        let want = (len + n).div_ceil(bt);
        for _ in blocks_now..want {
            let b = self.kv.alloc().ok_or_else(|| kv_full(&self.kv, n))?;
            self.sequence_mut(id)?.blocks.push(b);
        }
        Ok(())
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
        let n_vocab = self.model.config.n_vocab;
        let total: usize = items.iter().map(|it| it.tokens.len()).sum();
        if total == 0 {
            return Err(CoreError::EmptyInput);
        }
        if total > self.chunk {
            return Err(CoreError::InvalidOption {
                option: "batch",
                reason: format!(
                    "{total} tokens in one forward pass, the engine takes {} at most",
                    self.chunk
                ),
            });
        }
        for (i, it) in items.iter().enumerate() {
            if items[..i].iter().any(|o| o.seq == it.seq) {
                return Err(CoreError::InvalidOption {
                    option: "batch",
                    reason: format!("sequence {} appears twice in one batch", it.seq),
                });
            }
            if let Some((index, &token)) = it
                .tokens
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
            let n_past = self.sequence(it.seq)?.len();
            if n_past + it.tokens.len() > self.max_pos {
                return Err(CoreError::ContextOverflow {
                    n_past,
                    n_new: it.tokens.len(),
                    n_ctx: self.max_pos,
                });
            }
        }
        for it in items {
            if !it.tokens.is_empty() {
                self.reserve(it.seq, it.tokens.len())?;
            }
        }
        self.fill_batch(items)?;
        let mut track = false;
        for it in items {
            track |= self.sequence(it.seq)?.mass.is_some();
        }
        let (nt, bt) = (self.pool.n_threads(), self.kv.block_tokens());
        self.attn_stats.begin_pass(&self.batch, track, nt, bt);
        self.forward_batch(&mut on_logits)?;
        self.attn_stats.end_pass(self.model.config.n_head);
        self.evaluated += total as u64;
        // Commit: the sequences now hold the tokens; blocks that became full join the
        // prefix cache.
        let mut first_tok = 0;
        for it in items {
            let Engine {
                slots,
                kv,
                batch,
                attn_stats,
                ..
            } = self;
            let seq = slots[it.seq.index as usize]
                .seq
                .as_mut()
                .ok_or_else(|| Self::bad_seq(it.seq))?;
            let before = seq.tokens.len() / bt;
            seq.tokens.extend_from_slice(it.tokens);
            if let Some(mass) = &mut seq.mass {
                // The mass vector's capacity is the most positions a sequence holds.
                mass.resize(seq.tokens.len(), 0.0);
                let table_start = batch.table[first_tok].0 as usize;
                attn_stats.add_mass(table_start, bt, mass);
            }
            first_tok += it.tokens.len();
            let after = if seq.shifted == 0 {
                seq.tokens.len() / bt
            } else {
                before
            };
            for j in before..after {
                let parent = if j == 0 { ROOT_NODE } else { seq.nodes[j - 1] };
                let node = kv.register(seq.blocks[j], parent, &seq.tokens[j * bt..(j + 1) * bt]);
                seq.nodes.push(node);
            }
        }
        Ok(())
    }

    /// Lays the batch out token by token in the scratch (positions, KV slots, block tables,
    /// logits rows).
    fn fill_batch(&mut self, items: &[BatchItem<'_>]) -> Result<(), CoreError> {
        let bt = self.kv.block_tokens();
        let Engine { slots, batch, .. } = self;
        let b = batch;
        b.tokens.clear();
        b.pos.clear();
        b.block.clear();
        b.slot.clear();
        b.table.clear();
        b.tables.clear();
        b.rows.clear();
        b.decode.clear();
        for (i, it) in items.iter().enumerate() {
            let seq = slots[it.seq.index as usize]
                .seq
                .as_ref()
                .ok_or_else(|| Self::bad_seq(it.seq))?;
            let start = b.tables.len() as u32;
            b.tables.extend_from_slice(&seq.blocks);
            let table = (start, seq.blocks.len() as u32);
            let n_past = seq.tokens.len();
            for (j, &t) in it.tokens.iter().enumerate() {
                let pos = n_past + j;
                b.tokens.push(t);
                b.pos.push(pos);
                b.block.push(seq.blocks[pos / bt]);
                b.slot.push((pos % bt) as u32);
                b.table.push(table);
                b.decode.push(it.tokens.len() == 1);
                let wanted = match it.logits {
                    Logits::None => false,
                    Logits::Last => j + 1 == it.tokens.len(),
                    Logits::All => true,
                };
                if wanted {
                    b.rows
                        .push((i as u32, j as u32, (b.tokens.len() - 1) as u32));
                }
            }
        }
        Ok(())
    }
}
