//! Reference attention of one query head over one KV head of an f16, f32 or Q8_0 cache:
//! scores and weighted sums written plainly, the specification of the SIMD `attn` kernels
//! (the grouped-query references, head after head with these, are `attn_group.rs`).

use super::float::{dot_by, dot_f32, f16_table};
use super::qrows::q8_0_block;
use crate::layout::rows::{Q8_0_BLOCK_BYTES, QK8_0};

/// `out[p] = scale * dot(q, k[p * kv_stride..][..q.len()])` for an f16 cache.
pub fn attn_scores_f16(
    q: &[f32],
    k: &[u16],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let t = f16_table();
    let d = q.len();
    for (p, o) in out.iter_mut().enumerate().take(n_pos) {
        let kp = &k[p * kv_stride..p * kv_stride + d];
        *o = scale * dot_by(d, q, |i| t[usize::from(kp[i])]);
    }
}

/// `out += Σ_p w[p] * v[p * kv_stride..][..out.len()]` for an f16 cache (accumulates, so a
/// paged cache can be walked block by block).
pub fn attn_weighted_sum_f16(
    w: &[f32],
    v: &[u16],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let t = f16_table();
    let d = out.len();
    for (p, &wp) in w.iter().enumerate().take(n_pos) {
        let vp = &v[p * kv_stride..p * kv_stride + d];
        for (o, &h) in out.iter_mut().zip(vp) {
            *o += wp * t[usize::from(h)];
        }
    }
}

/// [`attn_scores_f16`] for an f32 cache.
pub fn attn_scores_f32(
    q: &[f32],
    k: &[f32],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let d = q.len();
    for (p, o) in out.iter_mut().enumerate().take(n_pos) {
        *o = scale * dot_f32(q, &k[p * kv_stride..p * kv_stride + d]);
    }
}

/// [`attn_weighted_sum_f16`] for an f32 cache.
pub fn attn_weighted_sum_f32(
    w: &[f32],
    v: &[f32],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let d = out.len();
    for (p, &wp) in w.iter().enumerate().take(n_pos) {
        for (o, &h) in out.iter_mut().zip(&v[p * kv_stride..p * kv_stride + d]) {
            *o += wp * h;
        }
    }
}

/// Attention scores over a Q8_0 cache: each position's head row is `q.len() / 32` Q8_0
/// blocks starting at byte `p * kv_stride`; `out[p] = scale * Σ_b d_b * dot(q_b, qs_b)`.
pub fn attn_scores_q8_0(
    q: &[f32],
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let rb = q.len() / QK8_0 * Q8_0_BLOCK_BYTES;
    for (p, o) in out.iter_mut().enumerate().take(n_pos) {
        let row = &k[p * kv_stride..p * kv_stride + rb];
        let mut sum = 0.0f32;
        for (blk, qb) in row
            .chunks_exact(Q8_0_BLOCK_BYTES)
            .zip(q.chunks_exact(QK8_0))
        {
            let (d, qs) = q8_0_block(blk);
            sum += d * dot_by(QK8_0, qb, |i| f32::from(qs[i] as i8));
        }
        *o = scale * sum;
    }
}

/// `out += Σ_p w[p] * v_p` over a Q8_0 cache (rows as in [`attn_scores_q8_0`], `out.len()`
/// a multiple of 32): `out[j] += (w[p] * d_b) * qs_j`.
pub fn attn_weighted_sum_q8_0(
    w: &[f32],
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let rb = out.len() / QK8_0 * Q8_0_BLOCK_BYTES;
    for (p, &wp) in w.iter().enumerate().take(n_pos) {
        let row = &v[p * kv_stride..p * kv_stride + rb];
        for (blk, ob) in row
            .chunks_exact(Q8_0_BLOCK_BYTES)
            .zip(out.chunks_exact_mut(QK8_0))
        {
            let (d, qs) = q8_0_block(blk);
            let c = wp * d;
            for (o, &x) in ob.iter_mut().zip(qs) {
                *o += c * f32::from(x as i8);
            }
        }
    }
}
