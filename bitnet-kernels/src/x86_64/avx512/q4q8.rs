//! AVX-512 Q4_0 x Q8_0 products (the `--head q4_0` output head): the walk of
//! `x86_64/q4_tiles.rs` around EVEX `vpdpbusd` at 256 bits (AVX512-VNNI + VL), as the
//! AVX-VNNI kernel, for AVX-512 CPUs without AVX-VNNI (Ice Lake, Zen 4). Eight lanes a
//! block is the float order every set shares; at one token the weight stream, not the
//! register width, bounds the kernel, and a 512-bit register would hold two blocks whose
//! lanes then need their own accumulators.

use std::arch::x86_64::*;

use crate::x86_64::q4_tiles::q4q8_kernels;

/// `-8 * a` summed over each lane's four elements: the starting value of every weight row's
/// lanes against this activation block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
fn neg_eight_sums(a: __m256i) -> __m256i {
    let pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(8), a);
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(-1))
}

/// The i32 lanes `sum (nibble - 8) * a` over four consecutive elements.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
fn block_lanes(nib: __m256i, a: __m256i, neg_eight: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(neg_eight, nib, a)
}

q4q8_kernels!(
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c",
    neg_eight_sums,
    block_lanes
);
