//! Paged attention: each token of a batch attends over its own sequence's KV blocks, one
//! layer at a time. The threads split (token, KV head) units, or chunks of long rows, with
//! the work balanced by the positions each attends to ([`attention`]). The one reduction
//! split across threads, attention over a long row, is cut by the row's length alone and
//! merged in a fixed order ([`fold_chunk`]), so results do not depend on the thread count.

use std::ops::Range;

use bitnet_kernels::Isa;
use bitnet_kernels::float::{self, QK_KV};

use super::attn_stats::{AttnProbe, row_entropy};
use super::batch::Batch;
use crate::kv::KvStorage;
use crate::threadpool::{DisjointSlice, ThreadPool};

/// One layer of the KV cache's rows as attention reads them.
#[derive(Copy, Clone, Debug)]
pub(super) struct KvView<'a> {
    pub(super) storage: &'a KvStorage,
    pub(super) layer: usize,
}

/// How a unit's query group meets the keys: as floats, or quantized for the K format's
/// XNOR or int8 scoring (see `crate::kv::KvFormat`).
#[derive(Clone, Copy)]
enum Query<'a> {
    Float,
    Xnor(crate::kv::format::XnorScoresFn, &'a [u32], &'a [f32]),
    Int8(crate::kv::format::Int8ScoresFn, &'a [i8], &'a [f32]),
}

/// Shape of one attention call.
#[derive(Copy, Clone, Debug)]
pub(super) struct AttnShape {
    pub(super) n_head: usize,
    pub(super) group: usize,
    pub(super) head_dim: usize,
    /// Bytes between two positions of one KV head's K rows.
    pub(super) k_stride: usize,
    /// As `k_stride` for V (K and V formats are chosen independently).
    pub(super) v_stride: usize,
    pub(super) scale: f32,
    /// Positions a sequence holds at most (scores scratch: `group * max_pos` per thread).
    pub(super) max_pos: usize,
    pub(super) block_tokens: usize,
    /// V rows are stored rotated: each head's output is rotated back.
    pub(super) v_rotated: bool,
    /// B1 keys are scored by XNOR/popcount against the sign-quantized query.
    pub(super) xnor: bool,
}

/// Floats of attention scratch per thread a quantized query takes: for the XNOR path a
/// group's sign words and block scales; for int8 query scoring (`int8`, keys with integer
/// codes) the group's codes (four to a float) and block scales.
pub(super) fn query_scratch(xnor: bool, int8: bool, group: usize, head_dim: usize) -> usize {
    let nb = head_dim.div_ceil(QK_KV);
    if xnor {
        2 * group * nb
    } else if int8 {
        group * nb * (QK_KV / 4 + 1)
    } else {
        0
    }
}

/// The `tid`-th of `nt` contiguous ranges of units of work, balanced by their costs (the
/// positions each attends to), which `costs()` yields in unit order.
fn balanced_units<I: Iterator<Item = usize>>(
    costs: impl Fn() -> I,
    nt: usize,
    tid: usize,
) -> Range<usize> {
    let total: u128 = costs().map(|c| c as u128).sum();
    let bound = |k: usize| -> usize {
        if k == 0 {
            return 0;
        }
        let target = total * k as u128 / nt as u128;
        let (mut acc, mut n) = (0u128, 0);
        for c in costs() {
            if k < nt && acc >= target {
                return n;
            }
            acc += c as u128;
            n += 1;
        }
        n
    };
    bound(tid)..bound(tid + 1)
}

/// Rows of at most this many positions (rounded up to a whole KV block) are attended in
/// one piece. Longer rows are cut
/// into chunks, each scored, softmaxed and summed on its own, then merged
/// ([`fold_chunk`]): the chunks are what the threads share when a step has too few
/// (token, KV head) units to keep them all busy, as one decoded token over a long context
/// has. The cut depends on the row's length only, never on the threads or the batch, so
/// every way of sharing the work gives the same bits.
const ATTN_CHUNK_MIN: usize = 512;
/// A row is cut into at most this many chunks (longer rows get longer chunks), which
/// bounds the partial results kept for merging.
const ATTN_CHUNKS_MAX: usize = 16;
/// Partial results the shared scratch holds per thread: chunks are handed out only while
/// a step has fewer than 4 (token, KV head) units per thread, each of at most
/// [`ATTN_CHUNKS_MAX`] chunks.
const PARTIALS_PER_THREAD: usize = 4 * ATTN_CHUNKS_MAX;

/// Positions per chunk of a row of `n_pos` positions over blocks of `bt` tokens (chunks
/// start on block boundaries).
fn chunk_len(n_pos: usize, bt: usize) -> usize {
    n_pos
        .div_ceil(ATTN_CHUNKS_MAX)
        .max(ATTN_CHUNK_MIN)
        .next_multiple_of(bt.max(1))
}

fn row_chunks(n_pos: usize, bt: usize) -> usize {
    n_pos.div_ceil(chunk_len(n_pos, bt)).max(1)
}

/// Floats one partial result takes: a group's outputs, then `(max, sum)` per head.
fn partial_len(group: usize, head_dim: usize) -> usize {
    group * head_dim + 2 * group
}

/// Floats of attention scratch one thread works in (scores, run copies, a chunk's output,
/// chunk statistics and the quantized query).
fn thread_scratch(
    group: usize,
    head_dim: usize,
    max_pos: usize,
    block_tokens: usize,
    query: usize,
) -> usize {
    group * (2 * max_pos + block_tokens)
        + group * head_dim
        + 2 * group * (ATTN_CHUNKS_MAX + 1)
        + query
}

/// Floats of attention scratch to allocate per thread: its own working space and its
/// share of the partial results that chunks of one row leave for merging.
pub(super) fn attention_scratch(
    group: usize,
    head_dim: usize,
    max_pos: usize,
    block_tokens: usize,
    xnor: bool,
    int8: bool,
) -> usize {
    let query = query_scratch(xnor, int8, group, head_dim);
    thread_scratch(group, head_dim, max_pos, block_tokens, query)
        + PARTIALS_PER_THREAD * partial_len(group, head_dim)
}

/// Folds one chunk's attention output into the result of the chunks before it. Per head
/// of `hd` values, `acc` and `o` are softmax-weighted averages over their own positions
/// and `state` and `st` hold `(max, sum of exp(score - max))` of their scores; each side
/// is weighed by its share of the probability mass, `sum * exp(max)`. Both ways of running
/// chunks (one unit in turn, or units on several threads merged after) fold the same
/// values in the same order, so they agree bit for bit. NaN and `+inf` scores make the
/// head's output NaN, as one softmax over the row would.
fn fold_chunk(hd: usize, acc: &mut [f32], state: &mut [f32], o: &[f32], st: &[f32]) {
    let heads = acc.chunks_exact_mut(hd).zip(o.chunks_exact(hd));
    for (h, (acc, o)) in heads.enumerate() {
        let (m0, s0) = (state[2 * h], state[2 * h + 1]);
        let (m1, s1) = (st[2 * h], st[2 * h + 1]);
        if s1 == 0.0 {
            // Only masked positions: no weight.
            continue;
        }
        if s0 == 0.0 {
            acc.copy_from_slice(o);
            state[2 * h..2 * h + 2].copy_from_slice(&st[2 * h..2 * h + 2]);
            continue;
        }
        let m = m0.max(m1);
        let a = s0 * (m0 - m).exp();
        let b = s1 * (m1 - m).exp();
        let s = a + b;
        let (wa, wb) = (a / s, b / s);
        for (x, &y) in acc.iter_mut().zip(o) {
            *x = *x * wa + y * wb;
        }
        state[2 * h] = m;
        state[2 * h + 1] = s;
    }
}

/// The factor that turns a chunk's probabilities (normalized within the chunk, statistics
/// `(m, s)`) into the row's, once the merged statistics are `(big_m, big_s)`.
fn chunk_share(m: f32, s: f32, big_m: f32, big_s: f32) -> f32 {
    if s == 0.0 {
        0.0
    } else {
        s * (m - big_m).exp() / big_s
    }
}

/// What every unit of one attention call reads.
struct AttnCtx<'a> {
    isa: Isa,
    sh: &'a AttnShape,
    kv: &'a KvView<'a>,
    batch: &'a Batch,
    q: &'a [f32],
    kf: &'a crate::kv::KvFormat,
    vf: &'a crate::kv::KvFormat,
    xnor: Option<crate::kv::format::XnorScoresFn>,
    int8: Option<crate::kv::format::Int8ScoresFn>,
    /// Floats of one thread's working scratch (see [`thread_scratch`]).
    thread_len: usize,
}

/// One thread's working scratch, cut up.
struct UnitScratch<'s> {
    /// Score rows: `[head][position]` for one piece; a chunked row keeps chunk `c`'s rows
    /// at `heads * lo` (for the probes, which need every chunk's probabilities).
    sc: &'s mut [f32],
    tmp: &'s mut [f32],
    /// A later chunk's output before it is folded in.
    chunk_out: &'s mut [f32],
    /// `(max, sum)` per head of each chunk, then the merged state.
    stats: &'s mut [f32],
    query: &'s mut [f32],
}

impl AttnCtx<'_> {
    fn split<'s>(&self, scratch: &'s mut [f32]) -> UnitScratch<'s> {
        let (gs, hd, max_pos) = (self.sh.group, self.sh.head_dim, self.sh.max_pos);
        let (sc, rest) = scratch[..self.thread_len].split_at_mut(gs * max_pos);
        let (tmp, rest) = rest.split_at_mut(gs * (max_pos + self.sh.block_tokens));
        let (chunk_out, rest) = rest.split_at_mut(gs * hd);
        let (stats, query) = rest.split_at_mut(2 * gs * (ATTN_CHUNKS_MAX + 1));
        UnitScratch {
            sc,
            tmp,
            chunk_out,
            stats,
            query,
        }
    }

    /// Token `t`'s query heads `h0..h0 + heads` made ready for the K format: quantized
    /// once per unit where the keys are scored in integers.
    fn query<'s>(&self, t: usize, h0: usize, heads: usize, qs: &'s mut [f32]) -> Query<'s> {
        let hd = self.sh.head_dim;
        let qg = &self.q[t * self.sh.n_head * hd + h0 * hd..][..heads * hd];
        let qs = &mut qs[..query_scratch(self.xnor.is_some(), self.int8.is_some(), heads, hd)];
        if let Some(f) = self.xnor {
            let (bits, scales) = qs.split_at_mut(heads * hd / QK_KV);
            let bits: &mut [u32] = bytemuck::cast_slice_mut(bits);
            float::b1_sign_query(qg, bits, scales);
            Query::Xnor(f, &*bits, &*scales)
        } else if let Some(f) = self.int8 {
            let (codes, scales) = qs.split_at_mut(heads * hd / 4);
            let codes: &mut [i8] = bytemuck::cast_slice_mut(codes);
            float::int8_query(qg, codes, scales);
            Query::Int8(f, &*codes, &*scales)
        } else {
            Query::Float
        }
    }

    /// Positions `lo..hi` of token `t`'s row for query heads `h0..h0 + heads`: scores into
    /// `sc` (`[head][hi - lo]`), softmaxed per head with `(max, sum)` into `stats`, and the
    /// weighted values into `out` (overwritten).
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        query: Query<'_>,
        t: usize,
        h0: usize,
        heads: usize,
        (lo, hi): (usize, usize),
        sc: &mut [f32],
        tmp: &mut [f32],
        out: &mut [f32],
        stats: &mut [f32],
    ) {
        let (isa, sh) = (self.isa, self.sh);
        let hd = sh.head_dim;
        let qg = &self.q[t * sh.n_head * hd + h0 * hd..][..heads * hd];
        let kvh = h0 / sh.group;
        let (tstart, tlen) = self.batch.table[t];
        let blocks = &self.batch.tables[tstart as usize..][..tlen as usize];
        let bt = sh.block_tokens;
        let n = hi - lo;
        let sc = &mut sc[..heads * n];
        let (kf, vf) = (self.kf, self.vf);
        let score = |k: &[u8], n_q: usize, q: &[f32], n: usize, out: &mut [f32]| match query {
            // The quantized-query kernels score whole units only (n_q is the unit's heads
            // or 1), so their query is the unit's.
            Query::Xnor(f, bits, scales) => {
                f(isa, bits, scales, n_q, k, sh.k_stride, n, sh.scale, out)
            }
            Query::Int8(f, codes, scales) => {
                f(isa, codes, scales, n_q, k, sh.k_stride, n, sh.scale, out)
            }
            Query::Float => (kf.scores)(isa, q, n_q, k, sh.k_stride, n, sh.scale, out),
        };
        // The blocks under `lo..hi` are walked as runs of consecutive ids: with contiguous
        // blocks a run is one stretch of rows, so it takes one kernel call for scores and
        // one for values (a fresh sequence is usually a single run: one call each, straight
        // into and out of the score rows, as over a contiguous cache). Otherwise a run is
        // one block. Runs are `(first block, blocks, first position - lo, positions)`.
        let blocks = &blocks[lo / bt..hi.div_ceil(bt)];
        let joinable = self.kv.storage.blocks_are_contiguous();
        let runs = || {
            let mut i = 0;
            std::iter::from_fn(move || {
                if i >= blocks.len() {
                    return None;
                }
                let start = i;
                i += 1;
                while joinable && i < blocks.len() && blocks[i] == blocks[i - 1] + 1 {
                    i += 1;
                }
                let p0 = start * bt;
                Some((blocks[start], i - start, p0, (i * bt).min(n) - p0))
            })
        };
        let single = heads == 1 || blocks.len() == 1 || runs().nth(1).is_none();
        let layer = self.kv.layer;
        for (b, count, p0, m) in runs() {
            let k = self.kv.storage.k_run(layer, kvh, b, count);
            if single && p0 == 0 && m == n {
                score(k, heads, qg, m, sc);
            } else if heads == 1 {
                score(k, 1, qg, m, &mut sc[p0..p0 + m]);
            } else {
                let t = &mut tmp[..heads * m];
                score(k, heads, qg, m, t);
                for h in 0..heads {
                    sc[h * n + p0..][..m].copy_from_slice(&t[h * m..][..m]);
                }
            }
        }
        for (h, row) in sc.chunks_exact_mut(n).enumerate() {
            let (max, sum) = float::softmax_inplace(isa, row);
            stats[2 * h] = max;
            stats[2 * h + 1] = sum;
        }
        // The weighted values, accumulated run by run (the kernels add onto `out`).
        out.fill(0.0);
        for (b, count, p0, m) in runs() {
            let v = self.kv.storage.v_run(layer, kvh, b, count);
            if single && p0 == 0 && m == n {
                (vf.wsum)(isa, sc, heads, v, sh.v_stride, m, out);
            } else if heads == 1 {
                (vf.wsum)(isa, &sc[p0..p0 + m], 1, v, sh.v_stride, m, out);
            } else {
                let t = &mut tmp[..heads * m];
                for h in 0..heads {
                    t[h * m..][..m].copy_from_slice(&sc[h * n + p0..][..m]);
                }
                (vf.wsum)(isa, t, heads, v, sh.v_stride, m, out);
            }
        }
    }

    /// One whole unit: token `t`'s query heads `h0..h0 + heads` over its whole row, chunk
    /// after chunk, into `out`; `ent` and `mass` take the probe's statistics.
    #[allow(clippy::too_many_arguments)]
    fn unit(
        &self,
        t: usize,
        h0: usize,
        heads: usize,
        out: &mut [f32],
        scratch: &mut [f32],
        ent: Option<&mut f32>,
        mass: Option<&mut [f32]>,
    ) {
        let (isa, sh) = (self.isa, self.sh);
        let hd = sh.head_dim;
        let us = self.split(scratch);
        let query = self.query(t, h0, heads, us.query);
        let n_pos = self.batch.pos[t] + 1;
        let cl = chunk_len(n_pos, sh.block_tokens);
        let nc = n_pos.div_ceil(cl);
        let (state, chunk_stats) = us.stats.split_at_mut(2 * heads);
        for c in 0..nc {
            let (lo, hi) = (c * cl, ((c + 1) * cl).min(n_pos));
            let sc = &mut us.sc[heads * lo..heads * hi];
            let st = &mut chunk_stats[2 * heads * c..][..2 * heads];
            if c == 0 {
                self.attend(query, t, h0, heads, (lo, hi), sc, us.tmp, out, st);
                state.copy_from_slice(st);
            } else {
                let o = &mut us.chunk_out[..heads * hd];
                self.attend(query, t, h0, heads, (lo, hi), sc, us.tmp, o, st);
                fold_chunk(hd, out, state, o, st);
            }
        }
        if ent.is_some() || mass.is_some() {
            // The probes read the row's probabilities: each chunk's, scaled by its share.
            if nc > 1 {
                for c in 0..nc {
                    let (lo, hi) = (c * cl, ((c + 1) * cl).min(n_pos));
                    let st = &chunk_stats[2 * heads * c..][..2 * heads];
                    let rows = us.sc[heads * lo..heads * hi].chunks_exact_mut(hi - lo);
                    for (h, row) in rows.enumerate() {
                        let f =
                            chunk_share(st[2 * h], st[2 * h + 1], state[2 * h], state[2 * h + 1]);
                        row.iter_mut().for_each(|p| *p *= f);
                    }
                }
            }
            let chunks = || {
                (0..nc).flat_map(move |c| {
                    let (lo, hi) = (c * cl, ((c + 1) * cl).min(n_pos));
                    (0..heads).map(move |h| (lo, hi, heads * lo + h * (hi - lo)))
                })
            };
            if let Some(e) = ent
                && self.batch.decode[t]
            {
                *e = chunks()
                    .map(|(lo, hi, at)| row_entropy(&us.sc[at..at + hi - lo]))
                    .sum();
            }
            if let Some(m) = mass {
                // This sequence's stretch of the thread's stripe (see `AttnProbe::mass`).
                let tstart = self.batch.table[t].0 as usize;
                let m = &mut m[tstart * sh.block_tokens..][..n_pos];
                for (lo, hi, at) in chunks() {
                    float::add_inplace(isa, &mut m[lo..hi], &us.sc[at..at + hi - lo]);
                }
            }
        }
        if sh.v_rotated {
            // Σ_p w_p H v_p = H Σ_p w_p v_p, and H is its own inverse.
            float::hadamard_rows(isa, hd, out);
        }
    }
}

/// Causal attention of the batch's tokens, each over its own sequence's blocks in one
/// layer of the pool (which already holds the batch's rows): token `t` at position `pos`
/// attends to positions `0..=pos` of its sequence, `att[t][h] = softmax(q[t][h] . K /
/// sqrt(d)) V`, query head `h` reading KV head `h / group`. Scores are computed block by
/// block into one row per head, softmaxed once, then the values of each block accumulate
/// into the output; rows longer than [`ATTN_CHUNK_MIN`] (rounded up to a block) go in
/// chunks, each softmaxed and summed on its own and merged after ([`fold_chunk`]). `scratch` holds [`attention_scratch`] floats per thread. `probe` asks
/// for statistics of the probabilities (see [`AttnProbe`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn attention(
    pool: &ThreadPool,
    isa: Isa,
    sh: &AttnShape,
    kv: &KvView<'_>,
    batch: &Batch,
    q: &[f32],
    att: &mut [f32],
    scratch: &mut [f32],
    probe: &mut AttnProbe<'_>,
) {
    let n_tok = batch.tokens.len();
    let hd = sh.head_dim;
    let (kf, vf) = (kv.storage.k_format(), kv.storage.v_format());
    let xnor = if sh.xnor { kf.xnor_scores } else { None };
    let int8 = if xnor.is_none() { kf.int8_scores } else { None };
    let gs = sh.group;
    let nt = pool.n_threads();
    let query = query_scratch(xnor.is_some(), int8.is_some(), gs, hd);
    let ctx = AttnCtx {
        isa,
        sh,
        kv,
        batch,
        q,
        kf,
        vf,
        xnor,
        int8,
        thread_len: thread_scratch(gs, hd, sh.max_pos, sh.block_tokens, query),
    };
    let slot = partial_len(gs, hd);
    assert!(
        scratch.len() >= nt * (ctx.thread_len + PARTIALS_PER_THREAD * slot),
        "attention: scratch for {nt} threads"
    );
    let (scratch, partials) = scratch.split_at_mut(nt * ctx.thread_len);
    // A unit of work is one token's query heads that share a KV head, so each K/V row is
    // read once for all of them. Decoding a token or two leaves fewer units than the
    // threads can share evenly (the 2B-4T shape's 5 KV heads run 3:2 on 2 threads, so the
    // layer waits on 3). Rows cut into chunks are then shared chunk by chunk; shorter rows
    // split each group into two units of half its heads: both read the group's rows, but
    // its arithmetic, which bounds the quantized formats, is shared out (only when no row
    // of the step is chunked: then every row goes by chunks). Neither changes a
    // bit: chunks merge the same way wherever they run, and every kernel keeps each head's
    // sums to itself, the same for groups of 2 or 4 heads as of 4 or 8 (not so for 1
    // against 2, whose f16 kernels differ: groups of 2 are not split). The attention probe
    // counts whole rows of whole groups, so it keeps them.
    let groups = sh.n_head / gs;
    let few = nt > 1 && n_tok * groups < 4 * nt && probe.entropy.is_none() && probe.mass.is_none();
    let bt = sh.block_tokens;
    let chunked = few && batch.pos.iter().any(|&p| row_chunks(p + 1, bt) > 1);
    if chunked {
        attention_by_chunks(pool, &ctx, att, scratch, partials);
        return;
    }
    let split = few && matches!(gs, 4 | 8) && !(n_tok * groups).is_multiple_of(nt);
    let parts = if split { 2 } else { 1 };
    let heads = gs / parts;
    let per_tok = sh.n_head / heads;
    let width = heads * hd;
    let head0 = |u: usize| (u % per_tok / parts) * gs + (u % parts) * heads;
    let n_units = n_tok * per_tok;
    let stride = probe.mass_stride;
    if nt == 1 {
        let mut ent = probe.entropy.as_deref_mut();
        let mut mass = probe.mass.as_deref_mut().map(|m| &mut m[..stride]);
        for u in 0..n_units {
            ctx.unit(
                u / per_tok,
                head0(u),
                heads,
                &mut att[u * width..(u + 1) * width],
                scratch,
                ent.as_deref_mut().map(|e| &mut e[u]),
                mass.as_deref_mut(),
            );
        }
        return;
    }
    let d_att = DisjointSlice::new(&mut att[..n_units * width]);
    let d_sc = DisjointSlice::new(scratch);
    let d_ent = probe.entropy.as_deref_mut().map(DisjointSlice::new);
    let d_mass = probe.mass.as_deref_mut().map(DisjointSlice::new);
    let tl = ctx.thread_len;
    pool.run(&|tid, nt| {
        let costs = || (0..n_units).map(|u| batch.pos[u / per_tok] + 1);
        let r = balanced_units(costs, nt, tid);
        if r.is_empty() {
            return;
        }
        let out = d_att.slice_mut(r.start * width..r.end * width);
        let sc = d_sc.slice_mut(tid * tl..(tid + 1) * tl);
        let mut ent = d_ent.as_ref().map(|d| d.slice_mut(r.clone()));
        let mut mass = d_mass
            .as_ref()
            .map(|d| d.slice_mut(tid * stride..(tid + 1) * stride));
        for (i, u) in r.enumerate() {
            ctx.unit(
                u / per_tok,
                head0(u),
                heads,
                &mut out[i * width..(i + 1) * width],
                sc,
                ent.as_deref_mut().map(|e| &mut e[i]),
                mass.as_deref_mut(),
            );
        }
    });
}

/// [`attention`] for a step of few units and long rows: every chunk of every (token, KV
/// head) row is a unit of its own, leaving its output and statistics in `partials`; the
/// calling thread then folds each row's chunks in order, as one unit would have.
fn attention_by_chunks(
    pool: &ThreadPool,
    ctx: &AttnCtx<'_>,
    att: &mut [f32],
    scratch: &mut [f32],
    partials: &mut [f32],
) {
    let (sh, batch) = (ctx.sh, ctx.batch);
    let (gs, hd, bt) = (sh.group, sh.head_dim, sh.block_tokens);
    let groups = sh.n_head / gs;
    let n_tok = batch.tokens.len();
    let chunks_of = |t: usize| row_chunks(batch.pos[t] + 1, bt);
    // The units in order: chunk c (positions lo..hi) of group j of token t, as (t, j, lo, hi).
    let units = || {
        (0..n_tok).flat_map(move |t| {
            let n_pos = batch.pos[t] + 1;
            let cl = chunk_len(n_pos, bt);
            let nc = n_pos.div_ceil(cl);
            (0..groups)
                .flat_map(move |j| (0..nc).map(move |c| (t, j, c * cl, ((c + 1) * cl).min(n_pos))))
        })
    };
    let n_units: usize = (0..n_tok).map(|t| groups * chunks_of(t)).sum();
    let slot = partial_len(gs, hd);
    let width = gs * hd;
    let d_part = DisjointSlice::new(&mut partials[..n_units * slot]);
    let d_sc = DisjointSlice::new(&mut *scratch);
    let tl = ctx.thread_len;
    pool.run(&|tid, nt| {
        let r = balanced_units(|| units().map(|(_, _, lo, hi)| hi - lo), nt, tid);
        if r.is_empty() {
            return;
        }
        let parts = d_part.slice_mut(r.start * slot..r.end * slot);
        let us = ctx.split(d_sc.slice_mut(tid * tl..(tid + 1) * tl));
        let mine = units().skip(r.start).take(r.len());
        for (i, (t, j, lo, hi)) in mine.enumerate() {
            let (out, st) = parts[i * slot..(i + 1) * slot].split_at_mut(width);
            // Quantized again for each chunk: a few hundred values against a chunk's
            // hundreds of rows, and the same codes every time.
            let query = ctx.query(t, j * gs, gs, &mut *us.query);
            let sc = &mut us.sc[..gs * (hi - lo)];
            ctx.attend(query, t, j * gs, gs, (lo, hi), sc, us.tmp, out, st);
        }
    });
    let state = &mut ctx.split(scratch).stats[..2 * gs];
    let mut u = 0;
    for t in 0..n_tok {
        let nc = chunks_of(t);
        for j in 0..groups {
            let out = &mut att[t * groups * width + j * width..][..width];
            for c in 0..nc {
                let (o, st) = partials[(u + c) * slot..(u + c + 1) * slot].split_at(width);
                if c == 0 {
                    out.copy_from_slice(o);
                    state.copy_from_slice(st);
                } else {
                    fold_chunk(hd, out, state, o, st);
                }
            }
            if sh.v_rotated {
                float::hadamard_rows(ctx.isa, hd, out);
            }
            u += nc;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balanced_units_cover_everything_once() {
        for (n_tok, n_head, pos0) in [(1, 4, 0), (7, 3, 5), (64, 20, 0), (5, 1, 100)] {
            for nt in 1..5 {
                let mut next = 0;
                for tid in 0..nt {
                    let costs = || (0..n_tok * n_head).map(|u| pos0 + u / n_head + 1);
                    let r = balanced_units(costs, nt, tid);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, n_tok * n_head);
            }
        }
    }

    /// A row cut into chunks, each softmaxed and summed on its own, folded into the
    /// softmax-weighted sum of the whole row; `cuts` are the chunk boundaries.
    fn folded(scores: &[Vec<f32>], values: &[[f32; 3]], cuts: &[usize]) -> (Vec<f32>, Vec<f32>) {
        let heads = scores.len();
        let mut acc = vec![0.0f32; heads * 3];
        let mut state = vec![0.0f32; 2 * heads];
        for (c, w) in cuts.windows(2).enumerate() {
            let (lo, hi) = (w[0], w[1]);
            let mut o = vec![0.0f32; heads * 3];
            let mut st = vec![0.0f32; 2 * heads];
            for h in 0..heads {
                let mut p = scores[h][lo..hi].to_vec();
                let (m, s) = float::softmax_inplace(Isa::Scalar, &mut p);
                (st[2 * h], st[2 * h + 1]) = (m, s);
                for (pi, v) in p.iter().zip(&values[lo..hi]) {
                    for d in 0..3 {
                        o[h * 3 + d] += pi * v[d];
                    }
                }
            }
            if c == 0 {
                (acc, state) = (o, st);
            } else {
                fold_chunk(3, &mut acc, &mut state, &o, &st);
            }
        }
        (acc, state)
    }

    #[test]
    fn chunks_folded_match_one_softmax_over_the_row() {
        // Two heads over 1,000 positions whose scores drift, so every chunk has its own
        // maximum (one far above the others).
        let mut seed = 7u32;
        let mut next = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        let n = 1000;
        let scores: Vec<Vec<f32>> = (0..2)
            .map(|h| {
                (0..n)
                    .map(|p| 4.0 * next() + (p as f32 / 100.0) * if h == 0 { 1.0 } else { -3.0 })
                    .collect()
            })
            .collect();
        let values: Vec<[f32; 3]> = (0..n).map(|_| [next(), next(), 10.0 * next()]).collect();
        for cuts in [
            vec![0, 512, 1000],
            vec![0, 100, 600, 601, 1000],
            vec![0, 1000],
        ] {
            let (got, state) = folded(&scores, &values, &cuts);
            for h in 0..2 {
                let row: Vec<f64> = scores[h].iter().map(|&x| f64::from(x)).collect();
                let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = row.iter().map(|x| (x - max).exp()).sum();
                for d in 0..3 {
                    let want: f64 = row
                        .iter()
                        .zip(&values)
                        .map(|(x, v)| (x - max).exp() / sum * f64::from(v[d]))
                        .sum();
                    let err = (f64::from(got[h * 3 + d]) - want).abs();
                    assert!(
                        err <= 1e-5 * (1.0 + want.abs()),
                        "{cuts:?} h{h} d{d}: {err:e}"
                    );
                }
                // The merged statistics are the row's, and each chunk's probabilities
                // scaled by its share are the row's probabilities.
                assert_eq!(state[2 * h], max as f32, "{cuts:?} h{h}");
                let rel = (f64::from(state[2 * h + 1]) - sum).abs() / sum;
                assert!(rel < 1e-5, "{cuts:?} h{h}: sum {rel:e}");
                for w in cuts.windows(2) {
                    let mut p = scores[h][w[0]..w[1]].to_vec();
                    let (m, s) = float::softmax_inplace(Isa::Scalar, &mut p);
                    let f = chunk_share(m, s, state[2 * h], state[2 * h + 1]);
                    for (i, &pi) in p.iter().enumerate() {
                        let want = (row[w[0] + i] - max).exp() / sum;
                        let got = f64::from(pi * f);
                        assert!((got - want).abs() <= 1e-5 * want + 1e-30, "{cuts:?} p{i}");
                    }
                }
            }
        }
        // A chunk of masked positions weighs nothing; a NaN score spoils its head only.
        let mut masked = scores.clone();
        masked[0][600..700].fill(f32::NEG_INFINITY);
        masked[1][600..700].fill(f32::NEG_INFINITY);
        let cut = [0, 600, 700, 1000];
        let (got, _) = folded(&masked, &values, &cut);
        let skip: Vec<Vec<f32>> = masked
            .iter()
            .map(|r| [&r[..600], &r[700..]].concat())
            .collect();
        let vals: Vec<[f32; 3]> = [&values[..600], &values[700..]].concat();
        let (want, _) = folded(&skip, &vals, &[0, 600, 900]);
        assert_eq!(got, want);
        masked[1][650] = f32::NAN;
        masked[1][600..700].fill(f32::NAN);
        let (got, _) = folded(&masked, &values, &cut);
        assert_eq!(&got[..3], &want[..3]);
        assert!(got[3..].iter().all(|x| x.is_nan()));
    }

    #[test]
    fn chunks_split_rows_on_block_boundaries_within_bounds() {
        for bt in [1, 16, 32, 64, 1024] {
            for n_pos in [1, 511, 512, 513, 1030, 4096, 8193, 100_000] {
                let cl = chunk_len(n_pos, bt);
                let nc = row_chunks(n_pos, bt);
                assert_eq!(cl % bt, 0, "bt {bt} n_pos {n_pos}");
                assert!(nc <= ATTN_CHUNKS_MAX && (nc - 1) * cl < n_pos && nc * cl >= n_pos);
                assert_eq!(nc == 1, n_pos <= ATTN_CHUNK_MIN.next_multiple_of(bt));
            }
        }
    }
}
