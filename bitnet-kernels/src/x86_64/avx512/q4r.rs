//! AVX-512 product of the grouped Q4_0 head (`crate::layout::q4r`): as `q8r.rs`, a whole
//! 64-byte line in one register, whose low nibbles (`x & 0x0f`) are four columns of each of
//! the group's 16 rows and whose high nibbles (`(x >> 4) & 0x0f`) the four columns 16 further.
//!
//! The integer core is `vpdpbusd` over the unsigned nibbles: a lane gains
//! `sum nib x = sum (nib - 8) x + 8 sum x`, so a block's lanes start from the activations'
//! `-8 * sum(x)` of that block (their `-128 * sum(x)` shifted right by 4, exact). Low and high
//! nibbles go to two chains (one token waits on neither for long), joined before the
//! conversion. Then the scalar reference's float steps per lane (no FMA): its bits.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::layout::q4r::{Q4R, Q4R_BLOCK_LINES, Q4R_LINE, Q4R_ROWS, Q4R_SB_BYTES, Q4R_SCALE_BYTES};
use crate::layout::q8r::{Q8Acts, Q8R_SB_COLS};
use crate::layout::rows::QK4_0;
use crate::shared::q8r::ActPtrs;

/// How far ahead of the line in use the stream is prefetched, in bytes.
const PF_DIST: usize = 4096;

/// One super-block of a group (`p`) against tokens `t0..t0 + T`, added to `acc`; with `pf`,
/// a prefetch for each of its lines `PF_DIST` ahead.
///
/// # Safety
/// The super-block is readable and 64-byte aligned; the tokens are below the activations'
/// capacity and `s` below their super-blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn sb<const T: usize>(
    p: *const u8,
    x: ActPtrs,
    t0: usize,
    s: usize,
    acc: &mut [__m512; T],
    pf: bool,
) {
    let m4 = _mm512_set1_epi8(0x0f);
    // SAFETY: every load lies inside the super-block or the tokens' activations, aligned as
    // the layout says (the caller's guarantees); prefetches never fault.
    unsafe {
        if pf {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PF_DIST).cast());
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PF_DIST + 64).cast());
        }
        for b in 0..4 {
            let dw = _mm512_cvtph_ps(_mm256_load_si256(p.add(32 * b).cast()));
            let col = s * Q8R_SB_COLS + b * QK4_0;
            let mut dot: [[__m512i; T]; 2] = [
                std::array::from_fn(|t| _mm512_set1_epi32(x.bias(t0 + t, s * 4 + b) >> 4)),
                [_mm512_setzero_si512(); T],
            ];
            for k in 0..Q4R_BLOCK_LINES {
                let line = p.add(Q4R_SCALE_BYTES + Q4R_LINE * (Q4R_BLOCK_LINES * b + k));
                if pf {
                    _mm_prefetch::<_MM_HINT_T0>(line.wrapping_add(PF_DIST).cast());
                }
                let v = _mm512_load_si512(line.cast());
                let lo = _mm512_and_si512(v, m4);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
                for t in 0..T {
                    let xl = _mm512_set1_epi32(x.quad(t0 + t, col + 4 * k));
                    let xh = _mm512_set1_epi32(x.quad(t0 + t, col + QK4_0 / 2 + 4 * k));
                    dot[0][t] = _mm512_dpbusd_epi32(dot[0][t], lo, xl);
                    dot[1][t] = _mm512_dpbusd_epi32(dot[1][t], hi, xh);
                }
            }
            for t in 0..T {
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(x.scale(t0 + t, s * 4 + b)));
                let dot = _mm512_add_epi32(dot[0][t], dot[1][t]);
                let p = _mm512_mul_ps(d, _mm512_cvtepi32_ps(dot));
                acc[t] = _mm512_add_ps(acc[t], p);
            }
        }
    }
}

/// A token's 16 row sums.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
fn lanes(a: __m512) -> [f32; Q4R_ROWS] {
    let mut v = [0.0f32; Q4R_ROWS];
    // SAFETY: `v` holds 16 floats.
    unsafe { _mm512_storeu_ps(v.as_mut_ptr(), a) };
    v
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support the AVX-512 set; the shapes were checked
/// (`crate::layout::q4r::check_matmul`) and `rows` is not empty.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub unsafe fn matmul_q4r(w: &Q4R, x: &Q8Acts, n_tok: usize, rows: Range<usize>, out: &mut [f32]) {
    let zero = _mm512_setzero_ps();
    crate::shared::group_walk::group_walk!(
        Q4R,
        Q8Acts,
        ActPtrs,
        Q4R_ROWS,
        Q4R_SB_BYTES,
        sb,
        lanes,
        zero,
        [1, 2, 3, 4, 5, 6, 7, 8],
        w,
        x,
        n_tok,
        rows,
        out
    );
}
