//! Re-encoding weight rows at load time: an output head stored as F16 (or any row format)
//! re-quantized to Q8_0 (`--head q8`). The result is byte for byte what decoding a row with
//! [`dequantize_row`] and encoding it with [`quantize_row_q8_0`] gives (the reference, and
//! the path of every other source format); F16 rows, the common case, go through a fused
//! loop that never writes the f32 row out: portable code the compiler vectorizes, and an
//! AVX2 + F16C version of the same operations.

use crate::float::formats::{
    Q8_0_BLOCK_BYTES, QK8_0, RowFormat, dequantize_row, quantize_row_q8_0,
};
use crate::float::runnable;
use crate::isa::Isa;
use crate::scalar::float::{f16_to_f32, f32_to_f16};

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
    assert!(
        out.len().is_multiple_of(Q8_0_BLOCK_BYTES) && src.len() == 2 * n,
        "requantize_row_q8_0: {} F16 bytes for a {}-byte Q8_0 row",
        src.len(),
        out.len()
    );
    #[cfg(target_arch = "x86_64")]
    if runnable(isa) != Isa::Scalar {
        // SAFETY: runnable() returns Avx2 or Avx512 only once AVX2, FMA and F16C were
        // detected on this CPU; the lengths were checked above.
        return unsafe { f16_q8_0_avx2(src, out) };
    }
    let _ = isa;
    f16_q8_0(src, out)
}

/// [`f16_q8_0`] with F16C conversions and AVX2 arithmetic: the same operations on the
/// same values (IEEE multiply, compare and convert are exact or correctly rounded alike),
/// so the same bytes.
///
/// # Safety
/// The CPU must support AVX2 and F16C; `out.len()` is a multiple of 34 and `src.len()` is
/// 64 bytes per block of `out`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn f16_q8_0_avx2(src: &[u8], out: &mut [u8]) {
    use std::arch::x86_64::*;
    debug_assert!(src.len() == out.len() / Q8_0_BLOCK_BYTES * 2 * QK8_0);
    let sign = _mm256_set1_ps(-0.0);
    let half = _mm256_set1_ps(f32::from_bits(0x3eff_ffff));
    let (lo, hi) = (_mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
    let exp = _mm_set1_epi16(0x7c00);
    // packs_epi32 / packs_epi16 interleave the two 128-bit lanes; this puts the 32 bytes
    // back in order.
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (sb, b) in src
        .chunks_exact(2 * QK8_0)
        .zip(out.chunks_exact_mut(Q8_0_BLOCK_BYTES))
    {
        // SAFETY: `sb` holds 64 bytes: four unaligned 16-byte loads.
        let h: [__m128i; 4] =
            std::array::from_fn(|i| unsafe { _mm_loadu_si128(sb.as_ptr().add(16 * i).cast()) });
        // An all-ones exponent (infinity or NaN) anywhere: the reference path.
        let special = h.iter().fold(_mm_setzero_si128(), |acc, &v| {
            _mm_or_si128(acc, _mm_cmpeq_epi16(_mm_and_si128(v, exp), exp))
        });
        if _mm_movemask_epi8(special) != 0 {
            f16_q8_0(sb, b);
            continue;
        }
        let v = h.map(|x| _mm256_cvtph_ps(x));
        let m = v.iter().fold(_mm256_setzero_ps(), |m, &x| {
            _mm256_max_ps(m, _mm256_andnot_ps(sign, x))
        });
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        // Round to nearest even, like f32_to_f16 (d is finite and below 65504 / 127).
        let dh =
            _mm_extract_epi16::<0>(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(d))) as u16;
        let (db, qs) = b.split_at_mut(2);
        db.copy_from_slice(&dh.to_le_bytes());
        let vid = _mm256_set1_ps(id);
        let q = v.map(|x| {
            let x = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(x, vid), lo), hi);
            // trunc(x + copysign(0.49999997, x)): round half away from zero, see round_q8.
            _mm256_cvttps_epi32(_mm256_add_ps(x, _mm256_or_ps(half, _mm256_and_ps(sign, x))))
        });
        let q16 = [
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        ];
        let q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16[0], q16[1]), order);
        // SAFETY: `qs` holds the block's 32 quant bytes.
        unsafe { _mm256_storeu_si256(qs.as_mut_ptr().cast(), q8) };
    }
}

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
/// scaled and rounded as [`quantize_row_q8_0`] does. A block holding an infinity or NaN
/// takes the reference path (no real head has one, but the bytes must still match).
#[inline(always)]
fn f16_q8_0(src: &[u8], out: &mut [u8]) {
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
            let mut x = [0.0f32; QK8_0];
            for (o, &v) in x.iter_mut().zip(&h) {
                *o = f16_to_f32(v);
            }
            quantize_row_q8_0(&x, b);
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
