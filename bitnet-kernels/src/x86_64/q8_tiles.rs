//! How the batched Q8_0 x Q8_0 product (the `--head q8` output head of batched decode) walks
//! a call in the AVX2, AVX-VNNI and AVX-512 trees (`q8q8.rs` in each): each weight row
//! against tiles of at most [`TOKENS`] activation rows, so the row stays in L1 between tiles,
//! with the activation scales converted to f32 once per call; and the block walk inside a
//! 256-bit tile ([`q8_token_blocks`]), where only the integer core of a block's dot
//! (`maddubs` + `madd`, or `vpdpbusd`) depends on the set. The AVX-512 tile (two blocks a
//! register, as its one-token kernel) walks its blocks itself.

use std::arch::x86_64::*;
use std::cell::RefCell;

use crate::layout::half::f16_to_f32;
use crate::layout::rows::Q8_0_BLOCK_BYTES;

/// Activation rows per tile of the batched kernels (their accumulators stay in registers).
pub(crate) const TOKENS: usize = 8;

/// How far ahead of the block in use the batched kernels prefetch the weight row stream.
pub(crate) const PREFETCH_BYTES: usize = 6144;

thread_local! {
    /// The activation scales of a batched call as f32 (grown once per thread, then reused).
    static SCALES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Where the scales of a batched call go: the AVX2 and AVX-VNNI tiles read four tokens' scales
/// of one block together, the AVX-512 one four blocks' scales of one token.
#[derive(Clone, Copy)]
pub(crate) enum ScaleLayout {
    /// `[tile][block][TOKENS]`; lanes past the last token are zero.
    TileBlockToken,
    /// `[token][block]`.
    TokenBlock,
}

/// Runs `f` with the activation scales of `n_tok` rows of `nb` Q8_0 blocks (`xq`) as f32, in
/// `layout`. Either way token `t0`'s first scale is at `t0 * nb` for `t0` a multiple of
/// [`TOKENS`] (where the walk of [`q8_tiles`] starts a tile).
pub(crate) fn with_tile_scales<R>(
    xq: &[u8],
    nb: usize,
    n_tok: usize,
    layout: ScaleLayout,
    f: impl FnOnce(&[f32]) -> R,
) -> R {
    SCALES.with(|s| {
        let mut s = s.borrow_mut();
        let len = n_tok.div_ceil(TOKENS) * nb * TOKENS;
        if s.len() < len {
            s.resize(len, 0.0);
        }
        let dx = &mut s[..len];
        dx.fill(0.0);
        for t in 0..n_tok {
            for b in 0..nb {
                let at = match layout {
                    ScaleLayout::TileBlockToken => ((t / TOKENS) * nb + b) * TOKENS + t % TOKENS,
                    ScaleLayout::TokenBlock => t * nb + b,
                };
                let p = (t * nb + b) * Q8_0_BLOCK_BYTES;
                dx[at] = f16_to_f32(u16::from_le_bytes([xq[p], xq[p + 1]]));
            }
        }
        f(dx)
    })
}

/// The f16 scales of the `n <= 4` Q8_0 blocks from `p` as f32, in lanes `0..n` (the rest
/// zero), for [`splat`] to hand out one block at a time.
///
/// Built in one register that the first scale writes whole (`vmovd`), then converted
/// together. Converted one block at a time instead, LLVM loads a lone 16-bit scale with
/// `vpinsrw` into any register it likes (only lane 0 is used), a live accumulator among
/// them, and each block's scale then waited for the previous block's FMA on that
/// accumulator: that chain held the AVX-VNNI head at half the AVX2 kernel's rate at 4
/// tokens.
///
/// # Safety
/// The `n` blocks' scale fields must be readable; the CPU must support AVX2 and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn block_scales(p: *const u8, n: usize) -> __m256 {
    // SAFETY: the caller guarantees the n scale fields are readable.
    let h = |j: usize| unsafe {
        if j < n {
            i32::from(p.add(j * Q8_0_BLOCK_BYTES).cast::<u16>().read_unaligned())
        } else {
            0
        }
    };
    let mut v = _mm_cvtsi32_si128(h(0));
    v = _mm_insert_epi16::<1>(v, h(1));
    v = _mm_insert_epi16::<2>(v, h(2));
    v = _mm_insert_epi16::<3>(v, h(3));
    _mm256_castps128_ps256(_mm_cvtph_ps(v))
}

/// Lane `j` of `d` in every lane.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn splat(d: __m256, j: usize) -> __m256 {
    _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(j as i32))
}

/// Lane `t % 4` of each 128-bit half of `d`, in every lane of that half: a tile's scale
/// vectors hold four tokens' block scales (times the weight's) in both halves.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn lane(d: __m256, t: usize) -> __m256 {
    match t % 4 {
        0 => _mm256_shuffle_ps::<0x00>(d, d),
        1 => _mm256_shuffle_ps::<0x55>(d, d),
        2 => _mm256_shuffle_ps::<0xaa>(d, d),
        _ => _mm256_shuffle_ps::<0xff>(d, d),
    }
}

/// The body of a batched `tiles` function: for every row of `$rows` and tile of at most
/// [`TOKENS`] tokens, `$dot::<T>(weight row, first activation row, row bytes, tile scales,
/// nb) -> [f32; T]` gives the tile's dots, stored at `out[token * rows.len() + row]`. A
/// macro, not a function, so it expands inside the caller's `#[target_feature]` function and
/// the dot kernels inline into it. The caller guarantees the shapes: `w` holds `rows.end`
/// rows of `nb` blocks, `xq` `n_tok` such rows, `dx` the scales of [`with_tile_scales`] and
/// `out` `n_tok * rows.len()` floats.
macro_rules! q8_tiles {
    ($dot:ident, $w:expr, $nb:expr, $xq:expr, $dx:expr, $n_tok:expr, $rows:expr, $out:expr) => {{
        let (w, nb, xq, dx, n_tok, rows, out): (
            &[u8],
            usize,
            &[u8],
            &[f32],
            usize,
            std::ops::Range<usize>,
            &mut [f32],
        ) = ($w, $nb, $xq, $dx, $n_tok, $rows, $out);
        const TOKENS: usize = $crate::x86_64::q8_tiles::TOKENS;
        let rb = nb * $crate::layout::rows::Q8_0_BLOCK_BYTES;
        let nr = rows.len();
        let (base, x, dxp) = (w.as_ptr(), xq.as_ptr(), dx.as_ptr());
        for (i, r) in rows.enumerate() {
            let mut t0 = 0;
            while t0 < n_tok {
                let tt = TOKENS.min(n_tok - t0);
                // SAFETY: row r lies inside w; tokens t0..t0 + tt inside xq and dx (the
                // caller's guarantees).
                unsafe {
                    let (wp, xp, dp) = (base.add(r * rb), x.add(t0 * rb), dxp.add(t0 * nb));
                    let mut put = |d: &[f32]| {
                        for (t, &v) in d.iter().enumerate() {
                            out[(t0 + t) * nr + i] = v;
                        }
                    };
                    match tt {
                        8 => put(&$dot::<8>(wp, xp, rb, dp, nb)),
                        7 => put(&$dot::<7>(wp, xp, rb, dp, nb)),
                        6 => put(&$dot::<6>(wp, xp, rb, dp, nb)),
                        5 => put(&$dot::<5>(wp, xp, rb, dp, nb)),
                        4 => put(&$dot::<4>(wp, xp, rb, dp, nb)),
                        3 => put(&$dot::<3>(wp, xp, rb, dp, nb)),
                        2 => put(&$dot::<2>(wp, xp, rb, dp, nb)),
                        _ => put(&$dot::<1>(wp, xp, rb, dp, nb)),
                    }
                }
                t0 += tt;
            }
        }
    }};
}
pub(crate) use q8_tiles;

/// The body of a set's `dot_q8_tokens::<T>`: every block of one weight row against the same
/// block of `T` activation rows, added to the tokens' f32 accumulators `$acc`. Per block the
/// weight is loaded and its |w| taken once; per token `$dot(|w|, w, x) -> i32 lanes` (the
/// set's integer core), the conversion, the token's scale and the FMA, in the order of the
/// one-token kernel, so a token's sum does not depend on its batch. The weight scales are
/// converted four blocks at a time ([`block_scales`]); the weight scale times four tokens'
/// block scales takes one multiply, each token its lane with a shuffle ([`lane`]).
///
/// A macro so that it expands inside the set's `#[target_feature]` function, where `$dot`
/// inlines. The caller guarantees `$w` holds `$nb` blocks, `$x` `T` rows of them `$rb` bytes
/// apart and `$dx` `TOKENS * $nb` floats.
macro_rules! q8_token_blocks {
    ($dot:ident, $acc:expr, $w:expr, $x:expr, $rb:expr, $dx:expr, $nb:expr) => {{
        use std::arch::x86_64::*;
        use $crate::layout::rows::Q8_0_BLOCK_BYTES as BB;
        use $crate::x86_64::q8_tiles::{PREFETCH_BYTES, TOKENS, block_scales, lane, splat};
        let (acc, w, x, rb, dx, nb) = ($acc, $w, $x, $rb, $dx, $nb);
        let t_max = acc.len();
        // Block `b + j`, its weight scale lane `j` of `dws`.
        let mut block = |b: usize, j: usize, dws: __m256| {
            // SAFETY: block b + j is below nb for the weight row and the activation rows;
            // dx holds TOKENS * nb floats (the caller's guarantees).
            unsafe {
                let (wp, xp) = (w.add((b + j) * BB), x.add((b + j) * BB));
                let dxb = dx.add(TOKENS * (b + j));
                // Only a hint: it may point past the row (prefetches never fault).
                _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(PREFETCH_BYTES).cast());
                let wq = _mm256_loadu_si256(wp.add(2).cast());
                let aw = _mm256_abs_epi8(wq);
                let dw = splat(dws, j);
                let d0 = _mm256_mul_ps(dw, _mm256_broadcast_ps(&_mm_loadu_ps(dxb)));
                let d1 = if t_max > 4 {
                    _mm256_mul_ps(dw, _mm256_broadcast_ps(&_mm_loadu_ps(dxb.add(4))))
                } else {
                    d0
                };
                for (t, a) in acc.iter_mut().enumerate() {
                    let xq = _mm256_loadu_si256(xp.add(t * rb + 2).cast());
                    let p = _mm256_cvtepi32_ps($dot(aw, wq, xq));
                    *a = _mm256_fmadd_ps(p, lane(if t < 4 { d0 } else { d1 }, t), *a);
                }
            }
        };
        let mut b = 0;
        while b < nb {
            let n = (nb - b).min(4);
            // SAFETY: the n blocks' scale fields lie inside the row (the caller's guarantee).
            let dws = unsafe { block_scales(w.add(b * BB), n) };
            if n == 4 {
                // Constant lanes: each block's scale is a fixed permute.
                block(b, 0, dws);
                block(b, 1, dws);
                block(b, 2, dws);
                block(b, 3, dws);
            } else {
                for j in 0..n {
                    block(b, j, dws);
                }
            }
            b += n;
        }
    }};
}
pub(crate) use q8_token_blocks;

/// The one-token walk of a set's `matmul_q8_0_q8_0`: `$dot::<R>([row pointers; R],
/// activation row, nb) -> [f32; R]` over groups of four rows (they share every activation
/// load; the weights are the bound), then single rows. A macro so that it expands inside the
/// set's `#[target_feature]` function. The caller guarantees `w` holds `rows.end` rows of `nb`
/// blocks, `xq` one such row and `out` `rows.len()` floats.
macro_rules! q8_one_token {
    ($dot:ident, $w:expr, $nb:expr, $xq:expr, $rows:expr, $out:expr) => {{
        let (w, nb, xq, rows, out): (&[u8], usize, &[u8], std::ops::Range<usize>, &mut [f32]) =
            ($w, $nb, $xq, $rows, $out);
        const ROWS: usize = $crate::x86_64::rows::ROWS;
        let rb = nb * $crate::layout::rows::Q8_0_BLOCK_BYTES;
        let (base, xt) = (w.as_ptr(), xq.as_ptr());
        let mut r = rows.start;
        while r < rows.end {
            let o = r - rows.start;
            // SAFETY: the rows used lie below rows.end, inside w; xq has nb blocks (the
            // caller's guarantees).
            unsafe {
                if rows.end - r >= ROWS {
                    let p = [0, 1, 2, 3].map(|j| base.add((r + j) * rb));
                    out[o..o + ROWS].copy_from_slice(&$dot::<ROWS>(p, xt, nb));
                    r += ROWS;
                } else {
                    out[o] = $dot::<1>([base.add(r * rb)], xt, nb)[0];
                    r += 1;
                }
            }
        }
    }};
}
pub(crate) use q8_one_token;
