//! What every F16 -> Q8_0 re-encoding kernel shares: its shapes, and the reference path of a
//! block holding an infinity or NaN.

use crate::layout::half::f16_to_f32;
use crate::layout::rows::{Q8_0_BLOCK_BYTES, QK8_0, quantize_row_q8_0};

/// One block of 32 F16 values (`src`, 64 bytes) to one Q8_0 block the reference's way: each
/// value decoded exactly, then [`quantize_row_q8_0`]. The fused kernels (portable and SIMD)
/// take it for a block that holds an infinity or NaN (no real head has one), so their bytes
/// are the reference's there too.
pub(crate) fn f16_q8_0_via_f32(src: &[u8], out: &mut [u8]) {
    let mut x = [0.0f32; QK8_0];
    for (o, p) in x.iter_mut().zip(src.chunks_exact(2)) {
        *o = f16_to_f32(u16::from_le_bytes([p[0], p[1]]));
    }
    quantize_row_q8_0(&x, out);
}

/// The F16 -> Q8_0 kernels' shapes: `out` whole Q8_0 blocks, `src` the F16 bytes of as many
/// values (checked again by the SIMD token methods, whose kernels index raw pointers).
pub(crate) fn check_f16_q8_0(src: &[u8], out: &[u8]) {
    let n = out.len() / Q8_0_BLOCK_BYTES * QK8_0;
    assert!(
        out.len().is_multiple_of(Q8_0_BLOCK_BYTES) && src.len() == 2 * n,
        "requantize_row_q8_0: {} F16 bytes for a {}-byte Q8_0 row",
        src.len(),
        out.len()
    );
}
