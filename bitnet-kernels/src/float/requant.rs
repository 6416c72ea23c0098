//! Re-encoding weight rows at load time: an output head stored as F16 (or any row format)
//! re-quantized to Q8_0 (`--head q8`). The result is byte for byte what decoding a row with
//! [`dequantize_row`] and encoding it with [`quantize_row_q8_0`] gives (the reference, and
//! the path of every other source format); F16 rows, the common case, go through a fused
//! loop that never writes the f32 row out (`crate::scalar::requant`, and SIMD versions of
//! the same operations); a block holding an infinity or NaN takes the reference path in
//! every one of them ([`f16_q8_0_via_f32`]).

use crate::dispatch::kernels;
use crate::isa::Isa;
use crate::layout::rows::{Q8_0_BLOCK_BYTES, QK8_0, RowFormat, dequantize_row, quantize_row_q8_0};
use crate::ops::Kernels;
use crate::shared::requant::check_f16_q8_0;
#[cfg(doc)]
use crate::shared::requant::f16_q8_0_via_f32;

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
    kernels(isa).requantize_f16_q8_0(src, out)
}
