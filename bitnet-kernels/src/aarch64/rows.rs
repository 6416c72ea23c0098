//! The row and token walk the AArch64 matrix kernels share (quantized rows times f32
//! vectors, Q8_0 x Q8_0 in each set): which weight rows meet which activation rows, in what
//! tiles. Each kernel supplies the dots of one tile ([`Tile`]); the walk does not depend on
//! the instructions, so it is written once. Also the gather of a few f16 block scales into
//! one f32 vector, which every block-quantized kernel here needs.
//!
//! A tile's dots must give each (row, token) pair the same bits whatever the tile's shape
//! (the tests hold a token's batched result to its single-token one, bit for bit).

use std::arch::aarch64::*;
use std::ops::Range;

use crate::aarch64::asm::f16x4_to_f32x4;

/// One kernel's dots of a tile of `R` weight rows with `T` activation rows (`R` is
/// [`Tile::ROWS`] or 1, `T` is 4, 2 or 1, at most [`Tile::TOKENS`]).
pub(crate) trait Tile: Copy {
    /// Rows of a full tile: 4, or 1 where a decoded row fills the registers.
    const ROWS: usize;
    /// Tokens of a full tile: 4, 2 or 1.
    const TOKENS: usize;

    /// `[[dot(w[r], x[t]) for t] for r]`.
    ///
    /// # Safety
    /// The features of the kernel's set; each `w[r]` points at a whole weight row, each
    /// `x[t]` at a whole activation row.
    unsafe fn tile<const R: usize, const T: usize>(
        self,
        w: [*const u8; R],
        x: [*const u8; T],
    ) -> [[f32; T]; R];
}

/// `out[t * rows.len() + i] = dot(row rows.start + i, token t)` for rows `rb` bytes apart
/// from `w` and tokens `xb` bytes apart from `x`: groups of [`Tile::ROWS`] rows (the last
/// ones one at a time), every token against each group while it is hot in L1.
///
/// # Safety
/// The features of `D`'s set; `w` holds `rows.end` rows of `rb` bytes, `x` `n_tok` rows of
/// `xb` bytes, `out` `n_tok * rows.len()` floats (the callers check the shapes).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn walk<D: Tile>(
    d: D,
    w: *const u8,
    rb: usize,
    x: *const u8,
    xb: usize,
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let nr = rows.len();
    let mut r = rows.start;
    while r < rows.end {
        let o = r - rows.start;
        // SAFETY: the rows used lie below rows.end and the tokens below n_tok (caller).
        unsafe {
            if D::ROWS == 4 && rows.end - r >= 4 {
                let wr = [0, 1, 2, 3].map(|j| w.add((r + j) * rb));
                tokens::<D, 4>(d, wr, x, xb, n_tok, |t, j, v| out[t * nr + o + j] = v);
                r += 4;
            } else {
                let wr = [w.add(r * rb)];
                tokens::<D, 1>(d, wr, x, xb, n_tok, |t, _, v| out[t * nr + o] = v);
                r += 1;
            }
        }
    }
}

/// The rows `w` against every token, [`Tile::TOKENS`] at a time, the rest 2 then 1 at a
/// time; `put(t, r, v)` stores each result.
///
/// # Safety
/// As [`walk`].
#[inline(always)]
unsafe fn tokens<D: Tile, const R: usize>(
    d: D,
    w: [*const u8; R],
    x: *const u8,
    xb: usize,
    n_tok: usize,
    mut put: impl FnMut(usize, usize, f32),
) {
    let mut t = 0;
    // SAFETY: tokens below n_tok lie inside x (caller).
    unsafe {
        if D::TOKENS == 4 {
            while t + 4 <= n_tok {
                let xs = [0, 1, 2, 3].map(|k| x.add((t + k) * xb));
                let s = d.tile::<R, 4>(w, xs);
                for (j, sj) in s.iter().enumerate() {
                    for (k, &v) in sj.iter().enumerate() {
                        put(t + k, j, v);
                    }
                }
                t += 4;
            }
        }
        if D::TOKENS >= 2 {
            while t + 2 <= n_tok {
                let s = d.tile::<R, 2>(w, [x.add(t * xb), x.add((t + 1) * xb)]);
                for (j, sj) in s.iter().enumerate() {
                    put(t, j, sj[0]);
                    put(t + 1, j, sj[1]);
                }
                t += 2;
            }
        }
        while t < n_tok {
            let s = d.tile::<R, 1>(w, [x.add(t * xb)]);
            for (j, sj) in s.iter().enumerate() {
                put(t, j, sj[0]);
            }
            t += 1;
        }
    }
}

/// The f16 at `p[k] + off` for each `k < N` (`N <= 4`) as lanes of an f32 vector (lanes
/// past `N` zero): the block scales of a tile's rows or tokens, widened by one `FCVTL`.
///
/// # Safety
/// Two bytes at each `p[k] + off` must be readable; NEON.
#[inline(always)]
pub(crate) unsafe fn f16_lanes<const N: usize>(p: [*const u8; N], off: usize) -> float32x4_t {
    const { assert!(N <= 4) };
    let mut h = [0u16; 4];
    for k in 0..N {
        // SAFETY: the caller guarantees two readable bytes there (any alignment).
        h[k] = unsafe { p[k].add(off).cast::<u16>().read_unaligned() };
    }
    // SAFETY: the buffer holds 4 u16; NEON is the caller's.
    f16x4_to_f32x4(unsafe { vld1_u16(h.as_ptr()) })
}

/// Lane `i` (0..4) of `v` in every lane (`DUP`, or folded into a by-element multiply).
#[inline(always)]
pub(crate) fn lane(v: float32x4_t, i: usize) -> float32x4_t {
    // SAFETY: NEON is in the AArch64 base ISA and every caller's features.
    unsafe {
        match i {
            0 => vdupq_laneq_f32::<0>(v),
            1 => vdupq_laneq_f32::<1>(v),
            2 => vdupq_laneq_f32::<2>(v),
            _ => vdupq_laneq_f32::<3>(v),
        }
    }
}
