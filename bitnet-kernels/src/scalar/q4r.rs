//! Reference product of the grouped Q4_0 head ([`Q4R`]) and Q8_0 activations ([`Q8Acts`]):
//! per row, token and block, in block order, an exact i32 dot of the codes `nibble - 8` and
//! the activation quants, and `sum += (d_w * d_x) * dot`, the float steps of the Q8_0 head's
//! reference (`super::q8r`). The specification of the SIMD `q4r` kernels, which give these
//! bits exactly: each of their lanes is one row, takes the blocks in order and rounds the two
//! products and the sum separately (no FMA). Padding blocks add `(0 * d_x) * 0 = +0`.

use std::ops::Range;

use crate::layout::half::f16_to_f32;
use crate::layout::q4r::Q4R;
use crate::layout::q8r::Q8Acts;
use crate::layout::rows::QK4_0;

/// `out[t * rows.len() + i]` = row `rows.start + i` of `w` dotted with token row `t` of `x`,
/// for `t < n_tok`. The caller checked the shapes (`crate::layout::q4r::check_matmul`).
pub fn matmul_q4r(w: &Q4R, x: &Q8Acts, n_tok: usize, rows: Range<usize>, out: &mut [f32]) {
    let nr = rows.len();
    let nb = w.blocks();
    let mut blocks = vec![(0.0f32, [0i8; QK4_0]); nb];
    for (i, r) in rows.enumerate() {
        for (b, blk) in blocks.iter_mut().enumerate() {
            let (d, q) = w.row_block(r, b);
            let mut codes = [0i8; QK4_0];
            for (j, &byte) in q.iter().enumerate() {
                codes[j] = (byte & 0x0F) as i8 - 8;
                codes[j + QK4_0 / 2] = (byte >> 4) as i8 - 8;
            }
            *blk = (f16_to_f32(d), codes);
        }
        for t in 0..n_tok {
            let (xq, dx) = (x.quants(t), x.scales(t));
            let mut sum = 0.0f32;
            for (b, (dw, qw)) in blocks.iter().enumerate() {
                let isum: i32 = qw
                    .iter()
                    .zip(&xq[b * QK4_0..(b + 1) * QK4_0])
                    .map(|(&a, &b)| i32::from(a) * i32::from(b))
                    .sum();
                sum += (dw * dx[b]) * isum as f32;
            }
            out[t * nr + i] = sum;
        }
    }
}
