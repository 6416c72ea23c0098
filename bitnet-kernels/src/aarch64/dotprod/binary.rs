//! Dot-product (`SDOT`) 1-bit x int8 kernel (`crate::aarch64::int_walk::binary`): one `SDOT`
//! of a word's mask (-1 where the bit is 1) with 16 activations adds minus their selected sum
//! into four i32 lanes, so the row's sum is the negated total.

use std::ops::Range;

use crate::aarch64::int_dot::SdotStep;
use crate::aarch64::int_walk::binary;
use crate::layout::binary::BinaryMatrix;

/// See the reference `raw_dots_multi` (`scalar/binary.rs`).
///
/// # Safety
/// NEON + dotprod; shapes as checked by `crate::binary::check_raw_dots`.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn raw_dots_multi(
    w: &BinaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: Range<usize>,
    words: Range<usize>,
    out: &mut [i32],
) {
    // SAFETY: this function enables NEON and dotprod, the step's features; shapes checked by
    // the caller.
    unsafe { binary::raw_dots_multi::<SdotStep>(w, q, n_tok, rows, words, out) }
}
