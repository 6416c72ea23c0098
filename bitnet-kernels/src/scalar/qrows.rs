//! The reference reading of a Q8_0 block, which the Q8_0 KV cache (`attn.rs`) and the
//! Q8_0 x Q8_0 products (`q8q8.rs`) share, as the SIMD trees' `qrows.rs` block decoders are
//! shared. The reference of the SIMD `qrows` kernels themselves (block-quantized rows times
//! f32 vectors) is `float.rs`' `matmul_f32`: each row dequantized a chunk at a time with the
//! format's reference decoder and dotted with the reference `dot_f32`, through the portable
//! chunk walk `crate::shared::rows::matmul_by_chunks`, which the SIMD sets also take for
//! Q4_0.

use crate::layout::half::f16_to_f32;
use crate::layout::rows::Q8_0_BLOCK_BYTES;

/// The f16 scale of a Q8_0 block and its 32 quants.
#[inline]
pub fn q8_0_block(b: &[u8]) -> (f32, &[u8]) {
    (
        f16_to_f32(u16::from_le_bytes([b[0], b[1]])),
        &b[2..Q8_0_BLOCK_BYTES],
    )
}
