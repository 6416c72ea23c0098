//! The workspace of the forward pass: everything a pass computes in, allocated once with
//! the engine and sized for its largest batch: the thread pool (one, pinned; under `--numa`
//! its threads grouped by node, each node's share of the weight rows bound to it), the rope
//! table, the per-token activation buffers, the blocked outputs of a projection group, the
//! attention scratch, the head's buffers, the profile and the attention statistics.

use bitnet_kernels::float::RopeTable;
use bitnet_kernels::{ActScale, AlignedVec, Isa};

use super::attention;
use super::attn_stats::AttnStats;
use super::batch::Batch;
use super::buffers::Bufs;
use super::head_acts::HeadActs;
use super::matmul;
use super::options::EngineOptions;
use super::profile::{Profile, SubTimer};
use crate::error::CoreError;
use crate::kv::KvManager;
use crate::model::Model;
use crate::model::linear::{bit_words, padded};
use crate::threadpool::{PinPolicy, ThreadPool};

/// Tokens per head call when many rows want logits.
pub(super) const HEAD_BATCH: usize = 32;

/// Everything a forward pass computes in; see the module docs.
#[derive(Debug)]
pub(super) struct Workspace {
    pub(super) isa: Isa,
    pub(super) pool: ThreadPool,
    pub(super) rope: RopeTable,
    /// Tokens per forward pass at most.
    pub(super) chunk: usize,
    pub(super) bufs: Bufs,
    /// Blocked outputs of up to three projections of a group.
    pub(super) blk: [AlignedVec<f32>; 3],
    /// Attention scratch, [`attention::attention_scratch`] floats per thread: scores, a
    /// run's copy, a chunk's output and statistics, the quantized query, and the thread's
    /// share of the chunk results left for merging.
    pub(super) scores: AlignedVec<f32>,
    /// Final normed hidden states for the head, `[HEAD_BATCH][n_embd]`.
    pub(super) hn: AlignedVec<f32>,
    /// `hn` as the head's kernel reads it, `HEAD_BATCH` rows: Q8_0 rows for a Q8_0 head,
    /// Q8_K rows for a Q6_K one, nothing for a float head.
    pub(super) hacts: HeadActs,
    /// One row of logits (the last one handed out).
    pub(super) logits: Vec<f32>,
    /// Blocked head output for up to `HEAD_BATCH` rows.
    pub(super) head_blk: AlignedVec<f32>,
    pub(super) profile: Profile,
    pub(super) timer: SubTimer,
    /// Attention entropy and received mass, when asked for.
    pub(super) attn_stats: AttnStats,
    /// B1 keys scored by XNOR/popcount, in the layers whose K is B1
    /// (`EngineOptions::kv_xnor`).
    pub(super) kv_xnor: bool,
    /// Per layer: its attention and FFN inputs are quantized to 4 bits
    /// (`EngineOptions::act_layers`).
    pub(super) int4_layers: Vec<bool>,
}

impl Workspace {
    /// The pool and every buffer for passes of up to `opts.batch` tokens over `model`,
    /// whose sequences live in `kv`.
    pub(super) fn new(
        model: &Model,
        opts: &EngineOptions,
        kv: &KvManager,
    ) -> Result<Workspace, CoreError> {
        let cfg = &model.config;
        let threads = opts.thread_count();
        let placement = match opts.numa {
            Some(mode) => Some((mode, crate::numa::placement(mode, threads)?)),
            None => None,
        };
        let pin = match &placement {
            Some((_, p)) => PinPolicy::Cpus(p.cpus.clone()),
            None if opts.pin => PinPolicy::Cores,
            None => PinPolicy::None,
        };
        let mut pool = ThreadPool::new(threads, pin)?;
        if let Some((mode, placement)) = placement {
            // A placement asked for by name must hold: a thread the OS would not pin (a
            // container's CPU policy, a CPU taken away) is refused, not left to float.
            let unpinned = pool.pinned_cores().iter().filter(|c| c.is_none()).count();
            if unpinned > 0 {
                return Err(crate::numa::NumaError::PinRefused { unpinned, threads }.into());
            }
            // Each node's threads claim its share of every product's rows first, and that
            // share's weights are bound to the node's memory.
            let groups = placement.thread_groups();
            let shares = matmul::weight_shares(model, &groups);
            crate::numa::bind::bind_shares(
                mode,
                shares.iter().map(|&(g, bytes)| (bytes, groups.labels(g))),
            )?;
            pool.set_groups(groups)?;
        }
        let max_pos = kv.max_seq_len();
        let chunk = opts.batch.min(max_pos).max(1);
        let rope = RopeTable::new(cfg.rope_dim, cfg.rope_theta, max_pos);

        let (e, qd, kvd, ff) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim(), cfg.n_ff);
        let max_in = e.max(qd).max(ff);
        let bufs = Bufs {
            x: AlignedVec::zeroed(chunk * e),
            h: AlignedVec::zeroed(chunk * e),
            xn: AlignedVec::zeroed(chunk * max_in),
            xq: AlignedVec::zeroed(chunk * padded(max_in)),
            acts: vec![ActScale { scale: 1.0, sum: 0 }; chunk],
            bits: AlignedVec::zeroed(chunk * bit_words(max_in)),
            bit_scales: vec![0.0; chunk],
            q: AlignedVec::zeroed(chunk * qd),
            k: AlignedVec::zeroed(chunk * kvd),
            v: AlignedVec::zeroed(chunk * kvd),
            att: AlignedVec::zeroed(chunk * qd),
            ff: AlignedVec::zeroed(chunk * ff),
        };
        let blk = [
            AlignedVec::zeroed(chunk * qd.max(ff).max(e)),
            AlignedVec::zeroed(chunk * kvd.max(ff)),
            AlignedVec::zeroed(chunk * kvd),
        ];
        let group = cfg.gqa_group();
        // Sized for the cache's whole blocks, as the attention pass lays rows out, and for
        // the layer whose K format's query needs the most room.
        let per_thread = (0..cfg.n_layer)
            .map(|l| {
                let kf = kv.k_format(l);
                let xnor = opts.kv_xnor && kf.xnor_scores.is_some();
                attention::attention_scratch(
                    group,
                    cfg.head_dim,
                    kv.capacity_tokens(),
                    kv.block_tokens(),
                    xnor,
                    !xnor && kf.int8_scores.is_some(),
                )
            })
            .max()
            .unwrap_or(0);
        let attn_stats = AttnStats::new(
            opts.attn_entropy_every,
            cfg.n_layer,
            chunk * (cfg.n_head / group.max(1)),
        );
        Ok(Workspace {
            isa: model.isa,
            rope,
            chunk,
            bufs,
            blk,
            scores: AlignedVec::zeroed(pool.n_threads() * per_thread),
            pool,
            hn: AlignedVec::zeroed(HEAD_BATCH * e),
            hacts: HeadActs::for_head(&model.head, e, HEAD_BATCH),
            logits: vec![0.0; cfg.n_vocab],
            // Untouched pages of a zeroed allocation cost no memory until a batch of
            // several logits rows first uses them.
            head_blk: AlignedVec::zeroed(HEAD_BATCH * cfg.n_vocab),
            profile: Profile::new(false),
            timer: SubTimer::default(),
            attn_stats,
            kv_xnor: opts.kv_xnor,
            int4_layers: opts.checked_int4_layers(cfg.n_layer)?,
        })
    }

    pub(super) fn threads(&self) -> usize {
        self.pool.n_threads()
    }

    pub(super) fn max_batch(&self) -> usize {
        self.chunk
    }

    pub(super) fn set_profiling(&mut self, on: bool) {
        if on && !self.profile.is_enabled() {
            self.profile.clear();
            let _ = self.pool.take_wait_stats();
        }
        self.profile.set_enabled(on);
        self.pool.set_profiling(on);
    }

    /// Sets up the statistics of the pass laid out in `batch` (`track`: some sequence of
    /// it accumulates attention mass).
    pub(super) fn begin_pass(&mut self, batch: &Batch, track: bool, block_tokens: usize) {
        let nt = self.pool.n_threads();
        self.attn_stats.begin_pass(batch, track, nt, block_tokens);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::LoadOptions;
    use crate::numa::NumaMode;
    use crate::numa::bind::{PolicyMode, bound_pages, policy_of};

    /// The workspace of an engine made with `--numa distribute` (what `Engine::new` makes
    /// after the KV cache) binds its projections' rows: one node here, so every share to
    /// node 0. Read back with `get_mempolicy` on the first and the last page of a matrix.
    #[test]
    fn numa_distribute_binds_every_projections_rows_to_their_node() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/shakespeare.gguf");
        let model = Arc::new(Model::load(path, &LoadOptions::default()).unwrap());
        let opts = EngineOptions {
            threads: 2,
            numa: Some(NumaMode::Distribute),
            ..EngineOptions::default()
        };
        let cfg = &model.config;
        let kv = KvManager::new(
            cfg.n_layer,
            cfg.n_head_kv,
            cfg.head_dim,
            (opts.k_type, opts.v_type),
            64,
            opts.block_tokens,
            model.isa,
        )
        .unwrap();
        // A helper thread: the pool pins the thread that makes it.
        let m = Arc::clone(&model);
        std::thread::spawn(move || drop(Workspace::new(&m, &opts, &kv).unwrap()))
            .join()
            .unwrap();
        // 4096: the smallest page size Linux has; a matrix this long holds a page start.
        let page = 4096;
        let mut checked = 0;
        for lin in model.layers.iter().flat_map(|l| l.linears()) {
            let rows = lin.row_bytes(&model.store, 0..lin.rows);
            let addr = rows.as_ptr() as usize;
            let pages = bound_pages(addr, rows.len(), page);
            if rows.len() < 2 * page {
                continue;
            }
            for at in [pages.start - addr, rows.len() - 1] {
                let p = policy_of(&rows[at]).unwrap();
                assert_eq!(
                    (p.mode, &p.nodes[..], p.page_node),
                    (PolicyMode::Bind, &[0][..], 0),
                    "byte {at} of {}",
                    rows.len()
                );
            }
            checked += 1;
        }
        assert!(checked > 0, "no projection of several pages");
    }
}
