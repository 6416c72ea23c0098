//! AVX-512 block-quantized rows (Q8_0, Q6_K) times f32 vectors, as `avx2/qrows.rs` at 512
//! bits: each row decoded in registers once for a tile of token rows (the shared tile walk
//! `crate::x86_64::rows::matmul_tiles`). The Q8_0 block decoder also serves the Q8_0 KV
//! cache (`attn.rs`). The F16C scale read and the Q6_K code unpacking are the shared x86
//! ones (`x86_64/f16c.rs`, `x86_64/q6k.rs`: 128- and 256-bit work either way).

use std::arch::x86_64::*;

use crate::layout::rows::RowFormat;
use crate::layout::rows::{Q6K_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK_K, QK8_0};
use crate::x86_64::f16c::f16_at;
use crate::x86_64::q6k::q6k_quarters;
use crate::x86_64::rows;

/// Dots of one Q8_0 row of `nb` blocks with `T` token rows of `x` (`xs` floats apart), 512
/// bits wide. Each block is decoded once for the whole tile; each token's sum is formed in
/// the same order whatever `T` is, so a token's result does not depend on its batch.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ, AVX2, FMA, F16C; `w` readable for `nb` blocks, `x + t * xs` for `nb`
/// blocks of floats for every `t < T`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn dots_q8_0<const T: usize>(w: *const u8, x: *const f32, xs: usize, nb: usize) -> [f32; T] {
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..nb {
        // SAFETY: block b is below nb for w and for every token row of x.
        unsafe {
            let p = w.add(b * Q8_0_BLOCK_BYTES);
            let lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(2).cast())));
            let hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(18).cast())));
            let d = _mm512_set1_ps(f16_at(p));
            for (t, a) in acc.iter_mut().enumerate() {
                let xp = x.add(t * xs + QK8_0 * b);
                let s = _mm512_mul_ps(_mm512_loadu_ps(xp), lo);
                let s = _mm512_fmadd_ps(_mm512_loadu_ps(xp.add(16)), hi, s);
                *a = _mm512_fmadd_ps(s, d, *a);
            }
        }
    }
    acc.map(|a| _mm512_reduce_add_ps(a))
}

/// Dots of one Q6_K row of `nb` super-blocks with `T` token rows of `x` (`xs` floats apart),
/// 512 bits wide: per half-block the 6-bit codes of the four 32-element quarters come from
/// [`q6k_quarters`], are widened to f32 once for the tile and scaled per 16 elements by
/// `d * scales[e / 16]`; each token's sums are formed in the same order whatever `T` is.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ, AVX2, FMA, F16C; `w` readable for `nb` super-blocks, `x + t * xs` for
/// `nb` super-blocks of floats for every `t < T`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn dots_q6k<const T: usize>(w: *const u8, x: *const f32, xs: usize, nb: usize) -> [f32; T] {
    let mut acc = [[_mm512_setzero_ps(); 2]; T];
    for b in 0..nb {
        // SAFETY: super-block b is below nb for w and for every token row of x.
        unsafe {
            let blk = w.add(b * Q6K_BLOCK_BYTES);
            let d = f16_at(blk.add(208));
            for n in 0..2 {
                let q = q6k_quarters(blk, n);
                let sc = blk.add(192 + 8 * n);
                for (g, &qg) in q.iter().enumerate() {
                    let lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(qg)));
                    let hi =
                        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256::<1>(qg)));
                    let s0 = _mm512_set1_ps(d * f32::from(sc.add(2 * g).read() as i8));
                    let s1 = _mm512_set1_ps(d * f32::from(sc.add(2 * g + 1).read() as i8));
                    let off = QK_K * b + 128 * n + 32 * g;
                    for (t, a) in acc.iter_mut().enumerate() {
                        let xg = x.add(t * xs + off);
                        let t0 = _mm512_mul_ps(_mm512_loadu_ps(xg), lo);
                        let t1 = _mm512_mul_ps(_mm512_loadu_ps(xg.add(16)), hi);
                        a[0] = _mm512_fmadd_ps(t0, s0, a[0]);
                        a[1] = _mm512_fmadd_ps(t1, s1, a[1]);
                    }
                }
            }
        }
    }
    acc.map(|a| _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1])))
}

/// The f16 scale of the Q8_0 block at `p` and its 32 quants as two f32 vectors.
///
/// # Safety
/// A whole Q8_0 block (34 bytes) at `p` must be readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn q8_block_f32(p: *const u8) -> (f32, __m512, __m512) {
    // SAFETY: the caller guarantees the 34 bytes of the block are readable.
    unsafe {
        let d = f16_at(p);
        let lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(2).cast()));
        let hi = _mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(18).cast()));
        (d, _mm512_cvtepi32_ps(lo), _mm512_cvtepi32_ps(hi))
    }
}

rows::tile_kernels!(
    "AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C",
    matmul_q8_0,
    Q8_0Rows,
    RowFormat::Q8_0,
    8,
    dots_q8_0
);
rows::tile_kernels!(
    "AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C",
    matmul_q6k,
    Q6KRows,
    RowFormat::Q6K,
    8,
    dots_q6k
);
