//! AVX2 Q8_0 x Q8_0 products: the `--head q8` output head, for one token (decode) or a few
//! (batched decode, where every sequence needs its logits).
//!
//! The integer core is `maddubs(|w|, sign(x, w))` then `madd` against ones: |w| is unsigned
//! (even for a weight quant of -128), x never is -128, so the pair sums stay inside i16. One
//! token streams four weight rows against its activations (the weights are the bound). For a
//! batch, the same weight block serves several tokens: it is loaded, and its |w| and scale
//! taken, once per tile of tokens, which leaves `sign`, `maddubs`, `madd`, the conversion and
//! the scaled accumulation as the per-token work (the batch is compute bound, not stream
//! bound, from about 4 tokens on).

use std::arch::x86_64::*;
use std::ops::Range;

use super::float::hsum;
use crate::extent::holds;
use crate::layout::rows::{Q8_0_BLOCK_BYTES, QK8_0};
use crate::x86_64::f16c::{f16_at, q8_scales4};
use crate::x86_64::q8_tiles::{
    ScaleLayout, TOKENS, q8_one_token, q8_tiles, q8_token_blocks, with_tile_scales,
};

/// The i32 lanes of the dot of the quants of one weight block (`wq`, with `aw = |wq|`) and
/// one activation block (`xq`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn block_dot(aw: __m256i, wq: __m256i, xq: __m256i) -> __m256i {
    let p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq, wq));
    _mm256_madd_epi16(p16, _mm256_set1_epi16(1))
}

/// Q8_0 x Q8_0 dots of `R` weight rows with one activation row of `nb` blocks, scaled per
/// block in f32.
///
/// # Safety
/// Each `w[r]` and `x` must point at `nb` readable Q8_0 blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q8_rows<const R: usize>(w: [*const u8; R], x: *const u8, nb: usize) -> [f32; R] {
    const BB: usize = Q8_0_BLOCK_BYTES;
    let row_bytes = nb * BB;
    let mut acc = [_mm256_setzero_ps(); R];
    let mut b = 0;
    // Four blocks per pass: their scales are converted together, then broadcast per block.
    while b + 4 <= nb {
        // SAFETY: blocks b..b + 4 are below nb for x and every row.
        unsafe {
            let xp = x.add(b * BB);
            let xq = [0, 1, 2, 3].map(|j| _mm256_loadu_si256(xp.add(j * BB + 2).cast()));
            let dx = q8_scales4(xp);
            for r in 0..R {
                let wp = w[r].add(b * BB);
                // Rows are short (2.7 KB for 2560 columns) and four are read side by side,
                // so the hardware stream prefetcher loses the stream at every pass: fetch the
                // same stretch of the next pass's rows (R rows further) ahead of use.
                let pf = wp.wrapping_add(R * row_bytes);
                _mm_prefetch::<_MM_HINT_T0>(pf.cast());
                _mm_prefetch::<_MM_HINT_T0>(pf.wrapping_add(64).cast());
                _mm_prefetch::<_MM_HINT_T0>(pf.wrapping_add(128).cast());
                let d = _mm256_castps128_ps256(_mm_mul_ps(q8_scales4(wp), dx));
                for (j, &xj) in xq.iter().enumerate() {
                    let wq = _mm256_loadu_si256(wp.add(j * BB + 2).cast());
                    let p32 = block_dot(_mm256_abs_epi8(wq), wq, xj);
                    let dj = _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(j as i32));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), dj, acc[r]);
                }
            }
        }
        b += 4;
    }
    while b < nb {
        // SAFETY: block b is below nb for x and every row.
        unsafe {
            let xp = x.add(b * BB);
            let xq = _mm256_loadu_si256(xp.add(2).cast());
            let dx = f16_at(xp);
            for r in 0..R {
                let wp = w[r].add(b * BB);
                let wq = _mm256_loadu_si256(wp.add(2).cast());
                let p32 = block_dot(_mm256_abs_epi8(wq), wq, xq);
                let d = _mm256_set1_ps(f16_at(wp) * dx);
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), d, acc[r]);
            }
        }
        b += 1;
    }
    acc.map(|a| hsum(a))
}

/// Q8_0 x Q8_0 dots of one weight row with `T <= TOKENS` activation rows `rb` bytes apart:
/// each weight block is loaded, and its |w| and scale taken, once for the `T` rows. `dx`
/// holds the activation scales of the tile as f32, `[block][TOKENS]` (lanes past `T` unused).
///
/// Per block and token this is `sign`, `maddubs`, `madd`, a conversion, a shuffle and an FMA,
/// in the same order of operations as [`dot_q8_rows`], so a token's result does not depend
/// on the batch it was computed in.
///
/// # Safety
/// `w` must point at `nb` readable Q8_0 blocks, `x` at `T` rows of `nb` blocks `rb` bytes
/// apart, `dx` at `TOKENS * nb` floats.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
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

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q8_0_q8_0(
    w: &[u8],
    row_len: usize,
    xq: &[u8],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let nb = row_len / QK8_0;
    let rb = nb * Q8_0_BLOCK_BYTES;
    let nr = rows.len();
    assert!(
        holds(w.len(), rows.end, rb) && holds(xq.len(), n_tok, rb) && holds(out.len(), n_tok, nr)
    );
    if n_tok > 1 {
        // Shapes checked above. Each weight row against tiles of up to TOKENS activation
        // rows (the row stays in L1 between tiles; `x86_64/q8_tiles.rs`); the closure keeps
        // this function's features.
        return with_tile_scales(xq, nb, n_tok, ScaleLayout::TileBlockToken, |dx| {
            q8_tiles!(dot_q8_tokens, w, nb, xq, dx, n_tok, rows, out)
        });
    }
    q8_one_token!(dot_q8_rows, w, nb, xq, rows, out);
}
