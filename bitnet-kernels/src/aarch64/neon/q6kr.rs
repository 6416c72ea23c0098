//! NEON product of the grouped Q6_K head (`crate::layout::q6kr`): the `--head q6_k` output
//! head (or a file's Q6_K one) as one sequential stream of aligned lines per thread, with no
//! horizontal sum and no per-row scale shuffle.
//!
//! A sub-block's three lines give four code lines (four columns of all 16 rows each), taken
//! a register (four rows) at a time so that the codes, the tokens' activations and their
//! accumulators all stay in registers: `USHR` and two `AND`s put each half of the high bits
//! where a shift-and-insert by 4 (`SLI`, and `SRI`, which LLVM emits as `AND` + `USRA`)
//! puts them over a nibble, about nine instructions for the four code registers (byte
//! shifts, so nothing bleeds from a neighbour). A code is
//! 0..63 and an activation never -128, so a product is at most 63 * 127: `SMULL` + `SMLAL`
//! (and `SMULL2` + `SMLAL2`) put two code lines' products of a row into each i16 lane,
//! `ADDP` adds the neighbours (four products, within i16) and `SADALP` adds them into one
//! i32 lane per row, on top of `-32 * bsum`, so the lane is `sum (code - 32) a` without
//! touching the codes. `MLA` by the 16 rows' sub-block scales (sign-extended once per
//! sub-block) adds the sub-block into the block's lanes. All of that is exact i32, so the
//! lanes are the reference's block dots; then the reference's float steps per lane:
//! `d = d_w * d_a`, `p = d * dot`, `acc = acc + p`, rounded separately (`FMUL`, `FMUL`,
//! `FADD`; no `FMLA`), so the result is the reference's, bit for bit.

use std::arch::aarch64::*;
use std::arch::asm;
use std::ops::Range;

use crate::aarch64::asm::prefetch_l1;
use crate::aarch64::half::f16x8_to_f32;
use crate::layout::q6kr::{
    Q6KR, Q6KR_BLOCK_BYTES, Q6KR_CODES, Q6KR_ROWS, Q6KR_SCALES, Q6KR_SUB_BYTES,
};
use crate::layout::q8k::{Q8K_SUB, Q8K_SUMS, Q8KActs};
use crate::shared::group_walk::group_walk;
use crate::shared::q8k::Q8kPtrs;

/// How far ahead of the line in use the stream is prefetched, in bytes.
const PF_DIST: usize = 4096;

/// Register `q` (rows `4 q..4 q + 4`) of the four code lines (columns `4 i..4 i + 4`,
/// `i < 4`) of the sub-block whose three lines start at `sub`, as signed bytes (0..63).
///
/// # Safety
/// The sub-block's 192 bytes are readable.
#[inline(always)]
unsafe fn code_regs(sub: *const u8, q: usize) -> [int8x16_t; 4] {
    const _: () = assert!(Q6KR_SUB_BYTES == 192);
    // SAFETY: inside the sub-block (the caller's guarantee); NEON is part of every AArch64
    // target and `LD1` has no alignment requirement.
    unsafe {
        let n0 = vld1q_u8(sub.add(16 * q));
        let n1 = vld1q_u8(sub.add(64 + 16 * q));
        let hb = vld1q_u8(sub.add(128 + 16 * q));
        // Bits 0-1 and 4-5: the high bits of code lines 0 and 2 (of 1 and 3 after the
        // shift), where `SLI`/`SRI` by 4 move them to bits 4-5 and nothing lands above.
        let m = vdupq_n_u8(0x33);
        let (h02, h13) = (vandq_u8(hb, m), vandq_u8(vshrq_n_u8::<2>(hb), m));
        [
            vreinterpretq_s8_u8(vsliq_n_u8::<4>(n0, h02)),
            vreinterpretq_s8_u8(vsliq_n_u8::<4>(n1, h13)),
            vreinterpretq_s8_u8(vsriq_n_u8::<4>(h02, n0)),
            vreinterpretq_s8_u8(vsriq_n_u8::<4>(h13, n1)),
        ]
    }
}

/// `v`, its value hidden from the optimizer (an empty `asm!`, no instruction). An activation
/// quad repeated four times is a splat LLVM can see through: it rewrites `SMULL2 c, x` as
/// `SMULL` of `c`'s upper half, which costs an `EXT` per code register.
#[inline(always)]
fn opaque(v: int8x16_t) -> int8x16_t {
    let mut r = v;
    // SAFETY: an empty template: no instruction, no memory, the register unchanged.
    unsafe {
        asm!(
            "/* {0:v} */",
            inout(vreg) r,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    r
}

/// `acc` plus, per i32 lane (row `i` of `c`'s four), the products of code lines `k`, `k + 1`
/// with their activation quads `x[k]`, `x[k + 1]` (repeated in every quad).
#[inline(always)]
fn two_lines(acc: int32x4_t, c: &[int8x16_t; 4], x: &[int8x16_t; 4], k: usize) -> int32x4_t {
    // At most 2 * 63 * 127 in an i16 lane after `SMLAL`, twice that after `ADDP`.
    // SAFETY: register arithmetic in NEON, which every AArch64 target has.
    unsafe {
        let lo = vmull_s8(vget_low_s8(c[k]), vget_low_s8(x[k]));
        let lo = vmlal_s8(lo, vget_low_s8(c[k + 1]), vget_low_s8(x[k + 1]));
        let hi = vmull_high_s8(c[k], x[k]);
        let hi = vmlal_high_s8(hi, c[k + 1], x[k + 1]);
        vpadalq_s16(acc, vpaddq_s16(lo, hi))
    }
}

/// Rows `4 Q..4 Q + 4` of the sub-block whose lines start at `sub` (its 16 scales `sc`)
/// against tokens whose activations are `xq` and lanes start at `bias` (`-32 * bsum`), added
/// to their lanes in `dot`. `Q` is a constant so that every accumulator stays in a register
/// (a loop over it would index `dot` through memory).
///
/// # Safety
/// The sub-block's 192 bytes are readable.
#[inline(always)]
unsafe fn rows4<const T: usize, const Q: usize>(
    sub: *const u8,
    sc: &[int16x8_t; 2],
    xq: &[[int8x16_t; 4]; T],
    bias: &[int32x4_t; T],
    dot: &mut [[int32x4_t; 4]; T],
) {
    // SAFETY: the caller's guarantees; NEON is part of every AArch64 target.
    unsafe {
        let c = code_regs(sub, Q);
        // Widened here rather than in the caller: four fewer registers held across the four
        // calls.
        let h = sc[Q / 2];
        let s = if Q.is_multiple_of(2) {
            vmovl_s16(vget_low_s16(h))
        } else {
            vmovl_high_s16(h)
        };
        for t in 0..T {
            let d = two_lines(two_lines(bias[t], &c, &xq[t], 0), &c, &xq[t], 2);
            dot[t][Q] = vmlaq_s32(dot[t][Q], d, s);
        }
    }
}

/// One block of a group (`p`) against tokens `t0..t0 + T`, added to `acc` (rows 0-3, 4-7,
/// 8-11, 12-15 of each token); with `pf`, a prefetch for each of its lines `PF_DIST` ahead.
///
/// # Safety
/// The block is readable; the tokens are below the activations' capacity and `b` below
/// their blocks.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn sb<const T: usize>(
    p: *const u8,
    x: Q8kPtrs,
    t0: usize,
    b: usize,
    acc: &mut [[float32x4_t; 4]; T],
    pf: bool,
) {
    // SAFETY: every load lies inside the block or the tokens' activations (the caller's
    // guarantees); prefetches never fault; NEON is part of every AArch64 target.
    unsafe {
        if pf {
            for l in 0..Q6KR_CODES / 64 {
                prefetch_l1(p.wrapping_add(PF_DIST + 64 * l));
            }
        }
        let mut dot = [[vdupq_n_s32(0); 4]; T];
        for j in 0..Q8K_SUMS {
            let sub = p.add(Q6KR_CODES + j * Q6KR_SUB_BYTES);
            if pf {
                for l in 0..3 {
                    prefetch_l1(sub.wrapping_add(PF_DIST + 64 * l));
                }
            }
            let sc = vld1q_s8(p.add(Q6KR_SCALES + Q6KR_ROWS * j).cast());
            let sc = [vmovl_s8(vget_low_s8(sc)), vmovl_high_s8(sc)];
            let mut xq = [[vdupq_n_s8(0); 4]; T];
            let mut bias = [vdupq_n_s32(0); T];
            for t in 0..T {
                let a = x.codes(t0 + t, b).add(Q8K_SUB * j);
                for (i, v) in xq[t].iter_mut().enumerate() {
                    *v = opaque(vreinterpretq_s8_s32(vld1q_dup_s32(a.add(4 * i).cast())));
                }
                bias[t] = vdupq_n_s32(-32 * i32::from(*x.sums(t0 + t, b).add(j)));
            }
            rows4::<T, 0>(sub, &sc, &xq, &bias, &mut dot);
            rows4::<T, 1>(sub, &sc, &xq, &bias, &mut dot);
            rows4::<T, 2>(sub, &sc, &xq, &bias, &mut dot);
            rows4::<T, 3>(sub, &sc, &xq, &bias, &mut dot);
        }
        let dw = vld1q_u16_x2(p.cast());
        let (lo, hi) = (f16x8_to_f32(dw.0), f16x8_to_f32(dw.1));
        let dw = [lo[0], lo[1], hi[0], hi[1]];
        for t in 0..T {
            let dx = vdupq_n_f32(x.scale(t0 + t, b));
            for q in 0..4 {
                let d = vmulq_f32(dw[q], dx);
                let p = vmulq_f32(d, vcvtq_f32_s32(dot[t][q]));
                acc[t][q] = vaddq_f32(acc[t][q], p);
            }
        }
    }
}

/// A token's 16 row sums.
#[inline]
#[target_feature(enable = "neon")]
fn lanes(a: [float32x4_t; 4]) -> [f32; Q6KR_ROWS] {
    let mut v = [0.0f32; Q6KR_ROWS];
    // SAFETY: `v` holds 16 floats.
    unsafe { vst1q_f32_x4(v.as_mut_ptr(), float32x4x4_t(a[0], a[1], a[2], a[3])) };
    v
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support NEON; the shapes were checked (`crate::layout::q6kr::check_matmul`)
/// and `rows` is not empty.
#[target_feature(enable = "neon")]
pub unsafe fn matmul_q6kr(
    w: &Q6KR,
    x: &Q8KActs,
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let zero = [vdupq_n_f32(0.0); 4];
    group_walk!(
        Q6KR,
        Q8KActs,
        Q8kPtrs,
        Q6KR_ROWS,
        Q6KR_BLOCK_BYTES,
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
