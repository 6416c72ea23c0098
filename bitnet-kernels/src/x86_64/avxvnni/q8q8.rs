//! AVX-VNNI Q8_0 x Q8_0 products of several tokens (the `--head q8` output head of batched
//! decode, which is bound by arithmetic from about 4 tokens on). One token (decode, bound by
//! the weight stream) is the AVX2 kernel's.
//!
//! The integer core is `vpdpbusd(0, |w|, sign(x, w))`: the same four products summed into
//! each i32 lane as AVX2's `madd(maddubs(|w|, sign(x, w)), 1)`, in one instruction instead of
//! two, so the lanes, and every float operation after them, are the AVX2 kernel's: a token's
//! result is the same whichever set and batch computed it. Per block and token that leaves
//! `sign`, `vpdpbusd`, a conversion, a shuffle and an FMA.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::extent::holds;
use crate::float::formats::{Q8_0_BLOCK_BYTES, QK8_0};
use crate::x86_64::hsum::hsum_ps as hsum;
use crate::x86_64::q8_tiles::{TOKENS, lane, q8_tiles, q8_token_blocks, with_tile_scales};

/// Q8_0 x Q8_0 dots of one weight row with `T <= TOKENS` activation rows `rb` bytes apart:
/// each weight block is loaded, and its |w| and scale taken, once for the `T` rows. `dx`
/// holds the activation scales of the tile as f32, `[block][TOKENS]` (lanes past `T` unused).
///
/// # Safety
/// AVX2/FMA/F16C and AVX-VNNI; `w` must point at `nb` readable Q8_0 blocks, `x` at `T` rows
/// of `nb` blocks `rb` bytes apart, `dx` at `TOKENS * nb` floats.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn dot_q8_tokens<const T: usize>(
    w: *const u8,
    x: *const u8,
    rb: usize,
    dx: *const f32,
    nb: usize,
) -> [f32; T] {
    const { assert!(T <= TOKENS && TOKENS == 8) };
    let mut acc = [_mm256_setzero_ps(); T];
    q8_token_blocks!(tokens_block, &mut acc, w, x, rb, dx, nb);
    acc.map(|a| hsum(a))
}

/// One weight block (at `wp`, scale `dw` in every lane) against the same block of `T`
/// activation rows (the first at `xp`, `rb` bytes apart; their scales at `dxb`), added to
/// the tokens' accumulators.
///
/// # Safety
/// AVX2/FMA/F16C and AVX-VNNI; the block must be readable in the weight row and the `T`
/// activation rows; `dxb` must point at `TOKENS` floats.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn tokens_block<const T: usize>(
    acc: &mut [__m256; T],
    wp: *const u8,
    xp: *const u8,
    rb: usize,
    dxb: *const f32,
    dw: __m256,
) {
    /// How far ahead of the block in use the weight row stream is prefetched.
    const PREFETCH_BYTES: usize = 6144;
    // SAFETY: as this function's contract.
    unsafe {
        // Only a hint: it may point past the row (prefetches never fault).
        _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(PREFETCH_BYTES).cast());
        let wq = _mm256_loadu_si256(wp.add(2).cast());
        let aw = _mm256_abs_epi8(wq);
        let d0 = _mm256_mul_ps(dw, _mm256_broadcast_ps(&_mm_loadu_ps(dxb)));
        let d1 = if T > 4 {
            _mm256_mul_ps(dw, _mm256_broadcast_ps(&_mm_loadu_ps(dxb.add(4))))
        } else {
            d0
        };
        for (t, a) in acc.iter_mut().enumerate() {
            let xq = _mm256_loadu_si256(xp.add(t * rb + 2).cast());
            let p32 = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), aw, _mm256_sign_epi8(xq, wq));
            let p = _mm256_cvtepi32_ps(p32);
            *a = _mm256_fmadd_ps(p, lane(if t < 4 { d0 } else { d1 }, t), *a);
        }
    }
}

/// The batched product, `n_tok >= 2` (one token is the AVX2 kernel's): same contract as the
/// scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn matmul_q8_0_q8_0_tokens(
    w: &[u8],
    row_len: usize,
    xq: &[u8],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let nb = row_len / QK8_0;
    let rb = nb * Q8_0_BLOCK_BYTES;
    assert!(
        holds(w.len(), rows.end, rb)
            && holds(xq.len(), n_tok, rb)
            && holds(out.len(), n_tok, rows.len())
    );
    // SAFETY: shapes checked above; the scales cover the tiles.
    with_tile_scales(xq, nb, n_tok, |dx| unsafe {
        tiles(w, nb, xq, dx, n_tok, rows, out)
    })
}

/// The tiles of [`matmul_q8_0_q8_0_tokens`] with the activation scales `dx` converted.
///
/// # Safety
/// AVX2/FMA/F16C and AVX-VNNI; shapes as checked by [`matmul_q8_0_q8_0_tokens`].
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn tiles(
    w: &[u8],
    nb: usize,
    xq: &[u8],
    dx: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    q8_tiles!(dot_q8_tokens, w, nb, xq, dx, n_tok, rows, out);
}
