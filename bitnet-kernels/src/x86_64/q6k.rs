//! The Q6_K code unpacking both x86 sets' float kernels of quantized rows use: the 6-bit codes
//! of a half-block rebuilt from their low nibbles and 2-bit fields with 256-bit byte logic,
//! minus 32 ([`q6k_quarters`]; AVX-512's widens them to 512-bit floats). The integer head
//! product reads the grouped layout instead (`x86_64/q6kr.rs`). The Q6_K layout is
//! `crate::layout::rows::Q6K_BLOCK_BYTES`.

use std::arch::x86_64::*;

/// The 6-bit codes (0..63) of the four 32-element quarters of Q6_K half-block `n` of the
/// block at `blk`, rebuilt with byte logic: low nibbles from `ql`, 2-bit fields from `qh`.
/// Quarter `g` holds elements `128 n + 32 g ..+ 32` in order.
///
/// # Safety
/// The block (210 bytes) must be readable; AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_codes(blk: *const u8, n: usize) -> [__m256i; 4] {
    let m4 = _mm256_set1_epi8(0x0f);
    let m2 = _mm256_set1_epi8(0x30);
    // SAFETY: ql (64 bytes at 64 n) and qh (32 bytes at 128 + 32 n) lie inside the block.
    let (la, lb, qh) = unsafe {
        (
            _mm256_loadu_si256(blk.add(64 * n).cast()),
            _mm256_loadu_si256(blk.add(64 * n + 32).cast()),
            _mm256_loadu_si256(blk.add(128 + 32 * n).cast()),
        )
    };
    [
        _mm256_or_si256(
            _mm256_and_si256(la, m4),
            _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m2),
        ),
        _mm256_or_si256(
            _mm256_and_si256(lb, m4),
            _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m2),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(la), m4),
            _mm256_and_si256(qh, m2),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(lb), m4),
            _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m2),
        ),
    ]
}

/// The 6-bit codes (minus 32) of the four 32-element quarters of Q6_K half-block `n` of the
/// block at `blk` ([`q6k_codes`] re-centred).
///
/// # Safety
/// The block (210 bytes) must be readable; AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6k_quarters(blk: *const u8, n: usize) -> [__m256i; 4] {
    // SAFETY: forwarded from the caller.
    let q = unsafe { q6k_codes(blk, n) };
    q.map(|v| _mm256_sub_epi8(v, _mm256_set1_epi8(32)))
}
