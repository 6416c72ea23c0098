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

/// Adds to `out[t * stride]`, for each of the `T <= 8` vectors `v[t]`, the sum of its eight
/// lanes: the eight sums come out of one transposing tree of `hadd`s (nine instructions for
/// all, where one sum at a time takes seven each). Integer sums, so the order is free.
///
/// # Safety
/// AVX2; `out` writable at `t * stride` for t < T.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn add_lane_sums<const T: usize>(v: &[__m256i; T], out: *mut i32, stride: usize) {
    let mut x = [_mm256_setzero_si256(); 8];
    x[..T].copy_from_slice(v);
    // Lane pairs, then quads: h0123's low half holds the low-half sums of x0..x3, its high
    // half their high-half sums.
    let h01 = _mm256_hadd_epi32(x[0], x[1]);
    let h23 = _mm256_hadd_epi32(x[2], x[3]);
    let h45 = _mm256_hadd_epi32(x[4], x[5]);
    let h67 = _mm256_hadd_epi32(x[6], x[7]);
    let h0123 = _mm256_hadd_epi32(h01, h23);
    let h4567 = _mm256_hadd_epi32(h45, h67);
    let sums = _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(h0123, h4567),
        _mm256_permute2x128_si256::<0x31>(h0123, h4567),
    );
    let mut s = [0i32; 8];
    // SAFETY: `s` holds 8 i32 lanes.
    unsafe { _mm256_storeu_si256(s.as_mut_ptr().cast(), sums) };
    for (t, &v) in s.iter().enumerate().take(T) {
        // SAFETY: the caller guarantees `out` is writable at these T positions.
        unsafe { *out.add(t * stride) += v };
    }
}

/// The sums of the eight lanes of each of four vectors, out of one transposing tree of
/// `hadd`s (three, where one sum at a time takes seven instructions each). Integer sums, so
/// the order is free. [`add_lane_sums`] is the same tree for up to eight vectors, added into
/// strided outputs; this one returns the four sums, as the one-token kernels' groups want.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) fn lane_sums4(v: [__m256i; 4]) -> [i32; 4] {
    // Per 128-bit half: h's four lanes are the half-sums of v[0]..v[3].
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    let sums = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
    let mut out = [0i32; 4];
    // SAFETY: `out` is 16 writable bytes.
    unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), sums) };
    out
}

/// The sum of the eight f32 lanes: halves added, then pairs, then the last two.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}
