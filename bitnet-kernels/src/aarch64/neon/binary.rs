//! NEON 1-bit kernels over the bit-row layout of [`crate::binary`].
//!
//! `raw_dots_multi` (signs x int8, `crate::aarch64::int_walk::binary`): per token and word,
//! `AND` keeps the activations whose bit is 1, `SADDLP`/`SADALP` sum them into i16
//! (<= 4 * 2 * 128 per word) and then into i32. `xor_popcounts`: `EOR` + `CNT` on two words at
//! a time, `UADALP` into u16 lanes (flushed before they can overflow), a scalar `count_ones`
//! for an odd last word.

use std::arch::aarch64::*;
use std::ops::Range;

use crate::aarch64::int_dot::NeonStep;
use crate::aarch64::int_walk::binary;
use crate::layout::binary::BinaryMatrix;

/// See the reference `raw_dots_multi` (`scalar/binary.rs`).
///
/// # Safety
/// NEON; shapes as checked by `crate::layout::binary::check_raw_dots`.
#[target_feature(enable = "neon")]
pub unsafe fn raw_dots_multi(
    w: &BinaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: Range<usize>,
    words: Range<usize>,
    out: &mut [i32],
) {
    // SAFETY: this function enables NEON, the step's only feature; shapes checked by the
    // caller.
    unsafe { binary::raw_dots_multi::<NeonStep>(w, q, n_tok, rows, words, out) }
}

/// See the reference `xor_popcounts` (`scalar/binary.rs`).
///
/// # Safety
/// NEON; shapes as checked by `crate::layout::binary::check_raw_dots` (with `x.len() * 64` columns).
#[target_feature(enable = "neon")]
pub unsafe fn xor_popcounts(
    w: &BinaryMatrix,
    x: &[u64],
    rows: Range<usize>,
    words: Range<usize>,
    out: &mut [i32],
) {
    // Each step adds at most 16 to a u16 lane.
    const STEPS: usize = 4096;
    let pairs = words.len() / 2;
    for (o, r) in out.iter_mut().zip(rows) {
        let bits = &w.row_bits(r)[words.clone()];
        let xs = &x[words.clone()];
        let mut total = vdupq_n_u32(0);
        let mut p0 = 0;
        while p0 < pairs {
            let p1 = pairs.min(p0 + STEPS);
            let mut acc = vdupq_n_u16(0);
            for p in p0..p1 {
                // SAFETY: words 2 p and 2 p + 1 lie inside both slices.
                let v = unsafe {
                    veorq_u8(
                        vld1q_u8(bits.as_ptr().add(2 * p).cast()),
                        vld1q_u8(xs.as_ptr().add(2 * p).cast()),
                    )
                };
                acc = vpadalq_u8(acc, vcntq_u8(v));
            }
            total = vpadalq_u16(total, acc);
            p0 = p1;
        }
        let mut c = vaddvq_u32(total);
        if words.len() % 2 == 1 {
            let last = words.len() - 1;
            c += (bits[last] ^ xs[last]).count_ones();
        }
        *o = c as i32;
    }
}
