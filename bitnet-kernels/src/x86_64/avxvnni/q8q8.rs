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
use crate::layout::rows::{Q8_0_BLOCK_BYTES, QK8_0};
use crate::x86_64::hsum::hsum_ps as hsum;
use crate::x86_64::q8_tiles::{ScaleLayout, TOKENS, q8_tiles, q8_token_blocks, with_tile_scales};

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
    q8_token_blocks!(block_dot, &mut acc, w, x, rb, dx, nb);
    acc.map(|a| hsum(a))
}

/// The i32 lanes of the dot of the quants of one weight block (`wq`, with `aw = |wq|`) and
/// one activation block (`xq`): the AVX2 kernel's lanes, in one instruction.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
fn block_dot(aw: __m256i, wq: __m256i, xq: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), aw, _mm256_sign_epi8(xq, wq))
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
    // Shapes checked above. The closure keeps this function's features (the tiles inline
    // into it).
    with_tile_scales(xq, nb, n_tok, ScaleLayout::TileBlockToken, |dx| {
        q8_tiles!(dot_q8_tokens, w, nb, xq, dx, n_tok, rows, out)
    })
}
