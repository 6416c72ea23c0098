//! NEON product of the grouped Q8_0 head (`crate::layout::q8r`): the `--head q8` output head
//! as one sequential stream of aligned lines per thread.
//!
//! A 64-byte line holds four quants of each of a group's 16 rows: four registers of four rows
//! each, multiplied by the token's four activation bytes repeated in every quad. Per register,
//! `SMULL`/`SMULL2` make the 16 byte products in i16 (|w x| <= 128 * 127, x never -128),
//! `ADDP` adds the neighbours (a row's products 0+1, 2+3, each pair within i16) and `SADALP`
//! adds the pairs into one i32 lane per row. After a block's eight lines each lane is the
//! row's exact block dot, and takes the scalar reference's steps: `d = d_w * d_x`,
//! `p = d * dot`, `acc = acc + p`, rounded separately (`FMUL`, `FMUL`, `FADD`; no `FMLA`), so
//! the result is the reference's, bit for bit.

use std::arch::aarch64::*;
use std::ops::Range;

use crate::aarch64::asm::prefetch_l1;
use crate::aarch64::half::f16x8_to_f32;
use crate::layout::q8r::{Q8Acts, Q8R, Q8R_LINE, Q8R_ROWS, Q8R_SB_COLS, Q8R_SCALE_BYTES};
use crate::layout::rows::QK8_0;
use crate::shared::q8r::{ActPtrs, q8r_walk};

/// How far ahead of the line in use the stream is prefetched, in bytes.
const PF_DIST: usize = 4096;

/// One super-block of a group (`p`) against tokens `t0..t0 + T`, added to `acc` (rows 0-3,
/// 4-7, 8-11, 12-15 of each token); with `pf`, a prefetch for each of its lines `PF_DIST`
/// ahead.
///
/// # Safety
/// The super-block is readable; the tokens are below the activations' capacity and `s`
/// below their super-blocks.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn sb<const T: usize>(
    p: *const u8,
    x: ActPtrs,
    t0: usize,
    s: usize,
    acc: &mut [[float32x4_t; 4]; T],
    pf: bool,
) {
    // SAFETY: every load lies inside the super-block or the tokens' activations (the
    // caller's guarantees); NEON is part of every AArch64 target.
    unsafe {
        if pf {
            prefetch_l1(p.wrapping_add(PF_DIST));
            prefetch_l1(p.wrapping_add(PF_DIST + 64));
        }
        for b in 0..4 {
            let sc = vld1q_u16_x2(p.add(32 * b).cast());
            let (lo, hi) = (f16x8_to_f32(sc.0), f16x8_to_f32(sc.1));
            let dw = [lo[0], lo[1], hi[0], hi[1]];
            let col = s * Q8R_SB_COLS + b * QK8_0;
            let mut dot = [[vdupq_n_s32(0); 4]; T];
            for k in 0..8 {
                let line = p.add(Q8R_SCALE_BYTES + Q8R_LINE * (8 * b + k));
                if pf {
                    prefetch_l1(line.wrapping_add(PF_DIST));
                }
                let w = vld1q_s8_x4(line.cast());
                let w = [w.0, w.1, w.2, w.3];
                for t in 0..T {
                    let xb = vreinterpretq_s8_s32(vld1q_dup_s32(x.at(t0 + t, col + 4 * k).cast()));
                    for q in 0..4 {
                        let lo = vmull_s8(vget_low_s8(w[q]), vget_low_s8(xb));
                        let pairs = vpaddq_s16(lo, vmull_high_s8(w[q], xb));
                        dot[t][q] = vpadalq_s16(dot[t][q], pairs);
                    }
                }
            }
            for t in 0..T {
                let dx = vdupq_n_f32(x.scale(t0 + t, s * 4 + b));
                for q in 0..4 {
                    let d = vmulq_f32(dw[q], dx);
                    let p = vmulq_f32(d, vcvtq_f32_s32(dot[t][q]));
                    acc[t][q] = vaddq_f32(acc[t][q], p);
                }
            }
        }
    }
}

/// A token's 16 row sums.
#[inline]
#[target_feature(enable = "neon")]
fn lanes(a: [float32x4_t; 4]) -> [f32; Q8R_ROWS] {
    let mut v = [0.0f32; Q8R_ROWS];
    // SAFETY: `v` holds 16 floats.
    unsafe { vst1q_f32_x4(v.as_mut_ptr(), float32x4x4_t(a[0], a[1], a[2], a[3])) };
    v
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support NEON; the shapes were checked (`crate::layout::q8r::check_matmul`)
/// and `rows` is not empty.
#[target_feature(enable = "neon")]
pub unsafe fn matmul_q8r(w: &Q8R, x: &Q8Acts, n_tok: usize, rows: Range<usize>, out: &mut [f32]) {
    let zero = [vdupq_n_f32(0.0); 4];
    q8r_walk!(sb, lanes, zero, [1, 2], w, x, n_tok, rows, out);
}
