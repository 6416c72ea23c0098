//! AVX2 product of the grouped Q8_0 head (`crate::layout::q8r`): the `--head q8` output head
//! of decode and batched decode, one sequential stream of aligned lines per thread.
//!
//! A 64-byte line holds four quants of each of a group's 16 rows: two registers, rows 0-7
//! and 8-15, each multiplied by the token's four activation bytes broadcast to every row,
//! `madd(maddubs(|w|, sign(x, w)), 1)` (|w| is unsigned even for a weight quant of -128, and
//! x never is -128, so the pair sums stay inside i16): one i32 lane per row. After a block's
//! eight lines each lane is the row's exact block dot, and the lane takes the scalar
//! reference's steps: `d = d_w * d_x`, `p = d * dot`, `acc = acc + p`, rounded separately (no
//! FMA), so the result is the reference's, bit for bit.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::layout::q8r::{Q8Acts, Q8R, Q8R_LINE, Q8R_ROWS, Q8R_SB_COLS, Q8R_SCALE_BYTES};
use crate::layout::rows::QK8_0;
use crate::shared::q8r::{ActPtrs, q8r_walk};

/// How far ahead of the line in use the stream is prefetched, in bytes.
const PF_DIST: usize = 4096;

/// One super-block of a group (`p`) against tokens `t0..t0 + T`, added to `acc` (rows 0-7,
/// 8-15 of each token); with `pf`, a prefetch for each of its lines `PF_DIST` ahead.
///
/// # Safety
/// The super-block is readable and 64-byte aligned; the tokens are below the activations'
/// capacity and `s` below their super-blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn sb<const T: usize>(
    p: *const u8,
    x: ActPtrs,
    t0: usize,
    s: usize,
    acc: &mut [[__m256; 2]; T],
    pf: bool,
) {
    let ones = _mm256_set1_epi16(1);
    // SAFETY: every load lies inside the super-block or the tokens' activations, aligned as
    // the layout says (the caller's guarantees); prefetches never fault.
    unsafe {
        if pf {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PF_DIST).cast());
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PF_DIST + 64).cast());
        }
        for b in 0..4 {
            let sc = p.add(32 * b);
            let dw = [
                _mm256_cvtph_ps(_mm_load_si128(sc.cast())),
                _mm256_cvtph_ps(_mm_load_si128(sc.add(16).cast())),
            ];
            let col = s * Q8R_SB_COLS + b * QK8_0;
            let mut dot = [[_mm256_setzero_si256(); 2]; T];
            for k in 0..8 {
                let line = p.add(Q8R_SCALE_BYTES + Q8R_LINE * (8 * b + k));
                if pf {
                    _mm_prefetch::<_MM_HINT_T0>(line.wrapping_add(PF_DIST).cast());
                }
                let w0 = _mm256_load_si256(line.cast());
                let w1 = _mm256_load_si256(line.add(32).cast());
                let (a0, a1) = (_mm256_abs_epi8(w0), _mm256_abs_epi8(w1));
                for t in 0..T {
                    let xb = _mm256_set1_epi32(x.quad(t0 + t, col + 4 * k));
                    let p0 = _mm256_maddubs_epi16(a0, _mm256_sign_epi8(xb, w0));
                    let p1 = _mm256_maddubs_epi16(a1, _mm256_sign_epi8(xb, w1));
                    dot[t][0] = _mm256_add_epi32(dot[t][0], _mm256_madd_epi16(p0, ones));
                    dot[t][1] = _mm256_add_epi32(dot[t][1], _mm256_madd_epi16(p1, ones));
                }
            }
            for t in 0..T {
                let dx = _mm256_set1_ps(x.scale(t0 + t, s * 4 + b));
                for h in 0..2 {
                    let d = _mm256_mul_ps(dw[h], dx);
                    let p = _mm256_mul_ps(d, _mm256_cvtepi32_ps(dot[t][h]));
                    acc[t][h] = _mm256_add_ps(acc[t][h], p);
                }
            }
        }
    }
}

/// A token's 16 row sums.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn lanes(a: [__m256; 2]) -> [f32; Q8R_ROWS] {
    let mut v = [0.0f32; Q8R_ROWS];
    // SAFETY: `v` holds 16 floats.
    unsafe {
        _mm256_storeu_ps(v.as_mut_ptr(), a[0]);
        _mm256_storeu_ps(v.as_mut_ptr().add(8), a[1]);
    }
    v
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; the shapes were checked
/// (`crate::layout::q8r::check_matmul`) and `rows` is not empty.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q8r(w: &Q8R, x: &Q8Acts, n_tok: usize, rows: Range<usize>, out: &mut [f32]) {
    let zero = [_mm256_setzero_ps(); 2];
    q8r_walk!(sb, lanes, zero, [1, 2, 3, 4], w, x, n_tok, rows, out);
}
