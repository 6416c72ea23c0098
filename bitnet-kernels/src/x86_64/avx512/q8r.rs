//! AVX-512 product of the grouped Q8_0 head (`crate::layout::q8r`), as `avx2/q8r.rs` with a
//! whole 64-byte line (four quants of each of a group's 16 rows) in one register.
//!
//! The integer core is `vpdpbusd` over unsigned weights: `w ^ 0x80` is `w + 128` as a byte,
//! so each lane gains `sum (w + 128) x = sum w x + 128 sum x`, and a block's lanes start from
//! the activations' `-128 * sum(x)` of that block, which leaves the exact block dot. Then the
//! scalar reference's steps per lane (`d = d_w * d_x`, `p = d * dot`, `acc = acc + p`, no
//! FMA): the result is the reference's, bit for bit.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::layout::q8r::{Q8Acts, Q8R, Q8R_LINE, Q8R_ROWS, Q8R_SB_COLS, Q8R_SCALE_BYTES};
use crate::layout::rows::QK8_0;
use crate::shared::q8r::{ActPtrs, q8r_walk};

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
    let flip = _mm512_set1_epi8(0x80u8 as i8);
    // SAFETY: every load lies inside the super-block or the tokens' activations, aligned as
    // the layout says (the caller's guarantees); prefetches never fault.
    unsafe {
        if pf {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PF_DIST).cast());
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PF_DIST + 64).cast());
        }
        for b in 0..4 {
            let dw = _mm512_cvtph_ps(_mm256_load_si256(p.add(32 * b).cast()));
            let col = s * Q8R_SB_COLS + b * QK8_0;
            // Two chains of `vpdpbusd` (even and odd lines), joined before the conversion:
            // integer sums, so the same bits, and half the latency chain one token waits on.
            let mut dot: [[__m512i; T]; 2] = [
                std::array::from_fn(|t| _mm512_set1_epi32(x.bias(t0 + t, s * 4 + b))),
                [_mm512_setzero_si512(); T],
            ];
            for k in 0..8 {
                let line = p.add(Q8R_SCALE_BYTES + Q8R_LINE * (8 * b + k));
                if pf {
                    _mm_prefetch::<_MM_HINT_T0>(line.wrapping_add(PF_DIST).cast());
                }
                let wu = _mm512_xor_si512(_mm512_load_si512(line.cast()), flip);
                for t in 0..T {
                    let xb = _mm512_set1_epi32(x.quad(t0 + t, col + 4 * k));
                    dot[k % 2][t] = _mm512_dpbusd_epi32(dot[k % 2][t], wu, xb);
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
fn lanes(a: __m512) -> [f32; Q8R_ROWS] {
    let mut v = [0.0f32; Q8R_ROWS];
    // SAFETY: `v` holds 16 floats.
    unsafe { _mm512_storeu_ps(v.as_mut_ptr(), a) };
    v
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support the AVX-512 set; the shapes were checked
/// (`crate::layout::q8r::check_matmul`) and `rows` is not empty.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub unsafe fn matmul_q8r(w: &Q8R, x: &Q8Acts, n_tok: usize, rows: Range<usize>, out: &mut [f32]) {
    let zero = _mm512_setzero_ps();
    q8r_walk!(
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
