//! AVX2 + F16C F16 -> Q8_0 row re-encoding (`--head q8` at load time): the operations of
//! the portable fused loop (`scalar/requant.rs`) on 32 values at a time, so the same bytes.

use std::arch::x86_64::*;

use crate::layout::rows::{Q8_0_BLOCK_BYTES, QK8_0};
use crate::shared::requant::f16_q8_0_via_f32;

/// The portable `f16_q8_0` (`scalar/requant.rs`) with F16C conversions and AVX2
/// arithmetic: the same operations on the same values (IEEE multiply, compare and convert
/// are exact or correctly rounded alike), so the same bytes.
///
/// # Safety
/// The CPU must support AVX2 and F16C; `out.len()` is a multiple of 34 and `src.len()` is
/// 64 bytes per block of `out`.
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn f16_q8_0(src: &[u8], out: &mut [u8]) {
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
        // An all-ones exponent (infinity or NaN) anywhere: the reference path (the portable
        // loop's too).
        let special = h.iter().fold(_mm_setzero_si128(), |acc, &v| {
            _mm_or_si128(acc, _mm_cmpeq_epi16(_mm_and_si128(v, exp), exp))
        });
        if _mm_movemask_epi8(special) != 0 {
            f16_q8_0_via_f32(sb, b);
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
            // trunc(x + copysign(0.49999997, x)): round half away from zero, see `round_q8`
            // in `scalar/requant.rs`.
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
