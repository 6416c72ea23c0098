//! AVX2 Q4_0 x Q8_0 products (the `--head q4_0` output head): the walk of
//! `x86_64/q4_tiles.rs` around `vpmaddubsw` + `vpmaddwd`. A pair of nibble x activation
//! products is at most 2 x 15 x 128 in magnitude and `8 * (a + a')` at most 2 x 8 x 128, so
//! their difference stays inside i16 before `vpmaddwd` widens it: the lanes are exact.

use std::arch::x86_64::*;

use crate::x86_64::q4_tiles::q4q8_kernels;

/// `8 * a` summed in pairs (i16 lanes): the offset of one activation block, computed once
/// for all the weight rows that meet it.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn eight_sums(a: __m256i) -> __m256i {
    _mm256_maddubs_epi16(_mm256_set1_epi8(8), a)
}

/// The i32 lanes `sum (nibble - 8) * a` over four consecutive elements.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn block_lanes(nib: __m256i, a: __m256i, eight: __m256i) -> __m256i {
    let pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(nib, a), eight);
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
}

q4q8_kernels!("avx2,fma,f16c", eight_sums, block_lanes);
