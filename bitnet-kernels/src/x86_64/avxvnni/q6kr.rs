//! AVX-VNNI product of the grouped Q6_K head (`crate::layout::q6kr`): the shared 256-bit step
//! of `x86_64/q6kr.rs` with `vpdpbusd` (VEX) as its core.

use std::arch::x86_64::*;

use crate::x86_64::q6kr::q6kr_kernels;

/// `acc` plus, per i32 lane, the four products of the unsigned codes and the signed bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
fn core(acc: __m256i, codes: __m256i, a: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(acc, codes, a)
}

q6kr_kernels!("avx2,fma,f16c,avxvnni", core);
