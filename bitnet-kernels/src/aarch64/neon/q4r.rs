//! NEON product of the grouped Q4_0 head (`crate::layout::q4r`): `q8r.rs`'s walk over lines
//! of nibbles.
//!
//! A 64-byte line holds four bytes of each of a group's 16 rows: four registers of four rows
//! each, and each register two registers of codes `nibble - 8` (-8..=7), its low nibbles
//! (four columns of each row) and its high nibbles (the four columns 16 further), each
//! multiplied by the token's four activation bytes of those columns repeated in every quad.
//! `SMLAL`/`SMLAL2` add the byte products into i16 lanes, one per row and byte of a quad,
//! over a block's four lines and both nibbles (at most 8 * 8 * 127 = 8,128 a lane); at the
//! block's end `ADDP` adds the neighbours (within i16) and `SADDLP` gives one i32 lane per
//! row, the row's exact block dot. Then the scalar reference's float steps:
//! `d = d_w * d_x`, `p = d * dot`, `acc = acc + p`, rounded separately (`FMUL`, `FMUL`,
//! `FADD`; no `FMLA`), so the result is the reference's, bit for bit.
//!
//! The codes are made signed here (`SUB` of 8), where the `dotprod` kernel multiplies the
//! nibbles as they are and starts from the activations' `-8 * sum(x)`: with operands known
//! to be 0..=15, LLVM turns the sign-extending multiplies into zero-extends and narrows
//! (`UXTL` + `XTN` around every `SMLAL`), more instructions than the two `SUB`s save.

use std::arch::aarch64::*;
use std::ops::Range;

use crate::aarch64::asm::prefetch_l1;
use crate::aarch64::half::f16x8_to_f32;
use crate::layout::q4r::{Q4R, Q4R_BLOCK_LINES, Q4R_LINE, Q4R_ROWS, Q4R_SCALE_BYTES};
use crate::layout::q8r::{Q8Acts, Q8R_SB_COLS};
use crate::layout::rows::QK4_0;
use crate::shared::group_walk::group_walk;
use crate::shared::q8r::ActPtrs;

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
        let (low, eight) = (vdupq_n_u8(0x0F), vdupq_n_s8(8));
        for b in 0..4 {
            let sc = vld1q_u16_x2(p.add(32 * b).cast());
            let (lo, hi) = (f16x8_to_f32(sc.0), f16x8_to_f32(sc.1));
            let dw = [lo[0], lo[1], hi[0], hi[1]];
            let col = s * Q8R_SB_COLS + b * QK4_0;
            // Per token and register: the i16 sums of rows 0-1 and 2-3 of its quads.
            let mut dot = [[[vdupq_n_s16(0); 2]; 4]; T];
            for k in 0..Q4R_BLOCK_LINES {
                let line = p.add(Q4R_SCALE_BYTES + Q4R_LINE * (Q4R_BLOCK_LINES * b + k));
                if pf {
                    prefetch_l1(line.wrapping_add(PF_DIST));
                }
                let w = vld1q_u8_x4(line);
                let w = [w.0, w.1, w.2, w.3];
                let lo_codes = w.map(|v| vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, low)), eight));
                let hi_codes = w.map(|v| vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(v)), eight));
                for t in 0..T {
                    let xl = vreinterpretq_s8_s32(vld1q_dup_s32(x.at(t0 + t, col + 4 * k).cast()));
                    let xh = vreinterpretq_s8_s32(vld1q_dup_s32(
                        x.at(t0 + t, col + QK4_0 / 2 + 4 * k).cast(),
                    ));
                    for q in 0..4 {
                        let [d01, d23] = &mut dot[t][q];
                        *d01 = vmlal_s8(*d01, vget_low_s8(lo_codes[q]), vget_low_s8(xl));
                        *d23 = vmlal_high_s8(*d23, lo_codes[q], xl);
                        *d01 = vmlal_s8(*d01, vget_low_s8(hi_codes[q]), vget_low_s8(xh));
                        *d23 = vmlal_high_s8(*d23, hi_codes[q], xh);
                    }
                }
            }
            for t in 0..T {
                let dx = vdupq_n_f32(x.scale(t0 + t, s * 4 + b));
                for q in 0..4 {
                    let [d01, d23] = dot[t][q];
                    let dot = vpaddlq_s16(vpaddq_s16(d01, d23));
                    let d = vmulq_f32(dw[q], dx);
                    let p = vmulq_f32(d, vcvtq_f32_s32(dot));
                    acc[t][q] = vaddq_f32(acc[t][q], p);
                }
            }
        }
    }
}

/// A token's 16 row sums.
#[inline]
#[target_feature(enable = "neon")]
fn lanes(a: [float32x4_t; 4]) -> [f32; Q4R_ROWS] {
    let mut v = [0.0f32; Q4R_ROWS];
    // SAFETY: `v` holds 16 floats.
    unsafe { vst1q_f32_x4(v.as_mut_ptr(), float32x4x4_t(a[0], a[1], a[2], a[3])) };
    v
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support NEON; the shapes were checked (`crate::layout::q4r::check_matmul`)
/// and `rows` is not empty.
#[target_feature(enable = "neon")]
pub unsafe fn matmul_q4r(w: &Q4R, x: &Q8Acts, n_tok: usize, rows: Range<usize>, out: &mut [f32]) {
    let zero = [vdupq_n_f32(0.0); 4];
    group_walk!(
        crate::layout::q4r::Q4R,
        crate::layout::q8r::Q8Acts,
        crate::shared::q8r::ActPtrs,
        crate::layout::q4r::Q4R_ROWS,
        crate::layout::q4r::Q4R_SB_BYTES,
        sb,
        lanes,
        zero,
        [1, 2],
        w,
        x,
        n_tok,
        rows,
        out
    );
}
