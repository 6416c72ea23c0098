//! Paged attention: each token of a batch attends over its own sequence's KV blocks, one
//! layer at a time. The threads split (token, KV head) units, or chunks of long rows, with
//! the work balanced by the positions each attends to ([`attention`]). The one reduction
//! split across threads, attention over a long row, is cut by the row's length alone and
//! merged in a fixed order ([`fold_chunk`]), so results do not depend on the thread count.
//!
//! This file shares the work among the threads; the rest is split by concern:
//! `attention/shape.rs` what a call is given, `attention/unit.rs` one unit's kernel calls
//! (the query made ready for the K format, scores, softmax, the V sums, the probe's
//! statistics), `attention/chunks.rs` where long rows are cut and how chunks merge, and
//! `attention/scratch.rs` the scratch each thread needs.

use std::ops::Range;

use bitnet_kernels::Isa;
use bitnet_kernels::float;

use super::attn_stats::AttnProbe;
use super::batch::Batch;
use crate::threadpool::{DisjointSlice, ThreadPool};

mod chunks;
mod scratch;
mod shape;
mod unit;

use chunks::{PARTIALS_PER_THREAD, chunk_len, fold_chunk, partial_len, row_chunks};
pub(super) use scratch::attention_scratch;
use scratch::{query_scratch, thread_scratch};
pub(super) use shape::{AttnShape, KvView};
use unit::AttnCtx;

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

/// Causal attention of the batch's tokens, each over its own sequence's blocks in one
/// layer of the pool (which already holds the batch's rows): token `t` at position `pos`
/// attends to positions `0..=pos` of its sequence, `att[t][h] = softmax(q[t][h] . K /
/// sqrt(d)) V`, query head `h` reading KV head `h / group`. Scores are computed block by
/// block into one row per head, softmaxed once, then the values of each block accumulate
/// into the output; rows longer than [`chunks::ATTN_CHUNK_MIN`] (rounded up to a block) go in
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
    let (kf, vf) = (kv.rows.k_format(), kv.rows.v_format());
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
}
