//! Q4_0 x Q8_0 products (the `--head q4_0` output head), for one token (decode) or a few
//! (batched decode), written once over the dot step. They give the scalar reference's bits
//! (`scalar/q4q8.rs`): a block's codes `nibble - 8` are signed bytes in element order (low
//! nibbles, then high), [`QuadStep::quads`] sums four consecutive products into each i32
//! lane, so the 16 low codes give lanes 0..4 and the 16 high codes lanes 4..8 of the
//! reference; each is converted and fused-multiply-added into its own accumulator, and the
//! two accumulators are summed in the reference's tree at the end.
//!
//! Tiles of 4 weight rows x 2 tokens (`crate::aarch64::rows`): every token meets a group of
//! rows while it is in L1, so the weights are streamed once for the whole batch.

use std::arch::aarch64::*;
use std::marker::PhantomData;
use std::ops::Range;

use crate::aarch64::asm::sdot;
use crate::aarch64::int_dot::{NeonStep, SdotStep};
use crate::aarch64::rows::{Tile, f16_lanes, lane, walk};
use crate::extent::holds;
use crate::layout::rows::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK4_0};

/// Four i32 lanes from 16 byte pairs, lane `k` the sum of products `4k..4k + 4`: the
/// grouping of the reference's lanes (the `DotStep::dot` of NEON groups differently).
pub(crate) trait QuadStep: Copy {
    /// The lanes of `a` times `b`, `a` within -8..=7 (a code), `b` any signed byte.
    ///
    /// # Safety
    /// The CPU has the step's features.
    unsafe fn quads(a: int8x16_t, b: int8x16_t) -> int32x4_t;
}

impl QuadStep for NeonStep {
    #[inline(always)]
    unsafe fn quads(a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // A product is at most 8 x 128 in magnitude, so a pair of them fits an i16 lane.
        // SAFETY: register arithmetic in NEON, which every AArch64 target has.
        unsafe {
            let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
            let hi = vmull_high_s8(a, b);
            vpaddlq_s16(vpaddq_s16(lo, hi))
        }
    }
}

impl QuadStep for SdotStep {
    #[inline(always)]
    unsafe fn quads(a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: the caller guarantees FEAT_DotProd.
        unsafe { sdot(vdupq_n_s32(0), a, b) }
    }
}

/// The reference's sum of the eight lanes `lo` (0..4) and `hi` (4..8).
#[inline(always)]
fn lane_total(lo: float32x4_t, hi: float32x4_t) -> f32 {
    // SAFETY: NEON is in the AArch64 base ISA and every caller's features.
    unsafe {
        let s = vaddq_f32(lo, hi);
        let p = vadd_f32(vget_low_f32(s), vget_high_f32(s));
        vget_lane_f32::<0>(p) + vget_lane_f32::<1>(p)
    }
}

/// Q4_0 x Q8_0 dots of `R` weight rows with `T` activation rows of `nb` blocks.
///
/// # Safety
/// `S`'s features; each `w[r]` points at `nb` readable Q4_0 blocks, each `x[t]` at `nb`
/// Q8_0 blocks.
#[inline(always)]
unsafe fn dots<S: QuadStep, const R: usize, const T: usize>(
    w: [*const u8; R],
    x: [*const u8; T],
    nb: usize,
) -> [[f32; T]; R] {
    // SAFETY: block b is below nb for every row and token; `S`'s features, NEON among them
    // (caller).
    unsafe {
        let mut acc = [[[vdupq_n_f32(0.0); 2]; T]; R];
        for b in 0..nb {
            let (wo, xo) = (b * Q4_0_BLOCK_BYTES, b * Q8_0_BLOCK_BYTES);
            let dw = f16_lanes(w, wo);
            let dx = f16_lanes(x, xo);
            // Lane r of d[t]: the scale of row r times the scale of token t.
            let d: [float32x4_t; T] = std::array::from_fn(|t| vmulq_f32(dw, lane(dx, t)));
            let xq = x.map(|p| vld1q_s8_x2(p.add(xo + 2).cast()));
            // Loops, not closures, around the step: a closure would not inherit the entry's
            // features.
            for r in 0..R {
                let v = vld1q_u8(w[r].add(wo + 2));
                let eight = vdupq_n_s8(8);
                let lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), eight);
                let hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(v)), eight);
                for t in 0..T {
                    let dd = lane(d[t], r);
                    let p0 = vcvtq_f32_s32(S::quads(lo, xq[t].0));
                    let p1 = vcvtq_f32_s32(S::quads(hi, xq[t].1));
                    acc[r][t][0] = vfmaq_f32(acc[r][t][0], p0, dd);
                    acc[r][t][1] = vfmaq_f32(acc[r][t][1], p1, dd);
                }
            }
        }
        acc.map(|a| a.map(|[lo, hi]| lane_total(lo, hi)))
    }
}

/// The [`Tile`] of this kernel: rows of `nb` blocks, dotted with `S`.
#[derive(Clone, Copy)]
struct Rows<S> {
    nb: usize,
    step: PhantomData<S>,
}

impl<S: QuadStep> Tile for Rows<S> {
    const ROWS: usize = 4;
    const TOKENS: usize = 2;

    #[inline(always)]
    unsafe fn tile<const R: usize, const T: usize>(
        self,
        w: [*const u8; R],
        x: [*const u8; T],
    ) -> [[f32; T]; R] {
        // SAFETY: forwarded from the caller (`S`'s features, whole rows).
        unsafe { dots::<S, R, T>(w, x, self.nb) }
    }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU has `S`'s features, and the caller's `#[target_feature]` enables them. Shapes are
/// checked here.
#[inline(always)]
pub(crate) unsafe fn matmul_q4_0_q8_0<S: QuadStep>(
    w: &[u8],
    row_len: usize,
    xq: &[u8],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let nb = row_len / QK4_0;
    let (rb, xrb) = (nb * Q4_0_BLOCK_BYTES, nb * Q8_0_BLOCK_BYTES);
    assert!(
        holds(w.len(), rows.end, rb)
            && holds(xq.len(), n_tok, xrb)
            && holds(out.len(), n_tok, rows.len())
    );
    let tile = Rows::<S> {
        nb,
        step: PhantomData,
    };
    // SAFETY: `S`'s features (caller); shapes checked above.
    unsafe { walk(tile, w.as_ptr(), rb, xq.as_ptr(), xrb, n_tok, rows, out) }
}
