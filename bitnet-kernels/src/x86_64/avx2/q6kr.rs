//! AVX2 product of the grouped Q6_K head (`crate::layout::q6kr`): the shared 256-bit step of
//! `x86_64/q6kr.rs` with `vpmaddubsw` + `vpmaddwd` as its core (codes are at most 63 and
//! activations at most 127 in magnitude, so a pair sum stays inside i16).

use std::arch::x86_64::*;

use crate::x86_64::q6kr::q6kr_kernels;

/// `acc` plus, per i32 lane, the four products of the unsigned codes and the signed bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn core(acc: __m256i, codes: __m256i, a: __m256i) -> __m256i {
    let p = _mm256_maddubs_epi16(codes, a);
    _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)))
}

q6kr_kernels!("avx2,fma,f16c", core);
