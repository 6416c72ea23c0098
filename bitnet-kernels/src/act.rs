//! Activation quantization, the step in front of every ternary / 1-bit matrix product:
//! per token row, int8 absmax quantization (BitNet b1.58) or sign bits with a mean-|x| scale
//! (BitNet's 1-bit activations). The safe entry points here pick the kernel set; the scale is
//! computed by the same scalar code for every set, and each set performs the same f32 multiply
//! and round-half-even, so the int8 outputs are bit-identical across kernel sets.

use crate::dispatch::kernels;
use crate::isa::Isa;
use crate::ops::Kernels;
use crate::scalar;

pub use crate::layout::binary::binary_words;

/// Smallest `max|x|` the scale is computed from (an all-zero row quantizes to zeros).
pub const ACT_MIN_ABSMAX: f32 = 1e-5;

/// How a row of int8 activations maps back to floats: `x ≈ q / scale`; `sum` is the sum of
/// the row's int8 values (the kernels use it to undo the unsigned weight encoding).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ActScale {
    pub scale: f32,
    pub sum: i32,
}

/// The BitNet b1.58 activation scale for a row whose largest magnitude is `absmax`.
pub fn act_scale_from_absmax(absmax: f32) -> f32 {
    127.0 / absmax.max(ACT_MIN_ABSMAX)
}

/// Quantizes one token row: `s = 127 / max(max|x|, 1e-5)`,
/// `q = clamp(round_half_even(x * s), -128, 127)`. `q.len() >= x.len()`; `q[x.len()..]` is
/// zeroed (the padding the matrix kernels expect).
pub fn quantize_act(isa: Isa, x: &[f32], q: &mut [i8]) -> ActScale {
    quantize_scaled(isa, x, q, act_scale_from_absmax)
}

/// Quantizes `x` into `q` with the scale `scale_of(max|x|)` (the int8 and the 4-bit
/// activations differ only there), zeroing the padding `q[x.len()..]`.
fn quantize_scaled(isa: Isa, x: &[f32], q: &mut [i8], scale_of: fn(f32) -> f32) -> ActScale {
    assert!(
        q.len() >= x.len(),
        "activation quantization: output shorter than input"
    );
    let (head, tail) = q.split_at_mut(x.len());
    tail.fill(0);
    let k = kernels(isa);
    let scale = scale_of(k.absmax(x));
    let sum = k.quantize_i8(x, scale, head);
    ActScale { scale, sum }
}

/// The 4-bit activation scale (BitNet a4.8's attention and FFN inputs) for a row whose
/// largest magnitude is `absmax`.
pub fn act_scale_int4_from_absmax(absmax: f32) -> f32 {
    7.0 / absmax.max(ACT_MIN_ABSMAX)
}

/// 4-bit activations in int8 lanes: `s = 7 / max(max|x|, 1e-5)`,
/// `q = round_half_even(x * s)`, every value in `-7..=7`, laid out as [`quantize_act`]'s
/// (so every int8 product kernel takes them as they are). The same kernels as the int8
/// quantizer with a smaller scale, so each set's output is bit-identical to the scalar one.
/// No kernel multiplies 4-bit lanes: x86's `vpdpbusd`/`vpmaddubsw` and ARM's `sdot` take
/// bytes at the same rate whatever their range, and packing two values a byte would add an
/// unpacking step to products that are already bound by their instructions or by the
/// weights' bytes.
pub fn quantize_act_int4(isa: Isa, x: &[f32], q: &mut [i8]) -> ActScale {
    quantize_scaled(isa, x, q, act_scale_int4_from_absmax)
}

/// 1-bit activations: bit `j % 64` of `bits[j / 64]` is 1 where `x[j] > 0` (sign +1) and 0
/// otherwise (-1); bits past `x.len()` are zeroed, matching the zero padding of binary weight
/// rows. Returns the row scale `mean|x|` (`x ≈ sign * scale`).
pub fn quantize_act_binary(isa: Isa, x: &[f32], bits: &mut [u64]) -> f32 {
    assert!(
        bits.len() >= binary_words(x.len()),
        "quantize_act_binary: bit buffer too short"
    );
    bits.fill(0);
    kernels(isa).sign_bits(x, bits);
    scalar::act::mean_abs(x)
}
