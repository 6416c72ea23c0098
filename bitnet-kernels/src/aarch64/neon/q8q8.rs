// PLACEHOLDER: the scalar reference until the NEON kernel lands.
use std::ops::Range;
pub unsafe fn matmul_q8_0_q8_0(
    w: &[u8],
    row_len: usize,
    xq: &[u8],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    crate::scalar::q8q8::matmul_q8_0_q8_0(w, row_len, xq, n_tok, rows, out)
}
