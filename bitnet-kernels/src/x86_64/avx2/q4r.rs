//! AVX2 product of the grouped Q4_0 head (`crate::layout::q4r`): a 64-byte line in two
//! registers (rows 0-7, 8-15), each as its low nibbles (four columns of each row) and high
//! nibbles (the four columns 16 further). The nibbles are unsigned, so `maddubs` takes them
//! as they are (pair sums of at most 2 * 15 * 127: no saturation, and the low and high
//! nibbles' sums added in i16 stay below 2^13), `madd` against ones widens, and a block's
//! lanes start from the activations' `-8 * sum(x)`: the exact dot of the codes
//! `nibble - 8`. The float steps are the scalar reference's (no FMA): its bits.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::layout::q4r::{Q4R, Q4R_BLOCK_LINES, Q4R_LINE, Q4R_ROWS, Q4R_SB_BYTES, Q4R_SCALE_BYTES};
use crate::layout::q8r::{Q8Acts, Q8R_SB_COLS};
use crate::layout::rows::QK4_0;
use crate::shared::q8r::ActPtrs;

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
    let m4 = _mm256_set1_epi8(0x0f);
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
            let col = s * Q8R_SB_COLS + b * QK4_0;
            let mut dot: [[__m256i; 2]; T] = std::array::from_fn(|t| {
                let bias = _mm256_set1_epi32(x.bias(t0 + t, s * 4 + b) >> 4);
                [bias, bias]
            });
            for k in 0..Q4R_BLOCK_LINES {
                let line = p.add(Q4R_SCALE_BYTES + Q4R_LINE * (Q4R_BLOCK_LINES * b + k));
                if pf {
                    _mm_prefetch::<_MM_HINT_T0>(line.wrapping_add(PF_DIST).cast());
                }
                let v = [
                    _mm256_load_si256(line.cast()),
                    _mm256_load_si256(line.add(32).cast()),
                ];
                let lo = v.map(|v| _mm256_and_si256(v, m4));
                let hi = v.map(|v| _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4));
                for t in 0..T {
                    let xl = _mm256_set1_epi32(x.quad(t0 + t, col + 4 * k));
                    let xh = _mm256_set1_epi32(x.quad(t0 + t, col + QK4_0 / 2 + 4 * k));
                    for h in 0..2 {
                        let p = _mm256_add_epi16(
                            _mm256_maddubs_epi16(lo[h], xl),
                            _mm256_maddubs_epi16(hi[h], xh),
                        );
                        dot[t][h] = _mm256_add_epi32(dot[t][h], _mm256_madd_epi16(p, ones));
                    }
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
fn lanes(a: [__m256; 2]) -> [f32; Q4R_ROWS] {
    let mut v = [0.0f32; Q4R_ROWS];
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
/// The CPU must support the set's features (avx2,fma,f16c); the shapes were checked
/// (`crate::layout::q4r::check_matmul`) and `rows` is not empty.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q4r(w: &Q4R, x: &Q8Acts, n_tok: usize, rows: Range<usize>, out: &mut [f32]) {
    let zero = [_mm256_setzero_ps(); 2];
    crate::shared::group_walk::group_walk!(
        Q4R,
        Q8Acts,
        ActPtrs,
        Q4R_ROWS,
        Q4R_SB_BYTES,
        sb,
        lanes,
        zero,
        [1, 2, 3, 4],
        w,
        x,
        n_tok,
        rows,
        out
    );
}
