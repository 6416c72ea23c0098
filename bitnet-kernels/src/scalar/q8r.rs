//! Reference product of the grouped Q8_0 head ([`Q8R`]) and Q8_0 activations ([`Q8Acts`]):
//! per row, token and block, in block order, an exact i32 dot and `sum += (d_w * d_x) * dot`,
//! the operations of [`super::q8q8::matmul_q8_0_q8_0`] on the same rows. The specification
//! of the SIMD `q8r` kernels, which give these bits exactly: each of their lanes is one row,
//! takes the blocks in order and rounds the two products and the sum separately (no FMA).
//! Padding blocks add `(0 * 0) * 0 = +0`, which leaves a sum that started at `+0` unchanged.

use std::ops::Range;

use crate::layout::half::f16_to_f32;
use crate::layout::q8r::{Q8Acts, Q8R};
use crate::layout::rows::QK8_0;

/// `out[t * rows.len() + i]` = row `rows.start + i` of `w` dotted with token row `t` of `x`,
/// for `t < n_tok`. The caller checked the shapes (`crate::layout::q8r::check_matmul`).
pub fn matmul_q8r(w: &Q8R, x: &Q8Acts, n_tok: usize, rows: Range<usize>, out: &mut [f32]) {
    let nr = rows.len();
    let nb = w.blocks();
    let mut blocks = vec![(0.0f32, [0i8; QK8_0]); nb];
    for (i, r) in rows.enumerate() {
        for (b, blk) in blocks.iter_mut().enumerate() {
            let (d, q) = w.row_block(r, b);
            *blk = (f16_to_f32(d), q);
        }
        for t in 0..n_tok {
            let (xq, dx) = (x.quants(t), x.scales(t));
            let mut sum = 0.0f32;
            for (b, (dw, qw)) in blocks.iter().enumerate() {
                let isum: i32 = qw
                    .iter()
                    .zip(&xq[b * QK8_0..(b + 1) * QK8_0])
                    .map(|(&a, &b)| i32::from(a) * i32::from(b))
                    .sum();
                sum += (dw * dx[b]) * isum as f32;
            }
            out[t * nr + i] = sum;
        }
    }
}
