//! Reference product of Q6_K weight rows (a file's Q6_K output head) and Q8_K activations
//! ([`Q8KActs`]): the specification of the SIMD `q6k_q8k` kernels, which give these bits.
//!
//! Per row, token and block, in block order: the exact integer
//! `isum = Σ_j sc_j Σ_{e in sub-block j} (q6_e - 32) a_e` (at most 16 * 128 * 16 * 32 * 127
//! < 2^28 in magnitude, so any grouping of it in i32 is the same number), then
//! `sum += (d_w * d_a) * isum` with the two products and the sum rounded separately (no FMA),
//! from `sum = +0`. A SIMD kernel may reach `isum` any way it likes (unsigned codes times `a`,
//! less `32 * Σ_j sc_j bsum_j`), since it is exact; the float steps it takes as written.

use std::ops::Range;

use crate::layout::half::f16_to_f32;
use crate::layout::q8k::{Q8K_SUB, Q8KActs};
use crate::layout::rows::{Q6K_BLOCK_BYTES, QK_K, q6k_position};

/// Bytes 192..208 of a Q6_K block: the 16 sub-block scales (i8); 208..210: `d` (f16).
const SC: usize = 192;
const D: usize = 208;

/// The 6-bit code (0..63) of element `e` of a Q6_K block.
fn code(blk: &[u8], e: usize) -> i32 {
    let (qli, high, qhi, shift) = q6k_position(e);
    let lo = if high { blk[qli] >> 4 } else { blk[qli] & 0x0f };
    i32::from(lo | (((blk[128 + qhi] >> shift) & 3) << 4))
}

/// The exact integer dot of one Q6_K block with 256 activation codes (module docs).
pub(crate) fn block_isum(blk: &[u8], a: &[i8]) -> i32 {
    (0..QK_K / Q8K_SUB)
        .map(|j| {
            let sc = i32::from(blk[SC + j] as i8);
            let dot: i32 = (Q8K_SUB * j..Q8K_SUB * (j + 1))
                .map(|e| (code(blk, e) - 32) * i32::from(a[e]))
                .sum();
            sc * dot
        })
        .sum()
}

/// `out[t * rows.len() + i]` = Q6_K row `rows.start + i` of `w` (rows of `row_len`) dotted
/// with token row `t` of `x`, for `t < n_tok`. The caller checked the shapes
/// (`crate::layout::q8k::check_matmul_q6k`).
pub fn matmul_q6k_q8k(
    w: &[u8],
    row_len: usize,
    x: &Q8KActs,
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let nr = rows.len();
    let nb = row_len / QK_K;
    let rb = nb * Q6K_BLOCK_BYTES;
    for (i, r) in rows.enumerate() {
        let row = &w[r * rb..(r + 1) * rb];
        for t in 0..n_tok {
            let (a, da) = (x.quants(t), x.scales(t));
            let mut sum = 0.0f32;
            for (b, blk) in row.chunks_exact(Q6K_BLOCK_BYTES).enumerate() {
                let isum = block_isum(blk, &a[b * QK_K..(b + 1) * QK_K]);
                let dw = f16_to_f32(u16::from_le_bytes([blk[D], blk[D + 1]]));
                sum += (dw * da[b]) * isum as f32;
            }
            out[t * nr + i] = sum;
        }
    }
}
