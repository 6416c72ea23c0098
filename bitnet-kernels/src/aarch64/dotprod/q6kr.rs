//! NEON + DotProd product of the grouped Q6_K head (`crate::layout::q6kr`): `neon/q6kr.rs`'s
//! walk and unpacking with `SDOT` by element for the integer core. A code line's four
//! registers (four rows of four codes each) take one `SDOT` each against the token's four
//! activation bytes of that line, read as one quad of the sub-block's 16-byte activation
//! register: lane `i` gains row `i`'s four products. Codes are 0..63, valid signed bytes, so
//! the lanes start at `-32 * bsum` to hold `sum (code - 32) a`, and `MLA` by the rows'
//! sub-block scales adds them into the block's lanes, all exact i32. The float steps are the
//! scalar reference's (no `FMLA`), so the result is the reference's, bit for bit.

use std::arch::aarch64::*;
use std::ops::Range;

use crate::aarch64::asm::{prefetch_l1, sdot_lane};
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

/// `acc` plus, per i32 lane (row `i` of `c`'s four), the products of the four code lines
/// with their activation quads, quad `i` of `x` for code line `i`.
///
/// # Safety
/// The CPU must have FEAT_DotProd.
#[inline(always)]
unsafe fn four_lines(acc: int32x4_t, c: &[int8x16_t; 4], x: int8x16_t) -> int32x4_t {
    // SAFETY: the caller guarantees FEAT_DotProd.
    unsafe {
        let acc = sdot_lane::<0>(acc, c[0], x);
        let acc = sdot_lane::<1>(acc, c[1], x);
        let acc = sdot_lane::<2>(acc, c[2], x);
        sdot_lane::<3>(acc, c[3], x)
    }
}

/// Rows `4 Q..4 Q + 4` of the sub-block whose lines start at `sub` (its 16 scales `sc`)
/// against tokens whose activations are `xq` and lanes start at `bias` (`-32 * bsum`), added
/// to their lanes in `dot`. `Q` is a constant so that every accumulator stays in a register
/// (a loop over it would index `dot` through memory).
///
/// # Safety
/// The CPU must have FEAT_DotProd; the sub-block's 192 bytes are readable.
#[inline(always)]
unsafe fn rows4<const T: usize, const Q: usize>(
    sub: *const u8,
    sc: &[int16x8_t; 2],
    xq: &[int8x16_t; T],
    bias: &[int32x4_t; T],
    dot: &mut [[int32x4_t; 4]; T],
) {
    // SAFETY: the caller's guarantees.
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
            let d = four_lines(bias[t], &c, xq[t]);
            dot[t][Q] = vmlaq_s32(dot[t][Q], d, s);
        }
    }
}

/// One block of a group (`p`) against tokens `t0..t0 + T`, added to `acc` (rows 0-3, 4-7,
/// 8-11, 12-15 of each token); with `pf`, a prefetch for each of its lines `PF_DIST` ahead.
///
/// # Safety
/// The CPU must have FEAT_DotProd; the block is readable; the tokens are below the
/// activations' capacity and `b` below their blocks.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn sb<const T: usize>(
    p: *const u8,
    x: Q8kPtrs,
    t0: usize,
    b: usize,
    acc: &mut [[float32x4_t; 4]; T],
    pf: bool,
) {
    // SAFETY: every load lies inside the block or the tokens' activations (the caller's
    // guarantees); prefetches never fault; this function enables NEON and DotProd.
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
            let mut xq = [vdupq_n_s8(0); T];
            let mut bias = [vdupq_n_s32(0); T];
            for t in 0..T {
                xq[t] = vld1q_s8(x.codes(t0 + t, b).add(Q8K_SUB * j));
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
#[target_feature(enable = "neon,dotprod")]
fn lanes(a: [float32x4_t; 4]) -> [f32; Q6KR_ROWS] {
    let mut v = [0.0f32; Q6KR_ROWS];
    // SAFETY: `v` holds 16 floats.
    unsafe { vst1q_f32_x4(v.as_mut_ptr(), float32x4x4_t(a[0], a[1], a[2], a[3])) };
    v
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support NEON and DotProd; the shapes were checked
/// (`crate::layout::q6kr::check_matmul`) and `rows` is not empty.
#[target_feature(enable = "neon,dotprod")]
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
        [1, 2, 3],
        w,
        x,
        n_tok,
        rows,
        out
    );
}
