//! The int8 rounding of one activation, which every kernel set's quantizer (and its tail)
//! applies, so their codes agree bit for bit.

/// One value: `clamp(round_half_even(v * scale), -128, 127)`. A NaN product maps to -128, as
/// the x86 conversion (integer indefinite, then clamped) does, so every kernel set agrees.
#[inline(always)]
pub(crate) fn quantize_one(v: f32, scale: f32) -> i8 {
    let p = v * scale;
    if p.is_nan() {
        return -128;
    }
    let r = p.round_ties_even();
    if r >= 127.0 {
        127
    } else if r <= -128.0 {
        -128
    } else {
        r as i8
    }
}
