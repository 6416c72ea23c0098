//! The Q4_0 x Q8_0 product (the `--head q4_0` output head) as the AVX2, AVX-VNNI and
//! AVX-512 trees run it: one walk, written once as [`q4q8_kernels!`], which each tree's
//! `q4q8.rs` expands with its features and its integer core. Only the core differs between
//! sets (`vpmaddubsw` + `vpmaddwd`, or `vpdpbusd`), and it gives exact i32 lanes, so every
//! float operation after it is the same in all three: they give the scalar reference's bits
//! (`scalar/q4q8.rs`: lane `k` of a block is its elements `4k..4k + 4`, accumulated with an
//! FMA, the lanes summed by `hsum_ps` at the end).
//!
//! A block's 16 nibble bytes are loaded into both halves of a register (`vbroadcasti128`),
//! the upper half shifted right by 4, and both masked: the low half holds elements 0..16
//! (the low nibbles), the high half elements 16..32, in the order of the activation block's
//! 32 bytes. The nibbles are unsigned, as `vpmaddubsw` and `vpdpbusd` want their first
//! operand; the codes are `nibble - 8`, so each core takes `8 * sum(a)` per lane off, from
//! a per-activation-block value its `prep` computes once for all the rows sharing it.
//!
//! One token (decode, bound by the weight stream) walks four consecutive rows at a time,
//! sharing each activation block and prefetching the next four rows' stretch. A batch takes
//! each weight row against tiles of up to [`TOKENS`] tokens, so the row is read from memory
//! once for the whole batch and stays in L1 between tiles.

use std::arch::x86_64::*;

use crate::layout::rows::Q4_0_BLOCK_BYTES;

pub(crate) use crate::x86_64::hsum::hsum_ps;
pub(crate) use crate::x86_64::q8_tiles::{
    PREFETCH_BYTES, ScaleLayout, TOKENS, block_scales, lane, splat, with_tile_scales,
};

/// The f16 scales of the `n <= 4` Q4_0 blocks from `p` as f32, in lanes `0..n` (the rest
/// zero). One register built from the first scale, then converted together (see
/// `q8_tiles::block_scales` for why not one at a time).
///
/// # Safety
/// The `n` blocks' scale fields must be readable; the CPU must support AVX2 and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4_scales(p: *const u8, n: usize) -> __m256 {
    // SAFETY: the caller guarantees the n scale fields are readable.
    let h = |j: usize| unsafe {
        if j < n {
            i32::from(p.add(j * Q4_0_BLOCK_BYTES).cast::<u16>().read_unaligned())
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

/// The 32 nibbles of the Q4_0 block whose 16 code bytes start at `q`, as unsigned bytes in
/// element order (module docs).
///
/// # Safety
/// 16 bytes at `q` must be readable; the CPU must support AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn nibbles(q: *const u8) -> __m256i {
    // SAFETY: the caller guarantees the 16 bytes are readable.
    let v = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(q.cast()) });
    let v = _mm256_srlv_epi64(v, _mm256_set_epi64x(4, 4, 0, 0));
    _mm256_and_si256(v, _mm256_set1_epi8(0x0F))
}

/// Expands, in a tree's `q4q8.rs`, to that tree's `pub unsafe fn matmul_q4_0_q8_0` (same
/// contract as the scalar kernel), compiled with `$feat`, around two functions of the tree:
/// `$prep(a) -> __m256i`, what the core needs of one activation block (computed once for
/// every weight row that meets it), and `$core(nibbles, a, prep) -> __m256i`, the eight
/// exact i32 lanes `sum (nibble - 8) * a` over elements `4k..4k + 4`.
macro_rules! q4q8_kernels {
    ($feat:literal, $prep:ident, $core:ident) => {
        /// Dots of `R` Q4_0 weight rows with one Q8_0 activation row, `nb` blocks each; the
        /// rows are consecutive, `rb` bytes apart.
        ///
        /// # Safety
        /// The set's features; each `w[r]` points at `nb` readable Q4_0 blocks, `x` at `nb`
        /// Q8_0 blocks.
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn dot_rows<const R: usize>(
            w: [*const u8; R],
            x: *const u8,
            rb: usize,
            nb: usize,
        ) -> [f32; R] {
            use std::arch::x86_64::*;
            use $crate::layout::rows::{Q4_0_BLOCK_BYTES as WB, Q8_0_BLOCK_BYTES as XB};
            use $crate::x86_64::q4_tiles::{block_scales, hsum_ps, nibbles, q4_scales, splat};
            let mut acc = [_mm256_setzero_ps(); R];
            let mut b = 0;
            while b < nb {
                let n = (nb - b).min(4);
                // SAFETY: blocks b..b + n are below nb for x and every row (caller).
                let d: [__m256; R] = unsafe {
                    let dx = block_scales(x.add(b * XB), n);
                    std::array::from_fn(|r| _mm256_mul_ps(q4_scales(w[r].add(b * WB), n), dx))
                };
                // Block b + j, its scales lane j of `d`.
                let mut block = |j: usize| {
                    // SAFETY: as above; prefetches are hints that never fault.
                    unsafe {
                        let a = _mm256_loadu_si256(x.add((b + j) * XB + 2).cast());
                        let prep = $prep(a);
                        for r in 0..R {
                            let nib = nibbles(w[r].add((b + j) * WB + 2));
                            let p = _mm256_cvtepi32_ps($core(nib, a, prep));
                            acc[r] = _mm256_fmadd_ps(p, splat(d[r], j), acc[r]);
                        }
                    }
                };
                if n == 4 {
                    // Rows are short (1440 bytes at 2560 columns) and read side by side, so
                    // the hardware prefetcher loses them: fetch the next pass's stretch, the
                    // 72 bytes of these four blocks R rows further on.
                    for r in 0..R {
                        let pf = w[r].wrapping_add(R * rb + b * WB);
                        _mm_prefetch::<_MM_HINT_T0>(pf.cast());
                        _mm_prefetch::<_MM_HINT_T0>(pf.wrapping_add(64).cast());
                    }
                    // Constant lanes: each block's scale is a fixed permute.
                    block(0);
                    block(1);
                    block(2);
                    block(3);
                } else {
                    for j in 0..n {
                        block(j);
                    }
                }
                b += n;
            }
            acc.map(|a| hsum_ps(a))
        }

        /// Dots of one Q4_0 weight row with `T <= TOKENS` Q8_0 activation rows `xrb` bytes
        /// apart: each weight block is loaded and unpacked once for the `T` rows. `dx` holds
        /// the tile's activation scales as f32, `[block][TOKENS]`. Per token the operations
        /// of [`dot_rows`] in its order, so a token's result does not depend on its batch.
        ///
        /// # Safety
        /// The set's features; `w` points at `nb` readable Q4_0 blocks, `x` at `T` rows of
        /// `nb` Q8_0 blocks `xrb` bytes apart, `dx` at `TOKENS * nb` floats.
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn dot_tokens<const T: usize>(
            w: *const u8,
            x: *const u8,
            xrb: usize,
            dx: *const f32,
            nb: usize,
        ) -> [f32; T] {
            use std::arch::x86_64::*;
            use $crate::layout::rows::{Q4_0_BLOCK_BYTES as WB, Q8_0_BLOCK_BYTES as XB};
            use $crate::x86_64::q4_tiles::{
                PREFETCH_BYTES, TOKENS, hsum_ps, lane, nibbles, q4_scales, splat,
            };
            const { assert!(T <= TOKENS && TOKENS == 8) };
            let mut acc = [_mm256_setzero_ps(); T];
            let mut b = 0;
            while b < nb {
                let n = (nb - b).min(4);
                // SAFETY: the n blocks' scale fields lie inside the row (caller).
                let dws = unsafe { q4_scales(w.add(b * WB), n) };
                let mut block = |j: usize| {
                    // SAFETY: block b + j is below nb for the row and every token; dx holds
                    // TOKENS * nb floats (caller). Prefetches never fault.
                    unsafe {
                        let wp = w.add((b + j) * WB);
                        _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(PREFETCH_BYTES).cast());
                        let nib = nibbles(wp.add(2));
                        let dxb = dx.add(TOKENS * (b + j));
                        let dw = splat(dws, j);
                        let d0 = _mm256_mul_ps(dw, _mm256_broadcast_ps(&_mm_loadu_ps(dxb)));
                        let d1 = if T > 4 {
                            _mm256_mul_ps(dw, _mm256_broadcast_ps(&_mm_loadu_ps(dxb.add(4))))
                        } else {
                            d0
                        };
                        for (t, a_t) in acc.iter_mut().enumerate() {
                            let a = _mm256_loadu_si256(x.add(t * xrb + (b + j) * XB + 2).cast());
                            let p = _mm256_cvtepi32_ps($core(nib, a, $prep(a)));
                            *a_t = _mm256_fmadd_ps(p, lane(if t < 4 { d0 } else { d1 }, t), *a_t);
                        }
                    }
                };
                if n == 4 {
                    block(0);
                    block(1);
                    block(2);
                    block(3);
                } else {
                    for j in 0..n {
                        block(j);
                    }
                }
                b += n;
            }
            acc.map(|a| hsum_ps(a))
        }

        /// Same contract as the scalar kernel of this name.
        ///
        /// # Safety
        /// The CPU must support this set's features.
        #[target_feature(enable = $feat)]
        pub unsafe fn matmul_q4_0_q8_0(
            w: &[u8],
            row_len: usize,
            xq: &[u8],
            n_tok: usize,
            rows: std::ops::Range<usize>,
            out: &mut [f32],
        ) {
            use $crate::extent::holds;
            use $crate::layout::rows::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK4_0};
            use $crate::x86_64::q4_tiles::{ScaleLayout, TOKENS, with_tile_scales};
            const ROWS: usize = 4;
            let nb = row_len / QK4_0;
            let (rb, xrb) = (nb * Q4_0_BLOCK_BYTES, nb * Q8_0_BLOCK_BYTES);
            let nr = rows.len();
            assert!(
                holds(w.len(), rows.end, rb)
                    && holds(xq.len(), n_tok, xrb)
                    && holds(out.len(), n_tok, nr)
            );
            let (base, x) = (w.as_ptr(), xq.as_ptr());
            if n_tok > 1 {
                // The closure keeps this function's features.
                return with_tile_scales(xq, nb, n_tok, ScaleLayout::TileBlockToken, |dx| {
                    let dxp = dx.as_ptr();
                    for (i, r) in rows.enumerate() {
                        let mut t0 = 0;
                        while t0 < n_tok {
                            let tt = TOKENS.min(n_tok - t0);
                            // SAFETY: row r lies inside w, tokens t0..t0 + tt inside xq and
                            // dx (shapes checked above).
                            unsafe {
                                let (wp, xp, dp) =
                                    (base.add(r * rb), x.add(t0 * xrb), dxp.add(t0 * nb));
                                let mut put = |d: &[f32]| {
                                    for (t, &v) in d.iter().enumerate() {
                                        out[(t0 + t) * nr + i] = v;
                                    }
                                };
                                match tt {
                                    8 => put(&dot_tokens::<8>(wp, xp, xrb, dp, nb)),
                                    7 => put(&dot_tokens::<7>(wp, xp, xrb, dp, nb)),
                                    6 => put(&dot_tokens::<6>(wp, xp, xrb, dp, nb)),
                                    5 => put(&dot_tokens::<5>(wp, xp, xrb, dp, nb)),
                                    4 => put(&dot_tokens::<4>(wp, xp, xrb, dp, nb)),
                                    3 => put(&dot_tokens::<3>(wp, xp, xrb, dp, nb)),
                                    2 => put(&dot_tokens::<2>(wp, xp, xrb, dp, nb)),
                                    _ => put(&dot_tokens::<1>(wp, xp, xrb, dp, nb)),
                                }
                            }
                            t0 += tt;
                        }
                    }
                });
            }
            let mut r = rows.start;
            while r < rows.end {
                let o = r - rows.start;
                // SAFETY: the rows used lie below rows.end, inside w; xq holds one row of nb
                // blocks (shapes checked above).
                unsafe {
                    if rows.end - r >= ROWS {
                        let p = [0, 1, 2, 3].map(|j| base.add((r + j) * rb));
                        out[o..o + ROWS].copy_from_slice(&dot_rows::<ROWS>(p, x, rb, nb));
                        r += ROWS;
                    } else {
                        out[o] = dot_rows::<1>([base.add(r * rb)], x, rb, nb)[0];
                        r += 1;
                    }
                }
            }
        }
    };
}
pub(crate) use q4q8_kernels;
