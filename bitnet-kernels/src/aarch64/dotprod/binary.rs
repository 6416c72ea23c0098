// PLACEHOLDER: the scalar reference until the kernel lands.
use crate::binary::BinaryMatrix;
use std::ops::Range;
pub unsafe fn raw_dots_multi(
    w: &BinaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: Range<usize>,
    words: Range<usize>,
    out: &mut [i32],
) {
    crate::scalar::binary::raw_dots_multi(w, q, n_tok, rows, words, out)
}
