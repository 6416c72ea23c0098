//! Reference Q8_0 x Q8_0 products (the `--head q8` output head): per block an exact i32
//! dot, scaled by both blocks' scales and summed in f32. The specification of the SIMD
//! `q8q8` kernels.

use std::ops::Range;

use super::qrows::q8_0_block;
use crate::layout::rows::{Q8_0_BLOCK_BYTES, QK8_0, RowFormat};

/// Q8_0 weights times Q8_0 activations: per block an exact i32 dot, scaled by
/// `d_w * d_x` and summed in f32. `xq` is `n_tok` Q8_0 rows of `row_len`.
pub fn matmul_q8_0_q8_0(
    w: &[u8],
    row_len: usize,
    xq: &[u8],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let rb = RowFormat::Q8_0
        .row_bytes(row_len)
        .expect("checked by the caller");
    let nr = rows.len();
    for (i, r) in rows.enumerate() {
        let row = &w[r * rb..(r + 1) * rb];
        for t in 0..n_tok {
            let xr = &xq[t * rb..(t + 1) * rb];
            let mut sum = 0.0f32;
            for (wb, xb) in row
                .chunks_exact(Q8_0_BLOCK_BYTES)
                .zip(xr.chunks_exact(Q8_0_BLOCK_BYTES))
            {
                let (dw, qw) = q8_0_block(wb);
                let (dx, qx) = q8_0_block(xb);
                let isum: i32 = qw
                    .iter()
                    .zip(qx)
                    .map(|(&a, &b)| i32::from(a as i8) * i32::from(b as i8))
                    .sum();
                sum += (dw * dx) * isum as f32;
            }
            out[t * nr + i] = sum;
        }
    }
    debug_assert_eq!(QK8_0, 32);
}
