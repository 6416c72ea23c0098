//! AVX2 block-quantized rows (Q8_0, Q6_K) times f32 vectors: weight rows of heads and
//! embeddings kept in those formats. Each row is decoded in registers, never written out,
//! once for a tile of token rows (the shared tile walk `crate::x86_64::rows::matmul_tiles`).
//! Q4_0 (rare in heads) keeps the portable dequantize-a-chunk path
//! (`crate::shared::rows::matmul_by_chunks` with this set's dot). The Q8_0 block decoder also
//! serves the Q8_0 KV cache (`attn.rs`). The F16C scale read and the Q6_K code unpacking are
//! the shared x86 ones (`x86_64/f16c.rs`, `x86_64/q6k.rs`).

use std::arch::x86_64::*;

use super::float::hsum;
use crate::layout::rows::RowFormat;
use crate::layout::rows::{Q6K_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK_K, QK8_0};
use crate::x86_64::f16c::f16_at;
use crate::x86_64::q6k::q6k_quarters;
use crate::x86_64::rows;

/// Dots of one Q6_K row of `nb` super-blocks with `T` token rows of `x` (`xs` floats apart),
/// 256 bits wide: per half-block the 6-bit codes of the four 32-element quarters come from
/// [`q6k_quarters`], are widened to f32 once for the tile and scaled per 16 elements by
/// `d * scales[e / 16]`.
///
/// # Safety
/// AVX2, FMA, F16C; `w` readable for `nb` super-blocks, `x + t * xs` for `nb` super-blocks of
/// floats for every `t < T`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dots_q6k<const T: usize>(w: *const u8, x: *const f32, xs: usize, nb: usize) -> [f32; T] {
    let mut acc = [[_mm256_setzero_ps(); 2]; T];
    for b in 0..nb {
        // SAFETY: super-block b is below nb for w and for every token row of x.
        unsafe {
            let blk = w.add(b * Q6K_BLOCK_BYTES);
            let d = f16_at(blk.add(208));
            for n in 0..2 {
                let q = q6k_quarters(blk, n);
                let sc = blk.add(192 + 8 * n);
                for (g, &qg) in q.iter().enumerate() {
                    let halves = [
                        _mm256_castsi256_si128(qg),
                        _mm256_extracti128_si256::<1>(qg),
                    ];
                    for (h, &q16) in halves.iter().enumerate() {
                        // 16 elements share scale 2g + h.
                        let s = _mm256_set1_ps(d * f32::from(sc.add(2 * g + h).read() as i8));
                        let lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q16));
                        let hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(q16)));
                        let off = QK_K * b + 128 * n + 32 * g + 16 * h;
                        for (t, a) in acc.iter_mut().enumerate() {
                            let xp = x.add(t * xs + off);
                            let v = _mm256_mul_ps(_mm256_loadu_ps(xp), lo);
                            let v = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(8)), hi, v);
                            a[h] = _mm256_fmadd_ps(v, s, a[h]);
                        }
                    }
                }
            }
        }
    }
    acc.map(|a| hsum(_mm256_add_ps(a[0], a[1])))
}

/// Dots of one Q8_0 row of `nb` blocks with `T` token rows of `x` (`xs` floats apart), 256
/// bits wide: each block is decoded once for the whole tile.
///
/// # Safety
/// AVX2, FMA, F16C; `w` readable for `nb` blocks, `x + t * xs` for `nb` blocks of floats for
/// every `t < T`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dots_q8_0<const T: usize>(w: *const u8, x: *const f32, xs: usize, nb: usize) -> [f32; T] {
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        // SAFETY: block b is below nb for w and for every token row of x.
        unsafe {
            let (d, q) = q8_block_f32(w.add(b * Q8_0_BLOCK_BYTES));
            let d = _mm256_set1_ps(d);
            for (t, a) in acc.iter_mut().enumerate() {
                let xp = x.add(t * xs + QK8_0 * b);
                let mut s = _mm256_setzero_ps();
                for (j, &qj) in q.iter().enumerate() {
                    s = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(8 * j)), qj, s);
                }
                *a = _mm256_fmadd_ps(s, d, *a);
            }
        }
    }
    acc.map(|a| hsum(a))
}

/// The f16 scale of the Q8_0 block at `p` and its 32 quants as four f32 vectors.
///
/// # Safety
/// A whole Q8_0 block (34 bytes) at `p` must be readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q8_block_f32(p: *const u8) -> (f32, [__m256; 4]) {
    // SAFETY: the caller guarantees the 34 bytes of the block are readable.
    unsafe {
        let d = f16_at(p);
        let v = [0, 1, 2, 3].map(|j| {
            let q = _mm_loadl_epi64(p.add(2 + 8 * j).cast());
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))
        });
        (d, v)
    }
}

rows::tile_kernels!(
    "AVX2, FMA and F16C",
    matmul_q8_0,
    Q8_0Rows,
    RowFormat::Q8_0,
    8,
    dots_q8_0
);
// Q6_K keeps two accumulators a token, and AVX2 has 16 vector registers: 4 tokens a tile.
rows::tile_kernels!(
    "AVX2, FMA and F16C",
    matmul_q6k,
    Q6KRows,
    RowFormat::Q6K,
    4,
    dots_q6k
);
