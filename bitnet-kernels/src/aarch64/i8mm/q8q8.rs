//! NEON + I8MM Q8_0 x Q8_0 products: the `--head q8` output head, for one token (decode) or
//! a few (batched decode). `SMMLA` multiplies a 2x8 block of weight bytes by a 2x8 block of
//! activation bytes (transposed) into the four i32 sums of a 2 rows x 2 tokens tile, so the
//! quants of two rows (and of two tokens) are interleaved 8 bytes at a time (`ZIP1`/`ZIP2`
//! on 64-bit lanes); four `SMMLA`s give a block's exact dots for the four pairs. Each pair's
//! lane is converted (`SCVTF`) and accumulated with the product of its two block scales
//! (`FMLA`); no lanes are added at the end.
//!
//! Tiles of 4 weight rows x 2 tokens (`crate::aarch64::rows`), as two row pairs; a single
//! row is paired with itself and the extra lanes dropped. A single token (decode, or the
//! last of an odd batch) takes `SDOT` instead, the exact block sums of four rows gathered
//! into one vector's lanes, each lane then accumulated as a pair's lane is.
//! A pair's lane takes the same operations whatever its partner, so batched results equal
//! single-token ones bit for bit.

use std::arch::aarch64::*;
use std::ops::Range;

use crate::aarch64::asm::{sdot, smmla};
use crate::aarch64::rows::{Tile, f16_lanes, lane, walk};
use crate::extent::holds;
use crate::layout::rows::{Q8_0_BLOCK_BYTES, QK8_0};

/// The 32 quants of the blocks at `a` and `b` interleaved 8 bytes at a time: the four
/// `SMMLA` operands `[a0..8 b0..8]`, `[a8..16 b8..16]`, ...
///
/// # Safety
/// NEON; 32 bytes readable at `a` and at `b`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn pair(a: *const u8, b: *const u8) -> [int8x16_t; 4] {
    // SAFETY: the caller guarantees the 32 bytes.
    let (a, b) = unsafe { (vld1q_s64_x2(a.cast()), vld1q_s64_x2(b.cast())) };
    [
        vzip1q_s64(a.0, b.0),
        vzip2q_s64(a.0, b.0),
        vzip1q_s64(a.1, b.1),
        vzip2q_s64(a.1, b.1),
    ]
    .map(|v| vreinterpretq_s8_s64(v))
}

/// Q8_0 x Q8_0 dots of `R` (4 or 1) weight rows with `T` (2 or 1) activation rows of `nb`
/// blocks. Accumulator `p` holds rows `2p, 2p + 1` (row 0 twice when `R == 1`) x tokens
/// `0, 1` as `[r0 t0, r0 t1, r1 t0, r1 t1]`; one token goes to [`dots_one`].
///
/// # Safety
/// NEON and I8MM; each `w[r]` and `x[t]` points at `nb` readable Q8_0 blocks.
#[inline]
#[target_feature(enable = "neon,dotprod,i8mm")]
unsafe fn dots<const R: usize, const T: usize>(
    w: [*const u8; R],
    x: [*const u8; T],
    nb: usize,
) -> [[f32; T]; R] {
    const BB: usize = Q8_0_BLOCK_BYTES;
    // The walk instantiates 4-token tiles too, but never calls them (`TOKENS` is 2).
    assert!((R == 4 || R == 1) && (T == 2 || T == 1));
    if T == 1 {
        // SAFETY: forwarded from the caller.
        let s = unsafe { dots_one::<R>(w, x[0], nb) };
        return std::array::from_fn(|r| std::array::from_fn(|_| s[r]));
    }
    let np = R.div_ceil(2);
    let mut acc = [vdupq_n_f32(0.0); 2];
    for b in 0..nb {
        let off = b * BB;
        // SAFETY: block b is below nb for every row and token (caller); the CPU has I8MM.
        unsafe {
            // Token scales as [x0, x1, x0, x1].
            let dx = vreinterpretq_f32_f64(vdupq_laneq_f64::<0>(vreinterpretq_f64_f32(f16_lanes(
                x, off,
            ))));
            let dw = f16_lanes(w, off);
            // Row scales as [w0, w0, w1, w1] and [w2, w2, w3, w3].
            let dwp = [vzip1q_f32(dw, dw), vzip2q_f32(dw, dw)];
            let xq = pair(x[0].add(off + 2), x[T - 1].add(off + 2));
            for p in 0..np {
                let (ra, rb) = (w[(2 * p).min(R - 1)], w[(2 * p + 1).min(R - 1)]);
                let wq = pair(ra.add(off + 2), rb.add(off + 2));
                let mut s = vdupq_n_s32(0);
                for k in 0..4 {
                    s = smmla(s, wq[k], xq[k]);
                }
                acc[p] = vfmaq_f32(acc[p], vcvtq_f32_s32(s), vmulq_f32(dwp[p], dx));
            }
        }
    }
    let mut out = [[0.0; T]; R];
    for (r, o) in out.iter_mut().enumerate() {
        let mut l = [0.0f32; 4];
        // SAFETY: the buffer holds 4 floats.
        unsafe { vst1q_f32(l.as_mut_ptr(), acc[r / 2]) };
        for (t, v) in o.iter_mut().enumerate() {
            *v = l[2 * (r % 2) + t];
        }
    }
    out
}

/// Q8_0 x Q8_0 dots of `R` (4 or 1) weight rows with one activation row of `nb` blocks.
/// `SMMLA` would spend half its products on a padding token here, so each row's block dot
/// is two `SDOT`s, the four rows' lanes summed pairwise (`ADDP`) into one vector of exact
/// block sums; lane `r` then takes exactly the operations of a pair's lane in [`dots`]
/// (`acc + f32(sum) * (d_w * d_x)`, fused), so a token's results are the same bits alone
/// as in a batch.
///
/// # Safety
/// NEON, DotProd and I8MM; each `w[r]` and `x` points at `nb` readable Q8_0 blocks.
#[inline]
#[target_feature(enable = "neon,dotprod,i8mm")]
unsafe fn dots_one<const R: usize>(w: [*const u8; R], x: *const u8, nb: usize) -> [f32; R] {
    const BB: usize = Q8_0_BLOCK_BYTES;
    let mut acc = vdupq_n_f32(0.0);
    for b in 0..nb {
        let off = b * BB;
        // SAFETY: block b is below nb for every row and the token (caller); the CPU has
        // DotProd.
        unsafe {
            let xq = vld1q_s8_x2(x.add(off + 2).cast());
            let s = w.map(|p| {
                let q = vld1q_s8_x2(p.add(off + 2).cast());
                sdot(sdot(vdupq_n_s32(0), q.0, xq.0), q.1, xq.1)
            });
            let sums = if R == 4 {
                let (a, c) = (vpaddq_s32(s[0], s[1 % R]), vpaddq_s32(s[2 % R], s[3 % R]));
                vpaddq_s32(a, c)
            } else {
                let a = vpaddq_s32(s[0], s[0]);
                vpaddq_s32(a, a)
            };
            let d = vmulq_f32(f16_lanes(w, off), lane(f16_lanes([x], off), 0));
            acc = vfmaq_f32(acc, vcvtq_f32_s32(sums), d);
        }
    }
    let mut l = [0.0f32; 4];
    // SAFETY: the buffer holds 4 floats.
    unsafe { vst1q_f32(l.as_mut_ptr(), acc) };
    std::array::from_fn(|r| l[r])
}

/// The [`Tile`] of this kernel: rows of `nb` blocks.
#[derive(Clone, Copy)]
struct Rows {
    nb: usize,
}

impl Tile for Rows {
    const ROWS: usize = 4;
    const TOKENS: usize = 2;

    #[inline(always)]
    unsafe fn tile<const R: usize, const T: usize>(
        self,
        w: [*const u8; R],
        x: [*const u8; T],
    ) -> [[f32; T]; R] {
        // SAFETY: forwarded from the caller (NEON and I8MM, whole rows).
        unsafe { dots::<R, T>(w, x, self.nb) }
    }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support NEON and I8MM. Shapes are checked here.
#[target_feature(enable = "neon,dotprod,i8mm")]
pub unsafe fn matmul_q8_0_q8_0(
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
    // SAFETY: this function enables NEON and I8MM; shapes checked above.
    unsafe {
        walk(
            Rows { nb },
            w.as_ptr(),
            rb,
            xq.as_ptr(),
            rb,
            n_tok,
            rows,
            out,
        )
    }
}
