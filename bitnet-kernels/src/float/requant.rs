//! Re-encoding weight rows at load time: an output head stored as F16 (or any row format)
//! re-quantized to Q8_0 (`--head q8`). The result is byte for byte what decoding a row with
//! [`dequantize_row`] and encoding it with [`quantize_row_q8_0`] gives (the reference, and
//! the path of every other source format); F16 rows, the common case, go through a fused
//! loop that never writes the f32 row out (`crate::scalar::requant`, and SIMD versions of
//! the same operations); a block holding an infinity or NaN takes the reference path in
//! every one of them ([`f16_q8_0_via_f32`]).

use crate::dispatch::token;
use crate::float::formats::{
    Q8_0_BLOCK_BYTES, QK8_0, RowFormat, dequantize_row, quantize_row_q8_0,
};
use crate::float::half::f16_to_f32;
use crate::isa::Isa;
use crate::scalar::requant as scalar;

/// Re-encodes one row `src` of format `fmt` as Q8_0 into `out` (exactly the reference's
/// bytes, see the module docs). `scratch` holds the decoded row for formats other than F16
/// (resized as needed, so one buffer serves every row).
///
/// # Panics
/// If `src` is not a whole row of `fmt` for `out`'s Q8_0 row size, as the reference does.
pub fn requantize_row_q8_0(
    isa: Isa,
    fmt: RowFormat,
    src: &[u8],
    out: &mut [u8],
    scratch: &mut Vec<f32>,
) {
    let n = out.len() / Q8_0_BLOCK_BYTES * QK8_0;
    if fmt != RowFormat::F16 {
        scratch.resize(n, 0.0);
        dequantize_row(fmt, src, scratch);
        quantize_row_q8_0(scratch, out);
        return;
    }
    check_f16_q8_0(src, out);
    if let Some(simd) = token(isa) {
        return simd.requantize_f16_q8_0(src, out);
    }
    scalar::f16_q8_0(src, out)
}

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
