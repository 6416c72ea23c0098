//! Reference XNOR/popcount scoring of B1 keys (`crate::float::kv` has the B1 layout) against
//! a sign-quantized query: the specification of the SIMD `kv_b1_xnor` kernels, bit for bit.

use super::kv::f16_at;
use crate::float::kv::{B1_BLOCK_BYTES, QK_KV};

/// The 1-bit query of the XNOR/popcount scoring of B1 keys: per 32 values, sign bits (bit j
/// set when `q[j] >= 0`, the keys' convention; NaN reads as negative) and the mean
/// magnitude (NaN skipped), the scale that minimises the block's squared error.
pub fn b1_sign_query(q: &[f32], bits: &mut [u32], scales: &mut [f32]) {
    for ((qb, w), s) in q.chunks_exact(QK_KV).zip(bits).zip(scales) {
        *w = qb
            .iter()
            .enumerate()
            .fold(0u32, |acc, (j, &v)| acc | (u32::from(v >= 0.0) << j));
        let sum: f32 = qb.iter().filter(|v| !v.is_nan()).map(|v| v.abs()).sum();
        *s = sum / QK_KV as f32;
    }
}

/// One B1 key row against one sign-quantized query head, before the attention scale:
/// `Σ_b fma(((32 - 2 popcount(q_b ^ k_b)) * s_k,b), s_q,b, acc)` in block order (the count
/// of agreeing signs minus the disagreeing ones is `2 popcount(!(q ^ k)) - 32`).
#[inline]
pub fn b1_xnor_row(qbits: &[u32], qscales: &[f32], row: &[u8]) -> f32 {
    let mut acc = 0.0f32;
    for (b, (&qw, &qs)) in qbits.iter().zip(qscales).enumerate() {
        let blk = &row[B1_BLOCK_BYTES * b..][..B1_BLOCK_BYTES];
        let kw = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
        let agree = 32 - 2 * (qw ^ kw).count_ones() as i32;
        let t = agree as f32 * f16_at(blk, 0);
        acc = t.mul_add(qs, acc);
    }
    acc
}

/// `out[h * n_pos + p] = scale * b1_xnor_row(q_h, k_p)` for the `n_q` heads of `qbits` /
/// `qscales` (`[n_q][d / 32]` each).
#[allow(clippy::too_many_arguments)]
pub fn attn_scores_b1_xnor(
    qbits: &[u32],
    qscales: &[f32],
    n_q: usize,
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let nb = qbits.len() / n_q;
    let rb = nb * B1_BLOCK_BYTES;
    for h in 0..n_q {
        let (qb, qs) = (&qbits[h * nb..][..nb], &qscales[h * nb..][..nb]);
        for p in 0..n_pos {
            let row = &k[p * kv_stride..][..rb];
            out[h * n_pos + p] = scale * b1_xnor_row(qb, qs, row);
        }
    }
}
