//! Reference product of the grouped Q6_K head ([`Q6KR`]) and Q8_K activations
//! ([`Q8KActs`]): the steps of [`super::q6k_q8k::matmul_q6k_q8k`] on the rows the groups hold
//! (an exact i32 block dot, then `sum += (d_w * d_a) * isum` in block order, no FMA), so a
//! grouped head gives the bits its Q6_K rows gave. The specification of the SIMD `q6kr`
//! kernels: each of their lanes is one row and takes those float steps as written.

use std::ops::Range;

use crate::layout::q6kr::Q6KR;
use crate::layout::q8k::Q8KActs;
use crate::layout::rows::{Q6K_BLOCK_BYTES, QK_K};
use crate::scalar::q6k_q8k::block_isum;

/// `out[t * rows.len() + i]` = row `rows.start + i` of `w` dotted with token row `t` of `x`,
/// for `t < n_tok`. The caller checked the shapes (`crate::layout::q6kr::check_matmul`).
pub fn matmul_q6kr(w: &Q6KR, x: &Q8KActs, n_tok: usize, rows: Range<usize>, out: &mut [f32]) {
    let nr = rows.len();
    let mut row = vec![0u8; w.super_blocks() * Q6K_BLOCK_BYTES];
    for (i, r) in rows.enumerate() {
        w.q6k_row(r, &mut row);
        for t in 0..n_tok {
            let (a, da) = (x.quants(t), x.scales(t));
            let mut sum = 0.0f32;
            for (b, blk) in row.chunks_exact(Q6K_BLOCK_BYTES).enumerate() {
                let isum = block_isum(blk, &a[b * QK_K..(b + 1) * QK_K]);
                sum += (w.d(r, b) * da[b]) * isum as f32;
            }
            out[t * nr + i] = sum;
        }
    }
}
