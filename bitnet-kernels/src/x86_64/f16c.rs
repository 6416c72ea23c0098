//! F16C reads of the f16 scales of quantized blocks, which both x86 sets use as they are:
//! one scale ([`f16_at`]: Q8_0 and Q6_K rows, the Q8_0 KV cache, Q8_0 x Q8_0 tails) or the
//! scales of four consecutive Q8_0 blocks in one conversion ([`q8_scales4`]). They are
//! 128-bit work whatever the set's lane width, so they live here, not in either tree.

use std::arch::x86_64::*;

use crate::layout::rows::Q8_0_BLOCK_BYTES;

/// The f16 at `p` as f32, through F16C.
///
/// # Safety
/// Two bytes at `p` must be readable; the CPU must support F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees the two bytes are readable.
    let h = unsafe { p.cast::<u16>().read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

/// The f16 scales of four consecutive Q8_0 blocks at `p` as an xmm of f32.
///
/// # Safety
/// The four blocks' scale fields must be readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q8_scales4(p: *const u8) -> __m128 {
    let mut bits = 0u64;
    for j in 0..4 {
        // SAFETY: the caller guarantees the four scale fields are readable.
        let h = unsafe { p.add(j * Q8_0_BLOCK_BYTES).cast::<u16>().read_unaligned() };
        bits |= u64::from(h) << (16 * j);
    }
    _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64))
}
