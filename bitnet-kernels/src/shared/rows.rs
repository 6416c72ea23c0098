//! The dequantize-a-chunk path of the float products over quantized weight rows, portable and
//! shared by every kernel set.

use std::ops::Range;

use crate::layout::rows::{QK_K, RowFormat, dequantize_row};

/// Elements dequantized at a time by [`matmul_by_chunks`]: a whole number of blocks of
/// every format, small enough for the stack and L1.
pub(crate) const DEQUANT_CHUNK: usize = QK_K;

/// The dequantize-a-chunk path of [`crate::float::matmul_f32`], portable and shared by every kernel set
/// (the scalar reference's quantized rows, and the Q4_0 rows the SIMD sets decode no other
/// way): each row is dequantized 256 elements at a time into a stack buffer and dotted with
/// every token (`dot` is the set's own f32 dot), so the row is decoded once per call,
/// whatever `n_tok` is.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_by_chunks(
    fmt: RowFormat,
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
    dot: &dyn Fn(&[f32], &[f32]) -> f32,
) {
    let rb = fmt.row_bytes(row_len).expect("checked by the caller");
    let nr = rows.len();
    let mut buf = [0.0f32; DEQUANT_CHUNK];
    for (i, r) in rows.enumerate() {
        let row = &data[r * rb..(r + 1) * rb];
        for t in 0..n_tok {
            out[t * nr + i] = 0.0;
        }
        let mut start = 0;
        while start < row_len {
            let len = DEQUANT_CHUNK.min(row_len - start);
            let b0 = fmt.row_bytes(start).expect("whole blocks");
            let b1 = fmt.row_bytes(start + len).expect("whole blocks");
            dequantize_row(fmt, &row[b0..b1], &mut buf[..len]);
            for t in 0..n_tok {
                let xt = &x[t * row_len + start..t * row_len + start + len];
                out[t * nr + i] += dot(&buf[..len], xt);
            }
            start += len;
        }
    }
}
