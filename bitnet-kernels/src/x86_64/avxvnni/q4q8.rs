//! AVX-VNNI Q4_0 x Q8_0 products (the `--head q4_0` output head): the walk of
//! `x86_64/q4_tiles.rs` around VEX `vpdpbusd`, which sums four nibble x activation products
//! into each i32 lane on top of `-8 * sum(a)` of those four elements: the AVX2 kernel's
//! lanes in one instruction per block and row (its `vpmaddubsw`, `vpsubw`, `vpmaddwd`).

use std::arch::x86_64::*;

use crate::x86_64::q4_tiles::q4q8_kernels;

/// `-8 * a` summed over each lane's four elements: the starting value of every weight row's
/// lanes against this activation block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
fn neg_eight_sums(a: __m256i) -> __m256i {
    let pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(8), a);
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(-1))
}

/// The i32 lanes `sum (nibble - 8) * a` over four consecutive elements.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
fn block_lanes(nib: __m256i, a: __m256i, neg_eight: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(neg_eight, nib, a)
}

q4q8_kernels!("avx2,fma,f16c,avxvnni", neg_eight_sums, block_lanes);
