// PLACEHOLDER: the scalar reference until the NEON kernel lands.
use crate::float::RowFormat;
use std::ops::Range;
pub unsafe fn matmul_q8_0(
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    crate::scalar::qrows::matmul_quantized(RowFormat::Q8_0, data, row_len, x, n_tok, rows, out)
}
pub unsafe fn matmul_q6k(
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    crate::scalar::qrows::matmul_quantized(RowFormat::Q6K, data, row_len, x, n_tok, rows, out)
}
