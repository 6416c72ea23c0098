//! The parallel building blocks of the forward pass. Every product cuts its output rows
//! into chunks the pool's threads take as they go ([`matmul_group`]); attention splits (token, head) pairs with the work
//! balanced by the number of positions each pair attends to ([`attention`]); per-token work
//! (norms, quantization, rope, residual adds) splits the tokens of a batch ([`per_token`]).
//! No reduction is ever split across threads, so results do not depend on the thread count.
//!
//! A chunk of a product's rows for `n` tokens is written as one contiguous block
//! `[n][rows of the chunk]` (the layout the kernels produce); [`Blocked`] reads a token's
//! row back out of those blocks. Chunks are claimed dynamically (see [`n_chunks`]).

use std::ops::Range;

use bitnet_kernels::float::{self, QK_KV};
use bitnet_kernels::{ActScale, Isa};

use super::Store;
use super::attn_stats::{AttnProbe, row_entropy};
use super::engine::BatchScratch;
use super::linear::{LinInput, Linear};
use crate::kv::KvPool;
use crate::threadpool::{ChunkQueue, DisjointSlice, ThreadPool, split_range};

/// Output `[n][rows]` of a product cut into per-chunk blocks (`parts` chunks).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Blocked<'a> {
    pub(crate) data: &'a [f32],
    pub(crate) n_tok: usize,
    pub(crate) rows: usize,
    pub(crate) align: usize,
    pub(crate) parts: usize,
}

impl Blocked<'_> {
    /// The pieces of token `t`'s row: `(destination columns, source slice)`.
    #[inline]
    fn pieces(&self, t: usize) -> impl Iterator<Item = (Range<usize>, &[f32])> + '_ {
        (0..self.parts).filter_map(move |p| {
            let r = split_range(self.rows, self.parts, p, self.align);
            if r.is_empty() {
                return None;
            }
            let off = self.n_tok * r.start + t * r.len();
            Some((r.clone(), &self.data[off..off + r.len()]))
        })
    }

    /// Copies token `t`'s row into `dst` (`rows` long).
    pub(crate) fn copy_row(&self, t: usize, dst: &mut [f32]) {
        for (r, src) in self.pieces(t) {
            dst[r].copy_from_slice(src);
        }
    }

    /// `dst += row t`.
    pub(crate) fn add_row(&self, isa: Isa, t: usize, dst: &mut [f32]) {
        for (r, src) in self.pieces(t) {
            float::add_inplace(isa, &mut dst[r], src);
        }
    }
}

/// Chunks per thread a product is cut into at most (see [`n_chunks`]).
pub(crate) const CHUNKS_PER_THREAD: usize = 4;
/// Smallest chunk worth a claim, in weight bytes (about 5 µs of streaming).
const MIN_CHUNK_BYTES: usize = 64 << 10;

/// Chunks a product of `rows` rows (groups of `align`) streaming `bytes` of weights is cut
/// into on `nt` threads, at most `per_thread` each: one on a single thread, else enough
/// that threads take chunks as they finish (a slow or descheduled thread holds back one
/// chunk, not half the rows), but no chunk under [`MIN_CHUNK_BYTES`].
pub(crate) fn n_chunks(
    rows: usize,
    align: usize,
    bytes: usize,
    nt: usize,
    per_thread: usize,
) -> usize {
    if nt <= 1 {
        return 1;
    }
    let blocks = rows.div_ceil(align.max(1)).max(1);
    (per_thread * nt)
        .min((bytes / MIN_CHUNK_BYTES).max(nt))
        .min(blocks)
}

fn lin_chunks(lin: &Linear, nt: usize) -> usize {
    n_chunks(
        lin.rows,
        lin.align(),
        lin.stream_bytes(),
        nt,
        CHUNKS_PER_THREAD,
    )
}

/// The products of one group of projections sharing an input (q/k/v, gate/up, ...), each
/// cut into chunks of rows ([`n_chunks`]) that the pool's threads claim as they go.
/// `outs[i]` receives projection `i`'s blocked output (at least `n_tok * rows` long).
pub(crate) fn matmul_group(
    pool: &ThreadPool,
    isa: Isa,
    store: &Store,
    binary_acts: bool,
    lins: &[&Linear],
    inp: &LinInput<'_>,
    outs: &mut [&mut [f32]],
) {
    let n = inp.n_tok;
    let nt = pool.n_threads();
    let queues: [Option<ChunkQueue<'_, f32>>; 3] = {
        let mut it = lins.iter().zip(outs.iter_mut());
        std::array::from_fn(|_| {
            it.next().map(|(lin, o)| {
                ChunkQueue::new(&mut o[..], lin.rows, n, lin_chunks(lin, nt), lin.align())
                    .expect("projection output buffer holds n_tok * rows")
            })
        })
    };
    let job = |_tid: usize, _nt: usize| {
        for (lin, q) in lins.iter().zip(queues.iter().flatten()) {
            while let Some((r, dst)) = q.claim() {
                lin.compute(isa, store, binary_acts, inp, r, dst);
            }
        }
    };
    if nt == 1 {
        job(0, 1);
    } else {
        pool.run(&job);
    }
}

/// The blocked view of projection output `data` as [`matmul_group`] wrote it.
pub(crate) fn blocked<'a>(
    pool: &ThreadPool,
    lin: &Linear,
    data: &'a [f32],
    n_tok: usize,
) -> Blocked<'a> {
    Blocked {
        data,
        n_tok,
        rows: lin.rows,
        align: lin.align(),
        parts: lin_chunks(lin, pool.n_threads()),
    }
}

/// Per-token activation buffers, each `[chunk][stride]`.
#[derive(Debug)]
pub(crate) struct Bufs {
    /// Residual stream, stride `n_embd`.
    pub(crate) x: Vec<f32>,
    /// Normed input of the next projection group (f32), stride = that group's `cols`.
    pub(crate) xn: Vec<f32>,
    /// The same quantized to int8, stride `padded(cols)`.
    pub(crate) xq: Vec<i8>,
    pub(crate) acts: Vec<ActScale>,
    /// The same as sign bits, stride `bit_words(cols)`.
    pub(crate) bits: Vec<u64>,
    pub(crate) bit_scales: Vec<f32>,
    /// Roped queries / keys and values, strides `q_dim`, `kv_dim`, `kv_dim`.
    pub(crate) q: Vec<f32>,
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
    /// Attention output, stride `q_dim`.
    pub(crate) att: Vec<f32>,
    /// FFN inner activations, stride `n_ff`.
    pub(crate) ff: Vec<f32>,
}

/// Strides of [`Bufs`] for one per-token stage.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Strides {
    pub(crate) embd: usize,
    /// `cols` of the projection group the stage prepares input for.
    pub(crate) inp: usize,
    pub(crate) pc: usize,
    pub(crate) words: usize,
    pub(crate) q: usize,
    pub(crate) kv: usize,
    pub(crate) ff: usize,
}

/// A token range's rows of the buffers that hold a projection group's prepared input.
#[derive(Debug)]
pub(crate) struct PrepBufs<'a> {
    pub(crate) xn: &'a mut [f32],
    pub(crate) xq: &'a mut [i8],
    pub(crate) acts: &'a mut [ActScale],
    pub(crate) bits: &'a mut [u64],
    pub(crate) bit_scales: &'a mut [f32],
}

/// A token range's rows of every [`Bufs`] buffer.
#[derive(Debug)]
pub(crate) struct TokBufs<'a> {
    pub(crate) x: &'a mut [f32],
    pub(crate) p: PrepBufs<'a>,
    pub(crate) q: &'a mut [f32],
    pub(crate) k: &'a mut [f32],
    pub(crate) v: &'a mut [f32],
    pub(crate) att: &'a mut [f32],
    pub(crate) ff: &'a mut [f32],
}

impl Bufs {
    fn range(&mut self, s: &Strides, r: Range<usize>) -> TokBufs<'_> {
        let (a, b) = (r.start, r.end);
        TokBufs {
            x: &mut self.x[a * s.embd..b * s.embd],
            p: PrepBufs {
                xn: &mut self.xn[a * s.inp..b * s.inp],
                xq: &mut self.xq[a * s.pc..b * s.pc],
                acts: &mut self.acts[a..b],
                bits: &mut self.bits[a * s.words..b * s.words],
                bit_scales: &mut self.bit_scales[a..b],
            },
            q: &mut self.q[a * s.q..b * s.q],
            k: &mut self.k[a * s.kv..b * s.kv],
            v: &mut self.v[a * s.kv..b * s.kv],
            att: &mut self.att[a * s.q..b * s.q],
            ff: &mut self.ff[a * s.ff..b * s.ff],
        }
    }
}

/// Runs `f(tokens, rows of those tokens)` over `0..n_tok`: on the calling thread for a single
/// token, else split across the pool.
pub(crate) fn per_token<F>(pool: &ThreadPool, bufs: &mut Bufs, s: &Strides, n_tok: usize, f: F)
where
    F: Fn(Range<usize>, &mut TokBufs<'_>) + Sync,
{
    if n_tok <= 1 || pool.n_threads() == 1 {
        let mut tb = bufs.range(s, 0..n_tok);
        f(0..n_tok, &mut tb);
        return;
    }
    let d_x = DisjointSlice::new(&mut bufs.x[..]);
    let d_xn = DisjointSlice::new(&mut bufs.xn[..]);
    let d_xq = DisjointSlice::new(&mut bufs.xq[..]);
    let d_acts = DisjointSlice::new(&mut bufs.acts[..]);
    let d_bits = DisjointSlice::new(&mut bufs.bits[..]);
    let d_bs = DisjointSlice::new(&mut bufs.bit_scales[..]);
    let d_q = DisjointSlice::new(&mut bufs.q[..]);
    let d_k = DisjointSlice::new(&mut bufs.k[..]);
    let d_v = DisjointSlice::new(&mut bufs.v[..]);
    let d_att = DisjointSlice::new(&mut bufs.att[..]);
    let d_ff = DisjointSlice::new(&mut bufs.ff[..]);
    pool.run(&|tid, nt| {
        let r = split_range(n_tok, nt, tid, 1);
        if r.is_empty() {
            return;
        }
        let (a, b) = (r.start, r.end);
        let mut tb = TokBufs {
            x: d_x.slice_mut(a * s.embd..b * s.embd),
            p: PrepBufs {
                xn: d_xn.slice_mut(a * s.inp..b * s.inp),
                xq: d_xq.slice_mut(a * s.pc..b * s.pc),
                acts: d_acts.slice_mut(a..b),
                bits: d_bits.slice_mut(a * s.words..b * s.words),
                bit_scales: d_bs.slice_mut(a..b),
            },
            q: d_q.slice_mut(a * s.q..b * s.q),
            k: d_k.slice_mut(a * s.kv..b * s.kv),
            v: d_v.slice_mut(a * s.kv..b * s.kv),
            att: d_att.slice_mut(a * s.q..b * s.q),
            ff: d_ff.slice_mut(a * s.ff..b * s.ff),
        };
        f(r, &mut tb);
    });
}

/// One layer of the paged KV pool as attention reads it.
#[derive(Copy, Clone, Debug)]
pub(crate) struct KvView<'a> {
    pub(crate) pool: &'a KvPool,
    pub(crate) layer: usize,
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
pub(crate) struct AttnShape {
    pub(crate) n_head: usize,
    pub(crate) group: usize,
    pub(crate) head_dim: usize,
    /// Bytes between two positions of one KV head's K rows.
    pub(crate) k_stride: usize,
    /// As `k_stride` for V (K and V formats are chosen independently).
    pub(crate) v_stride: usize,
    pub(crate) scale: f32,
    /// Positions a sequence holds at most (scores scratch: `group * max_pos` per thread).
    pub(crate) max_pos: usize,
    pub(crate) block_tokens: usize,
    /// V rows are stored rotated: each head's output is rotated back.
    pub(crate) v_rotated: bool,
    /// B1 keys are scored by XNOR/popcount against the sign-quantized query.
    pub(crate) xnor: bool,
}

/// Floats of attention scratch per thread a quantized query takes: for the XNOR path a
/// group's sign words and block scales; for int8 query scoring (`int8`, keys with integer
/// codes) the group's codes (four to a float) and block scales.
pub(crate) fn query_scratch(xnor: bool, int8: bool, group: usize, head_dim: usize) -> usize {
    let nb = head_dim.div_ceil(QK_KV);
    if xnor {
        2 * group * nb
    } else if int8 {
        group * nb * (QK_KV / 4 + 1)
    } else {
        0
    }
}

/// The `tid`-th of `nt` ranges of (token, unit) pairs, balanced by attended positions: pair
/// `(t, h)` (index `t * n_head + h`, `n_head` units per token) costs `cost(t)`.
fn balanced_pairs(
    n_tok: usize,
    n_head: usize,
    cost: impl Fn(usize) -> usize,
    nt: usize,
    tid: usize,
) -> Range<usize> {
    let cost = |t: usize| cost(t) as u128;
    let total: u128 = (0..n_tok).map(|t| cost(t) * n_head as u128).sum();
    let bound = |k: usize| -> usize {
        if k == 0 {
            return 0;
        }
        if k >= nt {
            return n_tok * n_head;
        }
        let target = total * k as u128 / nt as u128;
        let mut acc = 0u128;
        for p in 0..n_tok * n_head {
            if acc >= target {
                return p;
            }
            acc += cost(p / n_head);
        }
        n_tok * n_head
    };
    bound(tid)..bound(tid + 1)
}

/// Causal attention of the batch's tokens, each over its own sequence's blocks in one
/// layer of the pool (which already holds the batch's rows): token `t` at position `pos`
/// attends to positions `0..=pos` of its sequence, `att[t][h] = softmax(q[t][h] . K /
/// sqrt(d)) V`, query head `h` reading KV head `h / group`. Scores are computed block by
/// block into one row per head, softmaxed once, then the values of each block accumulate
/// into the output. `scratch` holds `group * (2 * max_pos + block_tokens)` floats per
/// thread. `probe` asks for statistics of the probabilities (see [`AttnProbe`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    pool: &ThreadPool,
    isa: Isa,
    sh: &AttnShape,
    kv: &KvView<'_>,
    batch: &BatchScratch,
    q: &[f32],
    att: &mut [f32],
    scratch: &mut [f32],
    probe: &mut AttnProbe<'_>,
) {
    let n_tok = batch.tokens.len();
    let hd = sh.head_dim;
    let qd = sh.n_head * hd;
    let (kf, vf) = (kv.pool.k_format(), kv.pool.v_format());
    let xnor = if sh.xnor { kf.xnor_scores } else { None };
    let int8 = if xnor.is_none() { kf.int8_scores } else { None };
    let bt = sh.block_tokens;
    // A unit of work is one token's query heads that share a KV head (or half of them, see
    // below), so each K/V row is read once for all of them.
    let gs = sh.group;
    // Decoding a token or two leaves fewer units than the threads can share evenly (the
    // 2B-4T shape's 5 KV heads run 3:2 on 2 threads, so the layer waits on 3). Each group
    // is then split into two units of half its heads: both read the group's rows, but its
    // arithmetic, which bounds the quantized formats, is shared out. No bit changes: every
    // kernel keeps each head's sums to itself, the same for groups of 2 or 4 heads as of 4
    // or 8 (not so for 1 against 2, whose f16 kernels differ: groups of 2 are not split).
    // The attention probe counts whole groups, so it keeps them.
    let nt = pool.n_threads();
    let units = n_tok * (sh.n_head / gs);
    let split = nt > 1
        && matches!(gs, 4 | 8)
        && !units.is_multiple_of(nt)
        && units < 4 * nt
        && probe.entropy.is_none()
        && probe.mass.is_none();
    let parts = if split { 2 } else { 1 };
    let heads = gs / parts;
    let per_tok = sh.n_head / heads;
    let width = heads * hd;
    let bt_mass = sh.block_tokens;
    let unit = |u: usize,
                out: &mut [f32],
                sc: &mut [f32],
                ent: Option<&mut f32>,
                mass: Option<&mut [f32]>| {
        let (t, j, part) = (u / per_tok, u % per_tok / parts, u % parts);
        let n_pos = batch.pos[t] + 1;
        let (tstart, tlen) = batch.table[t];
        let blocks = &batch.tables[tstart as usize..][..tlen as usize];
        let h0 = j * gs + part * heads;
        let kvh = h0 / sh.group;
        let qg = &q[t * qd + h0 * hd..][..width];
        let (sc, xq) = sc.split_at_mut(gs * (2 * sh.max_pos + sh.block_tokens));
        // A quantized query (sign bits for the XNOR path, int8 codes for integer keys) is
        // made once per unit.
        let qscratch = &mut xq[..query_scratch(xnor.is_some(), int8.is_some(), heads, hd)];
        let query = if let Some(f) = xnor {
            let (bits, scales) = qscratch.split_at_mut(heads * hd / QK_KV);
            let bits: &mut [u32] = bytemuck::cast_slice_mut(bits);
            float::b1_sign_query(qg, bits, scales);
            Query::Xnor(f, &*bits, &*scales)
        } else if let Some(f) = int8 {
            let (codes, scales) = qscratch.split_at_mut(heads * hd / 4);
            let codes: &mut [i8] = bytemuck::cast_slice_mut(codes);
            float::int8_query(qg, codes, scales);
            Query::Int8(f, &*codes, &*scales)
        } else {
            Query::Float
        };
        let score = |k: &[u8], n_q: usize, q: &[f32], n: usize, out: &mut [f32]| match query {
            // The quantized-query kernels score whole groups only (n_q is the unit's heads or,
            // 1), so their query is the group's.
            Query::Xnor(f, bits, scales) => {
                f(isa, bits, scales, n_q, k, sh.k_stride, n, sh.scale, out)
            }
            Query::Int8(f, codes, scales) => {
                f(isa, codes, scales, n_q, k, sh.k_stride, n, sh.scale, out)
            }
            Query::Float => (kf.scores)(isa, q, n_q, k, sh.k_stride, n, sh.scale, out),
        };
        let (sc, tmp) = sc.split_at_mut(gs * sh.max_pos);
        let sc = &mut sc[..heads * n_pos];
        // The sequence's blocks are walked as runs of consecutive ids: with contiguous
        // blocks a run is one stretch of rows, so it takes one kernel call for scores and
        // one for values (a fresh sequence is usually a single run: one call each, straight
        // into and out of the score rows, as over a contiguous cache). Otherwise a run is
        // one block.
        let n_blocks = n_pos.div_ceil(bt);
        let blocks = &blocks[..n_blocks];
        let joinable = kv.pool.blocks_are_contiguous();
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
                Some((blocks[start], i - start, p0, (i * bt).min(n_pos) - p0))
            })
        };
        let single = heads == 1 || blocks.len() == 1 || runs().nth(1).is_none();
        for (b, count, p0, n) in runs() {
            let k = kv.pool.k_run(kv.layer, kvh, b, count);
            if single && p0 == 0 && n == n_pos {
                score(k, heads, qg, n, sc);
            } else if heads == 1 {
                score(k, 1, qg, n, &mut sc[p0..p0 + n]);
            } else {
                let t = &mut tmp[..heads * n];
                score(k, heads, qg, n, t);
                for h in 0..heads {
                    sc[h * n_pos + p0..][..n].copy_from_slice(&t[h * n..][..n]);
                }
            }
        }
        for row in sc.chunks_exact_mut(n_pos) {
            float::softmax_inplace(isa, row);
        }
        if let Some(e) = ent
            && batch.decode[t]
        {
            *e = sc.chunks_exact(n_pos).map(row_entropy).sum();
        }
        if let Some(m) = mass {
            // This sequence's stretch of the thread's stripe (see `AttnProbe::mass`).
            let m = &mut m[tstart as usize * bt_mass..][..n_pos];
            for row in sc.chunks_exact(n_pos) {
                float::add_inplace(isa, m, row);
            }
        }
        // The weighted values, accumulated run by run (the kernels add onto `out`).
        out.fill(0.0);
        for (b, count, p0, n) in runs() {
            let v = kv.pool.v_run(kv.layer, kvh, b, count);
            if single && p0 == 0 && n == n_pos {
                (vf.wsum)(isa, sc, heads, v, sh.v_stride, n, out);
            } else if heads == 1 {
                (vf.wsum)(isa, &sc[p0..p0 + n], 1, v, sh.v_stride, n, out);
            } else {
                let t = &mut tmp[..heads * n];
                for h in 0..heads {
                    t[h * n..][..n].copy_from_slice(&sc[h * n_pos + p0..][..n]);
                }
                (vf.wsum)(isa, t, heads, v, sh.v_stride, n, out);
            }
        }
        if sh.v_rotated {
            // Σ_p w_p H v_p = H Σ_p w_p v_p, and H is its own inverse.
            float::hadamard_rows(isa, hd, out);
        }
    };
    let n_units = n_tok * per_tok;
    let scratch_len =
        gs * (2 * sh.max_pos + bt) + query_scratch(xnor.is_some(), int8.is_some(), gs, hd);
    let stride = probe.mass_stride;
    if pool.n_threads() == 1 {
        let mut ent = probe.entropy.as_deref_mut();
        let mut mass = probe.mass.as_deref_mut().map(|m| &mut m[..stride]);
        for u in 0..n_units {
            unit(
                u,
                &mut att[u * width..(u + 1) * width],
                &mut scratch[..scratch_len],
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
    pool.run(&|tid, nt| {
        let r = balanced_pairs(n_tok, per_tok, |t| batch.pos[t] + 1, nt, tid);
        if r.is_empty() {
            return;
        }
        let out = d_att.slice_mut(r.start * width..r.end * width);
        let sc = d_sc.slice_mut(tid * scratch_len..(tid + 1) * scratch_len);
        let mut ent = d_ent.as_ref().map(|d| d.slice_mut(r.clone()));
        let mut mass = d_mass
            .as_ref()
            .map(|d| d.slice_mut(tid * stride..(tid + 1) * stride));
        for (i, u) in r.enumerate() {
            unit(
                u,
                &mut out[i * width..(i + 1) * width],
                sc,
                ent.as_deref_mut().map(|e| &mut e[i]),
                mass.as_deref_mut(),
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balanced_pairs_cover_everything_once() {
        for (n_tok, n_head, pos0) in [(1, 4, 0), (7, 3, 5), (64, 20, 0), (5, 1, 100)] {
            for nt in 1..5 {
                let mut next = 0;
                for tid in 0..nt {
                    let r = balanced_pairs(n_tok, n_head, |t| pos0 + t + 1, nt, tid);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, n_tok * n_head);
            }
        }
    }

    #[test]
    fn blocked_rows_round_trip() {
        // 3 tokens, 10 rows, 2 parts aligned to 4: part 0 = rows 0..8? split_range decides.
        let (n, rows, parts, align) = (3usize, 10usize, 2usize, 4usize);
        let mut data = vec![0.0f32; n * rows];
        for p in 0..parts {
            let r = split_range(rows, parts, p, align);
            for t in 0..n {
                for (i, row) in r.clone().enumerate() {
                    data[n * r.start + t * r.len() + i] = (t * 100 + row) as f32;
                }
            }
        }
        let b = Blocked {
            data: &data,
            n_tok: n,
            rows,
            align,
            parts,
        };
        let mut row = vec![0.0; rows];
        for t in 0..n {
            b.copy_row(t, &mut row);
            let want: Vec<f32> = (0..rows).map(|c| (t * 100 + c) as f32).collect();
            assert_eq!(row, want);
            b.add_row(Isa::Scalar, t, &mut row);
            assert_eq!(row[3], 2.0 * want[3]);
        }
    }
}
