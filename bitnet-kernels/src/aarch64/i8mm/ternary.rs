// PLACEHOLDER: the scalar reference until the kernel lands.
use crate::ternary::TernaryMatrix;
use std::ops::Range;
pub unsafe fn raw_dots_multi(
    w: &TernaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: Range<usize>,
    blocks: Range<usize>,
    out: &mut [i32],
) {
    crate::scalar::ternary::raw_dots_multi(w, q, n_tok, rows, blocks, out)
}
