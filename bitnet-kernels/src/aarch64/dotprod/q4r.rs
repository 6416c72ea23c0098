//! NEON + DotProd product of the grouped Q4_0 head (`crate::layout::q4r`): `neon/q4r.rs`'s
//! walk with `SDOT` by element for the integer core. A line's four registers (four rows of
//! four bytes each) give eight code registers, their low nibbles (four columns of each row)
//! and high nibbles (the four columns 16 further), taken unsigned (0..=15, one `AND` or
//! `USHR` a register). Each takes one `SDOT` against the token's four activation bytes of its
//! columns, read as one quad of the block's first or last 16 activation bytes: lane `i` gains
//! row `i`'s four products. A block's lanes start from the activations' `-8 * sum(x)` (their
//! `-128 * sum(x)` over 16), so that they end as the exact dots of the codes `nibble - 8`
//! (at most 32 * 15 * 127 from it: no overflow). The float steps are the scalar reference's
//! (no `FMLA`), so the result is the reference's, bit for bit.

use std::arch::aarch64::*;
use std::ops::Range;

use crate::aarch64::asm::{prefetch_l1, sdot_lane};
use crate::aarch64::half::f16x8_to_f32;
use crate::layout::q4r::{Q4R, Q4R_BLOCK_LINES, Q4R_LINE, Q4R_ROWS, Q4R_SCALE_BYTES};
use crate::layout::q8r::{Q8Acts, Q8R_SB_COLS};
use crate::layout::rows::QK4_0;
use crate::shared::group_walk::group_walk;
use crate::shared::q8r::ActPtrs;

/// How far ahead of the line in use the stream is prefetched, in bytes.
const PF_DIST: usize = 4096;

/// `acc[q]` plus the dots of `lo[q]`'s four rows with quad `L` of `xl` and of `hi[q]`'s with
/// quad `L` of `xh`.
///
/// # Safety
/// The CPU must have FEAT_DotProd.
#[inline(always)]
unsafe fn line<const L: i32>(
    acc: &mut [int32x4_t; 4],
    lo: &[int8x16_t; 4],
    hi: &[int8x16_t; 4],
    xl: int8x16_t,
    xh: int8x16_t,
) {
    for q in 0..4 {
        // SAFETY: the caller guarantees FEAT_DotProd.
        acc[q] = unsafe { sdot_lane::<L>(sdot_lane::<L>(acc[q], lo[q], xl), hi[q], xh) };
    }
}

/// One super-block of a group (`p`) against tokens `t0..t0 + T`, added to `acc` (rows 0-3,
/// 4-7, 8-11, 12-15 of each token); with `pf`, a prefetch for each of its lines `PF_DIST`
/// ahead.
///
/// # Safety
/// The CPU must have FEAT_DotProd; the super-block is readable; the tokens are below the
/// activations' capacity and `s` below their super-blocks.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn sb<const T: usize>(
    p: *const u8,
    x: ActPtrs,
    t0: usize,
    s: usize,
    acc: &mut [[float32x4_t; 4]; T],
    pf: bool,
) {
    // SAFETY: every load lies inside the super-block or the tokens' activations (the
    // caller's guarantees); this function enables NEON and DotProd.
    unsafe {
        if pf {
            prefetch_l1(p.wrapping_add(PF_DIST));
            prefetch_l1(p.wrapping_add(PF_DIST + 64));
        }
        let low = vdupq_n_u8(0x0F);
        for b in 0..4 {
            let sc = vld1q_u16_x2(p.add(32 * b).cast());
            let (lo, hi) = (f16x8_to_f32(sc.0), f16x8_to_f32(sc.1));
            let dw = [lo[0], lo[1], hi[0], hi[1]];
            let col = s * Q8R_SB_COLS + b * QK4_0;
            // The block's activations: bytes 0..16 (the low nibbles' columns, quad k for
            // line k) and 16..32 (the high nibbles'); each lane starts at `-8 * sum(x)`.
            let mut xs = [[vdupq_n_s8(0); 2]; T];
            let mut dot = [[vdupq_n_s32(0); 4]; T];
            for t in 0..T {
                xs[t] = [
                    vld1q_s8(x.at(t0 + t, col)),
                    vld1q_s8(x.at(t0 + t, col + QK4_0 / 2)),
                ];
                dot[t] = [vdupq_n_s32(x.bias(t0 + t, s * 4 + b) >> 4); 4];
            }
            for k in 0..Q4R_BLOCK_LINES {
                let at = p.add(Q4R_SCALE_BYTES + Q4R_LINE * (Q4R_BLOCK_LINES * b + k));
                if pf {
                    prefetch_l1(at.wrapping_add(PF_DIST));
                }
                let w = vld1q_u8_x4(at);
                let w = [w.0, w.1, w.2, w.3];
                let lo_codes = w.map(|v| vreinterpretq_s8_u8(vandq_u8(v, low)));
                let hi_codes = w.map(|v| vreinterpretq_s8_u8(vshrq_n_u8::<4>(v)));
                for t in 0..T {
                    let [xl, xh] = xs[t];
                    match k {
                        0 => line::<0>(&mut dot[t], &lo_codes, &hi_codes, xl, xh),
                        1 => line::<1>(&mut dot[t], &lo_codes, &hi_codes, xl, xh),
                        2 => line::<2>(&mut dot[t], &lo_codes, &hi_codes, xl, xh),
                        _ => line::<3>(&mut dot[t], &lo_codes, &hi_codes, xl, xh),
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
#[target_feature(enable = "neon,dotprod")]
fn lanes(a: [float32x4_t; 4]) -> [f32; Q4R_ROWS] {
    let mut v = [0.0f32; Q4R_ROWS];
    // SAFETY: `v` holds 16 floats.
    unsafe { vst1q_f32_x4(v.as_mut_ptr(), float32x4x4_t(a[0], a[1], a[2], a[3])) };
    v
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support NEON and DotProd; the shapes were checked
/// (`crate::layout::q4r::check_matmul`) and `rows` is not empty.
#[target_feature(enable = "neon,dotprod")]
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
