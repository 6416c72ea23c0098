//! Horizontal sums of 256-bit vectors, the one definition every x86 tree uses (the float sum's
//! order of additions is part of each kernel's bits: one definition keeps them all alike).

use std::arch::x86_64::*;

/// The sum of the eight i32 lanes.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// The sum of the eight f32 lanes: halves added, then pairs, then the last two.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}
