//! One unit of attention work: a token's query heads that share a KV head, over its whole
//! row or one chunk of it. The query is made ready for the K format's kernels (quantized
//! where keys are scored in integers), the scores are softmaxed per head, the V rows are
//! summed, and chunks are merged; the probe's statistics are taken here.

use bitnet_kernels::Isa;
use bitnet_kernels::float::{self, QK_KV};

use super::chunks::{ATTN_CHUNKS_MAX, chunk_len, chunk_share, fold_chunk};
use super::scratch::query_scratch;
use super::shape::{AttnShape, KvView};
use crate::engine::attn_stats::row_entropy;
use crate::engine::batch::Batch;

/// How a unit's query group meets the keys: as floats, or quantized for the K format's
/// XNOR or int8 scoring (see `crate::kv::KvFormat`).
#[derive(Clone, Copy)]
pub(super) enum Query<'a> {
    Float,
    Xnor(crate::kv::format::XnorScoresFn, &'a [u32], &'a [f32]),
    Int8(crate::kv::format::Int8ScoresFn, &'a [i8], &'a [f32]),
}

/// What every unit of one attention call reads.
pub(super) struct AttnCtx<'a> {
    pub(super) isa: Isa,
    pub(super) sh: &'a AttnShape,
    pub(super) kv: &'a KvView<'a>,
    pub(super) batch: &'a Batch,
    pub(super) q: &'a [f32],
    pub(super) kf: &'a crate::kv::KvFormat,
    pub(super) vf: &'a crate::kv::KvFormat,
    pub(super) xnor: Option<crate::kv::format::XnorScoresFn>,
    pub(super) int8: Option<crate::kv::format::Int8ScoresFn>,
    /// Floats of one thread's working scratch (see [`super::scratch::thread_scratch`]).
    pub(super) thread_len: usize,
}

/// One thread's working scratch, cut up.
pub(super) struct UnitScratch<'s> {
    /// Score rows: `[head][position]` for one piece; a chunked row keeps chunk `c`'s rows
    /// at `heads * lo` (for the probes, which need every chunk's probabilities).
    pub(super) sc: &'s mut [f32],
    pub(super) tmp: &'s mut [f32],
    /// A later chunk's output before it is folded in.
    pub(super) chunk_out: &'s mut [f32],
    /// `(max, sum)` per head of each chunk, then the merged state.
    pub(super) stats: &'s mut [f32],
    pub(super) query: &'s mut [f32],
}

impl AttnCtx<'_> {
    pub(super) fn split<'s>(&self, scratch: &'s mut [f32]) -> UnitScratch<'s> {
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
    pub(super) fn query<'s>(
        &self,
        t: usize,
        h0: usize,
        heads: usize,
        qs: &'s mut [f32],
    ) -> Query<'s> {
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
    pub(super) fn attend(
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
        let joinable = self.kv.rows.blocks_are_contiguous();
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
        for (b, count, p0, m) in runs() {
            let k = self.kv.rows.k_run(kvh, b, count);
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
            let v = self.kv.rows.v_run(kvh, b, count);
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
    pub(super) fn unit(
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
