//! AVX2 weighted sum of Q4_0 values with integer weights (the specification:
//! `attn_weighted_sum_q4_0` in `scalar/kv_q4_wsum.rs`, bit for bit; the tile and the weight
//! rounding step are `crate::layout::kv`'s).
//!
//! The float weighted sum turned every nibble into a float before its multiply-add, and at 2
//! threads that decoding, not the bytes Q4_0 halves, bounded it. Here each head's weights of
//! a 16-position tile (times the rows' block scales) are rounded to integers of at most 127,
//! and the nibbles are multiplied as bytes: the 16 bytes of two positions' block are
//! interleaved (position `p` and `p + 1` side by side), masked into low and high nibbles (the
//! block's values 0-15 and 16-31, in order), and one `vpmaddubsw` against the pair's two
//! weights adds 2 x 16 products into 16 i16 lanes. The decoding is paid once per pair of
//! positions for the whole group of heads; a head pays a broadcast, two `vpmaddubsw` and two
//! adds per pair. The 8 the nibbles carry comes off once per tile as `8 Σ k`.

// acc[h][i] pairs head h with lane group i; index loops say that more plainly.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use crate::layout::kv::{Q4_0_WSUM_TILE, QK_KV, q4_0_wsum_step};
use crate::layout::rows::Q4_0_BLOCK_BYTES;
use crate::x86_64::hsum::hsum_epi32;

const TILE: usize = Q4_0_WSUM_TILE;
/// Blocks whose weights are rounded together before their products (d <= 256 in one go).
const BATCH_BLOCKS: usize = 8;
const _: () = assert!(
    TILE == 16,
    "the kernel holds a tile as two vectors of 8 lanes"
);

/// One head's integer weights for a tile and block: the step they count in and `8 Σ k` (as
/// i16: |Σ k| <= 16 * 127); the weights themselves go to a byte array.
#[derive(Clone, Copy)]
struct TileStep {
    step: f32,
    corr: i16,
}

/// Largest lane of `v`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hmax(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_movehdup_ps(m));
    _mm_cvtss_f32(m)
}

/// The integer weights of the products `c` (lanes past the tile's positions hold 0), as
/// the reference's `q4_0_wsum_weights` rounds them, into `bytes` (`k[p]` at byte `p`;
/// zeros when the tile adds nothing); `None` when the tile adds nothing.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile_weights(c: [__m256; 2], bytes: &mut [i8; TILE]) -> Option<TileStep> {
    *bytes = [0; TILE];
    let sign = _mm256_set1_ps(-0.0);
    let a = c.map(|x| _mm256_andnot_ps(sign, x));
    let lim = _mm256_set1_ps(f32::MAX);
    // NaN and ±inf compare false: a weight that is not finite makes the step NaN.
    let finite = _mm256_and_ps(
        _mm256_cmp_ps::<_CMP_LE_OQ>(a[0], lim),
        _mm256_cmp_ps::<_CMP_LE_OQ>(a[1], lim),
    );
    if _mm256_movemask_ps(finite) != 0xff {
        return Some(TileStep {
            step: f32::NAN,
            corr: 0,
        });
    }
    let (step, inv) = q4_0_wsum_step(hmax(_mm256_max_ps(a[0], a[1])))?;
    let inv = _mm256_set1_ps(inv);
    // c * (127 / m), rounded to nearest even (the MXCSR default), as the reference does.
    let ki = c.map(|x| _mm256_cvtps_epi32(_mm256_mul_ps(x, inv)));
    let sum = hsum_epi32(_mm256_add_epi32(ki[0], ki[1]));
    // i32 -> i16 -> i8 (exact: |k| <= 127), then the two lanes' low quadwords in order.
    let w16 = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(ki[0], ki[1]));
    let w8 = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi16(w16, w16));
    // SAFETY: `bytes` holds 16 bytes.
    unsafe { _mm_storeu_si128(bytes.as_mut_ptr().cast(), _mm256_castsi256_si128(w8)) };
    Some(TileStep {
        step,
        corr: (8 * sum) as i16,
    })
}

/// `out[h][j] += w[h][p] * (row p)[j]` for `G` heads of Q4_0 rows, integer-weighted as the
/// module says.
///
/// # Safety
/// AVX2/FMA/F16C; `w.len() == G * n_pos`, `out.len() == G * d` with `d` a multiple of 32,
/// rows `0..n_pos` of `d` Q4_0 values `kv_stride` bytes apart readable at `v` (the safe API
/// checks these).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn wsum_q4_0_g<const G: usize>(
    w: &[f32],
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    // The scale gather takes i32 offsets; the token method leaves rows farther apart to the
    // reference (same bits).
    assert!(
        gather_reaches(kv_stride),
        "Q4_0 weighted sum: rows {kv_stride} bytes apart are past the scale gathers' reach"
    );
    let d = out.len() / G;
    let nb = d / QK_KV;
    let rb = nb * Q4_0_BLOCK_BYTES;
    let m4 = _mm256_set1_epi8(0x0f);
    let zero = _mm256_setzero_si256();
    let mut t0 = 0;
    while t0 < n_pos {
        let n = TILE.min(n_pos - t0);
        // Past the tile's last position its weight is 0: any readable row will do.
        let row = |p: usize| v.as_ptr().wrapping_add((t0 + p.min(n - 1)) * kv_stride);
        // Each head's weights over the tile, zero past its positions.
        let wt: [[__m256; 2]; G] = std::array::from_fn(|h| {
            let wh = &w[h * n_pos + t0..][..n];
            let mut buf = [0f32; TILE];
            let p = if n == TILE {
                wh.as_ptr()
            } else {
                buf[..n].copy_from_slice(wh);
                buf.as_ptr()
            };
            // SAFETY: 16 floats at p.
            unsafe { [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))] }
        });
        let rows: [*const u8; TILE] = std::array::from_fn(row);
        // The next tile's rows, while this one computes: three points at most 64 bytes apart
        // cover a row of up to 128 bytes (d <= 224; longer rows get their first lines).
        for p in t0 + TILE..n_pos.min(t0 + 2 * TILE) {
            let r = v.as_ptr().wrapping_add(p * kv_stride);
            _mm_prefetch::<_MM_HINT_T0>(r.cast());
            _mm_prefetch::<_MM_HINT_T0>(r.wrapping_add(rb / 2).cast());
            _mm_prefetch::<_MM_HINT_T0>(r.wrapping_add(rb - 1).cast());
        }
        // Byte offsets of the tile's rows from its first (past its positions: its last row).
        let last = _mm256_set1_epi32((n - 1) as i32);
        let stride = _mm256_set1_epi32(kv_stride as i32);
        let offs = [0, 8].map(|p0| {
            let p = _mm256_add_epi32(
                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                _mm256_set1_epi32(p0),
            );
            _mm256_mullo_epi32(_mm256_min_epi32(p, last), stride)
        });
        for b0 in (0..nb).step_by(BATCH_BLOCKS) {
            let nbc = BATCH_BLOCKS.min(nb - b0);
            // Every block's weights first, so their long chains (gather, convert, maximum,
            // division, rounding) can overlap one another (measured: within this VM's noise
            // of computing each just before its products).
            let mut bytes = [[[0i8; TILE]; BATCH_BLOCKS]; G];
            let mut steps = [[None::<TileStep>; BATCH_BLOCKS]; G];
            for bi in 0..nbc {
                let b = b0 + bi;
                // The 16 rows' block-b scales: 4 bytes gathered from each block's start (the
                // f16 and the first nibbles), the f16 kept, packed in position order.
                // SAFETY: each row's block b (18 bytes) is readable.
                let s = unsafe {
                    let base = row(0).add(Q4_0_BLOCK_BYTES * b).cast::<i32>();
                    let g = offs.map(|o| {
                        _mm256_and_si256(
                            _mm256_i32gather_epi32::<1>(base, o),
                            _mm256_set1_epi32(0xffff),
                        )
                    });
                    let h =
                        _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(g[0], g[1]));
                    [
                        _mm256_cvtph_ps(_mm256_castsi256_si128(h)),
                        _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(h)),
                    ]
                };
                for h in 0..G {
                    let c = [_mm256_mul_ps(wt[h][0], s[0]), _mm256_mul_ps(wt[h][1], s[1])];
                    steps[h][bi] = tile_weights(c, &mut bytes[h][bi]);
                }
            }
            for bi in 0..nbc {
                let b = b0 + bi;
                if (0..G).all(|h| steps[h][bi].is_none()) {
                    continue;
                }
                let mut acc = [[zero; 2]; G];
                for j in 0..TILE / 2 {
                    // SAFETY: both rows are readable, and their block b's 16 nibble bytes.
                    let (x0, x1) = unsafe {
                        let at = |p: usize| rows[p].add(Q4_0_BLOCK_BYTES * b + 2).cast();
                        (_mm_loadu_si128(at(2 * j)), _mm_loadu_si128(at(2 * j + 1)))
                    };
                    // Byte 2i: position 2j's byte i, byte 2i + 1: position 2j + 1's.
                    let z = _mm256_set_m128i(_mm_unpackhi_epi8(x0, x1), _mm_unpacklo_epi8(x0, x1));
                    let lo = _mm256_and_si256(z, m4);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(z), m4);
                    for h in 0..G {
                        // The pair's two weights in every 16-bit lane (0 when the tile adds
                        // nothing). SAFETY: bytes 2j, 2j + 1 of a 16-byte array.
                        let pair = unsafe {
                            bytes[h][bi]
                                .as_ptr()
                                .add(2 * j)
                                .cast::<i16>()
                                .read_unaligned()
                        };
                        let k = _mm256_set1_epi16(pair);
                        // Lane i: 2 products of at most 15 * 127; 8 pairs stay below 2^15.
                        acc[h][0] = _mm256_add_epi16(acc[h][0], _mm256_maddubs_epi16(lo, k));
                        acc[h][1] = _mm256_add_epi16(acc[h][1], _mm256_maddubs_epi16(hi, k));
                    }
                }
                for h in 0..G {
                    let Some(t) = steps[h][bi] else { continue };
                    let step = _mm256_set1_ps(t.step);
                    let corr = _mm256_set1_epi16(t.corr);
                    for i in 0..2 {
                        // Σ k (n - 8) fits i16 (|.| <= 16 * 127 * 8); the wrapped difference is it.
                        let x = _mm256_sub_epi16(acc[h][i], corr);
                        let halves = [
                            _mm256_cvtepi16_epi32(_mm256_castsi256_si128(x)),
                            _mm256_cvtepi16_epi32(_mm256_extracti128_si256::<1>(x)),
                        ];
                        for (e, xe) in halves.into_iter().enumerate() {
                            let o = out
                                .as_mut_ptr()
                                .wrapping_add(h * d + QK_KV * b + 16 * i + 8 * e);
                            // SAFETY: lanes 32 b + 16 i + 8 e .. + 8 of head h lie inside out.
                            unsafe {
                                let y = _mm256_fmadd_ps(
                                    step,
                                    _mm256_cvtepi32_ps(xe),
                                    _mm256_loadu_ps(o),
                                );
                                _mm256_storeu_ps(o, y);
                            }
                        }
                    }
                }
            }
        }
        t0 += n;
    }
}

/// Whether the kernels take rows `kv_stride` bytes apart: a tile's block scales are gathered
/// with i32 offsets, up to `(16 - 1) * kv_stride`.
pub(crate) fn gather_reaches(kv_stride: usize) -> bool {
    (TILE - 1).saturating_mul(kv_stride) <= i32::MAX as usize
}

/// A weighted-sum kernel as `kv.rs`' table holds them (its `WsumKernel`, written here too so
/// that this file needs nothing of that one).
type WsumKernel = unsafe fn(&[f32], &[u8], usize, usize, &mut [f32]);

/// The kernel for a group of `g` heads (1, 2, 4 or 8), as an entry of `kv.rs`' table.
pub(crate) fn wsum_kernel(g: usize) -> Option<WsumKernel> {
    Some(match g {
        1 => wsum_q4_0_g::<1>,
        2 => wsum_q4_0_g::<2>,
        4 => wsum_q4_0_g::<4>,
        8 => wsum_q4_0_g::<8>,
        _ => return None,
    })
}
