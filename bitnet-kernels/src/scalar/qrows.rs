//! Reference block-quantized rows (Q8_0, Q6_K, Q4_0) times f32 vectors: the specification
//! the SIMD `qrows` kernels are tested against. Each row is dequantized a chunk at a time
//! with the format's reference decoder and dotted with the reference [`dot_f32`] (the
//! portable chunk walk is `crate::shared::rows::matmul_by_chunks`, which the SIMD sets also take for
//! Q4_0). The Q8_0 block reader also serves the Q8_0 KV cache (`attn.rs`) and the Q8_0 x
//! Q8_0 products (`q8q8.rs`), as the SIMD trees' `qrows.rs` block decoders do.

use std::ops::Range;

use super::float::dot_f32;
use crate::layout::half::f16_to_f32;
use crate::layout::rows::{Q8_0_BLOCK_BYTES, RowFormat};
use crate::shared::rows::matmul_by_chunks;

/// `matmul_f32` for rows stored in a block-quantized `fmt`:
/// `out[t * rows.len() + i] = dot(row rows.start + i, x[t])`.
pub fn matmul_quantized(
    fmt: RowFormat,
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    matmul_by_chunks(fmt, data, row_len, x, n_tok, rows, out, &dot_f32)
}

/// The f16 scale of a Q8_0 block and its 32 quants.
#[inline]
pub fn q8_0_block(b: &[u8]) -> (f32, &[u8]) {
    (
        f16_to_f32(u16::from_le_bytes([b[0], b[1]])),
        &b[2..Q8_0_BLOCK_BYTES],
    )
}
