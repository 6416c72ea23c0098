//! The portable F16 -> Q8_0 row re-encoder (`--head q8` at load time): byte for byte what
//! decoding the row with `crate::layout::rows::dequantize_row` and encoding it with
//! `crate::layout::rows::quantize_row_q8_0` gives (that pair is the specification, and the path of
//! every other source format), fused so the f32 row is never written out. Portable code the
//! compiler vectorizes; the SIMD `requant` kernels perform the same operations on the same
//! values.

use crate::layout::half::{f16_to_f32, f32_to_f16};
use crate::layout::rows::{Q8_0_BLOCK_BYTES, QK8_0};
use crate::shared::requant::f16_q8_0_via_f32;

/// F16 bits of a finite value (`h & 0x7fff < 0x7c00`) as f32. Exact, like [`f16_to_f32`],
/// but branch-free so a block of them vectorizes: normal values move their exponent and
/// mantissa into place, subnormals are `mantissa * 2^-24` (an exact integer conversion and
/// power-of-two scaling).
#[inline(always)]
fn finite_f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    let mag = h & 0x7fff;
    let normal = f32::from_bits((mag << 13) + ((127 - 15) << 23));
    let subnormal = mag as f32 * f32::from_bits((127 - 24) << 23);
    let v = if mag < 0x0400 { subnormal } else { normal };
    f32::from_bits(v.to_bits() | sign)
}

/// `x.round().clamp(-127, 127)` (half away from zero) for a finite `x`, as
/// `trunc(clamp(x) ± 0.49999997)`: the largest f32 below one half never carries a value
/// whose fraction is below one half over the next integer, and it does carry every fraction
/// of one half or more; clamping first gives the same integer (the bounds are integers).
#[inline(always)]
fn round_q8(x: f32) -> i8 {
    let x = x.clamp(-127.0, 127.0);
    let t = x + f32::from_bits(0x3eff_ffff).copysign(x);
    // SAFETY: `x` is finite (the callers' contract) and clamped, so `|t| < 127.5`: the
    // truncation is exact and in range. (A saturating `as` keeps the compiler from
    // vectorizing the conversion.)
    unsafe { t.to_int_unchecked::<i32>() as i8 }
}

/// The fused F16 -> Q8_0 row: per block, the largest magnitude from the F16 bits (their
/// order is the values' order), the reference's `d` and `1 / d`, then each value decoded,
/// scaled and rounded as `quantize_row_q8_0` does. A block holding an infinity or NaN
/// takes the reference path, `crate::shared::requant::f16_q8_0_via_f32` (no real head has
/// one, but the bytes must still match).
#[inline(always)]
pub fn f16_q8_0(src: &[u8], out: &mut [u8]) {
    for (sb, b) in src
        .chunks_exact(2 * QK8_0)
        .zip(out.chunks_exact_mut(Q8_0_BLOCK_BYTES))
    {
        let mut h = [0u16; QK8_0];
        for (v, p) in h.iter_mut().zip(sb.chunks_exact(2)) {
            *v = u16::from_le_bytes([p[0], p[1]]);
        }
        let top = h.iter().fold(0u16, |m, &v| m.max(v & 0x7fff));
        if top >= 0x7c00 {
            f16_q8_0_via_f32(sb, b);
            continue;
        }
        let d = f16_to_f32(top) / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let (db, qs) = b.split_at_mut(2);
        db.copy_from_slice(&f32_to_f16(d).to_le_bytes());
        for (q, &v) in qs.iter_mut().zip(&h) {
            // Finite: `|v| <= amax`, so `|v * id|` is at most about 127.
            *q = round_q8(finite_f16_to_f32(v) * id) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finite_f16_conversion_is_exact() {
        for h in 0..=u16::MAX {
            if h & 0x7fff < 0x7c00 {
                assert_eq!(
                    finite_f16_to_f32(h).to_bits(),
                    f16_to_f32(h).to_bits(),
                    "{h:#06x}"
                );
            }
        }
    }

    #[test]
    fn rounding_matches_round_half_away_from_zero_then_clamp() {
        // Every f32 in [-130, 130] would take too long; every halfway case, its neighbours,
        // and a dense sweep of the small values (where the 0.49999997 trick is tightest).
        let mut xs: Vec<f32> = Vec::new();
        for i in -260..=260 {
            let x = i as f32 * 0.5;
            xs.extend([
                x,
                f32::from_bits(x.to_bits() + 1),
                f32::from_bits(x.to_bits().max(1) - 1),
            ]);
        }
        let mut x = 0.25f32;
        while x < 1.0 {
            xs.extend([x, -x]);
            x = f32::from_bits(x.to_bits() + 97);
        }
        for x in xs {
            assert_eq!(round_q8(x), x.round().clamp(-127.0, 127.0) as i8, "{x:e}");
        }
    }
}
