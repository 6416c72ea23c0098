//! Reference Q4_0 x Q8_0 products (the `--head q4_0` output head): the specification of the
//! SIMD `q4q8` kernels, which give its bits exactly.
//!
//! The float order is fixed so that a 256-bit or a pair of 128-bit registers can follow it:
//! a block's 32 products fall into eight lanes of four consecutive elements (the i32 lanes
//! of `vpmaddubsw` + `vpmaddwd`, `vpdpbusd` or `SDOT` over the block's elements in order),
//! each lane's exact sum is converted to f32 and fused-multiply-added into its own f32
//! accumulator with the block's `d_w * d_a`, and the eight accumulators are summed at the
//! end in the tree of [`lane_total`].

use std::ops::Range;

use super::qrows::q8_0_block;
use crate::layout::half::f16_to_f32;
use crate::layout::rows::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK4_0, RowFormat};

/// f32 accumulators a row's dot keeps, one per group of four consecutive elements of a
/// block.
pub const LANES: usize = 8;

/// The weight of element `j` of a Q4_0 block's nibble bytes `q` (16 bytes), as the signed
/// code `nibble - 8`: low nibbles first, then high nibbles.
#[inline]
fn q4_code(q: &[u8], j: usize) -> i32 {
    let nibble = if j < QK4_0 / 2 {
        q[j] & 0x0F
    } else {
        q[j - QK4_0 / 2] >> 4
    };
    i32::from(nibble) - 8
}

/// The sum of the eight lane accumulators: lanes `i` and `i + 4` first (the halves of a
/// 256-bit register), then `(0 + 2) + (1 + 3)`.
#[inline]
pub fn lane_total(acc: &[f32; LANES]) -> f32 {
    let s: [f32; 4] = std::array::from_fn(|i| acc[i] + acc[i + 4]);
    (s[0] + s[2]) + (s[1] + s[3])
}

/// Q4_0 weight rows times Q8_0 activation rows: `out[t * rows.len() + i]` is row
/// `rows.start + i` of `w` (rows of `row_len` weights) dotted with row `t` of `xq` (`n_tok`
/// Q8_0 rows of `row_len`), in the order of the module docs.
pub fn matmul_q4_0_q8_0(
    w: &[u8],
    row_len: usize,
    xq: &[u8],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let wrb = RowFormat::Q4_0
        .row_bytes(row_len)
        .expect("checked by the caller");
    let xrb = RowFormat::Q8_0
        .row_bytes(row_len)
        .expect("checked by the caller");
    let nr = rows.len();
    for (i, r) in rows.enumerate() {
        let row = &w[r * wrb..(r + 1) * wrb];
        for t in 0..n_tok {
            let xr = &xq[t * xrb..(t + 1) * xrb];
            let mut acc = [0.0f32; LANES];
            for (wb, xb) in row
                .chunks_exact(Q4_0_BLOCK_BYTES)
                .zip(xr.chunks_exact(Q8_0_BLOCK_BYTES))
            {
                let dw = f16_to_f32(u16::from_le_bytes([wb[0], wb[1]]));
                let (dx, qx) = q8_0_block(xb);
                let d = dw * dx;
                for (k, a) in acc.iter_mut().enumerate() {
                    let isum: i32 = (4 * k..4 * k + 4)
                        .map(|j| q4_code(&wb[2..], j) * i32::from(qx[j] as i8))
                        .sum();
                    *a = super::fma::mul_add(isum as f32, d, *a);
                }
            }
            out[t * nr + i] = lane_total(&acc);
        }
    }
}
