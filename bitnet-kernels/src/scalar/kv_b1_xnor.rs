//! Reference XNOR/popcount scoring of B1 keys (`crate::layout::kv` has the B1 layout) against
//! a sign-quantized query: the specification of the SIMD `kv_b1_xnor` kernels, bit for bit.
//! One row's score is defined beside the layout (`crate::layout::kv`), since the SIMD kernels
//! score their last positions with it too.

use crate::layout::kv::{B1_BLOCK_BYTES, QK_KV, b1_xnor_row};

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

/// `out[h * n_pos + p] = scale * b1_xnor_row(q_h, k_p)` for the `n_q` heads of `qbits` /
/// `qscales` (`[n_q][d / 32]` each).
/// Always `true`: the reference takes every input (the SIMD kernels of this op may decline
/// one, see `crate::ops::Kernels`).
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
) -> bool {
    let nb = qbits.len() / n_q;
    let rb = nb * B1_BLOCK_BYTES;
    for h in 0..n_q {
        let (qb, qs) = (&qbits[h * nb..][..nb], &qscales[h * nb..][..nb]);
        for p in 0..n_pos {
            let row = &k[p * kv_stride..][..rb];
            out[h * n_pos + p] = scale * b1_xnor_row(qb, qs, row);
        }
    }
    true
}
