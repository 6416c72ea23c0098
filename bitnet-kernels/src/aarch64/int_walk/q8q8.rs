//! Q8_0 x Q8_0 products: the `--head q8` output head, for one token (decode) or a few
//! (batched decode). The integer core of a block is two [`DotStep::dot`]s (the quants of both
//! sides may be any byte, -128 included), exact; each block's four lanes are converted
//! (`SCVTF`) and accumulated with the product of the two block scales (`FMLA`), the four lanes
//! added at the end.
//!
//! Tiles of 4 weight rows x 2 tokens (`crate::aarch64::rows`): each weight block is loaded
//! once for the tile's tokens and each activation block once for its rows; the f16 scales
//! of the tile's rows and tokens are widened together (`FCVTL`). A (row, token) pair takes
//! the same operations in any tile, so batched results equal single-token ones bit for bit.

use std::arch::aarch64::*;
use std::marker::PhantomData;
use std::ops::Range;

use crate::aarch64::int_dot::DotStep;
use crate::aarch64::rows::{Tile, f16_lanes, lane, walk};
use crate::extent::holds;
use crate::layout::rows::{Q8_0_BLOCK_BYTES, QK8_0};

/// Q8_0 x Q8_0 dots of `R` weight rows with `T` activation rows of `nb` blocks.
///
/// # Safety
/// `S`'s features; each `w[r]` and `x[t]` points at `nb` readable Q8_0 blocks.
#[inline(always)]
unsafe fn dots<S: DotStep, const R: usize, const T: usize>(
    w: [*const u8; R],
    x: [*const u8; T],
    nb: usize,
) -> [[f32; T]; R] {
    const BB: usize = Q8_0_BLOCK_BYTES;
    // SAFETY: block b is below nb for every row and token; `S`'s features, NEON among them
    // (caller).
    unsafe {
        let mut acc = [[vdupq_n_f32(0.0); T]; R];
        for b in 0..nb {
            let off = b * BB;
            let dw = f16_lanes(w, off);
            let dx = f16_lanes(x, off);
            // Lane r of d[t]: the scale of row r times the scale of token t.
            let d: [float32x4_t; T] = std::array::from_fn(|t| vmulq_f32(dw, lane(dx, t)));
            let xq = x.map(|p| vld1q_s8_x2(p.add(off + 2).cast()));
            // Loops, not closures, around the step: a closure would not inherit the entry's
            // features.
            for r in 0..R {
                let wq = vld1q_s8_x2(w[r].add(off + 2).cast());
                for t in 0..T {
                    let block = S::dot(S::dot(vdupq_n_s32(0), wq.0, xq[t].0), wq.1, xq[t].1);
                    let p = vcvtq_f32_s32(block);
                    acc[r][t] = vfmaq_f32(acc[r][t], p, lane(d[t], r));
                }
            }
        }
        acc.map(|a| a.map(|v| vaddvq_f32(v)))
    }
}

/// The [`Tile`] of this kernel: rows of `nb` blocks, dotted with `S`.
#[derive(Clone, Copy)]
struct Rows<S> {
    nb: usize,
    step: PhantomData<S>,
}

impl<S: DotStep> Tile for Rows<S> {
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
pub(crate) unsafe fn matmul_q8_0_q8_0<S: DotStep>(
    w: &[u8],
    row_len: usize,
    xq: &[u8],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let nb = row_len / QK8_0;
    let rb = nb * Q8_0_BLOCK_BYTES;
    assert!(
        holds(w.len(), rows.end, rb)
            && holds(xq.len(), n_tok, rb)
            && holds(out.len(), n_tok, rows.len())
    );
    let tile = Rows::<S> {
        nb,
        step: PhantomData,
    };
    // SAFETY: `S`'s features (caller); shapes checked above.
    unsafe { walk(tile, w.as_ptr(), rb, xq.as_ptr(), rb, n_tok, rows, out) }
}
