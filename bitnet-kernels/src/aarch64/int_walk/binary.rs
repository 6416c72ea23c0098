//! 1-bit x int8 products over the bit-row layout of [`crate::binary`] (`raw_dots_multi`).
//!
//! A weight word's 64 bits become four 16-byte masks (`TBL` spreads each byte over 8 lanes,
//! `CMTST` against the lane's bit): -1 (0xff) where the bit is 1. The masks are made once per
//! row and word and shared by a tile of up to 4 tokens; per token, [`DotStep::select_word`]
//! sums the activations the masks select.

use std::arch::aarch64::*;
use std::ops::Range;

use crate::aarch64::int_dot::DotStep;
use crate::layout::binary::BinaryMatrix;

/// Token rows per tile.
const TILE_TOKENS: usize = 4;

/// The four 16-byte masks (-1 where the bit is 1) of the 64 columns of `word`.
#[inline(always)]
fn masks(word: u64, idx: &[uint8x16_t; 4], bitsel: uint8x16_t) -> [int8x16_t; 4] {
    // SAFETY: register arithmetic in NEON, which every AArch64 target has.
    unsafe {
        let v = vreinterpretq_u8_u64(vdupq_n_u64(word));
        idx.map(|i| vreinterpretq_s8_u8(vtstq_u8(vqtbl1q_u8(v, i), bitsel)))
    }
}

/// The `TBL` indices (`[2 j; 8], [2 j + 1; 8]`) and lane bits of [`masks`].
#[inline(always)]
fn mask_consts() -> ([uint8x16_t; 4], uint8x16_t) {
    const BITS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: NEON, which every AArch64 target has; `BITS` holds 16 bytes.
    unsafe {
        let idx = std::array::from_fn(|j| {
            let lo = vdup_n_u8(2 * j as u8);
            let hi = vdup_n_u8(2 * j as u8 + 1);
            vcombine_u8(lo, hi)
        });
        (idx, vld1q_u8(BITS.as_ptr()))
    }
}

/// Row `r` against `T` token rows from `t0`: `out[(t0 + t) * n + i]`.
///
/// # Safety
/// As [`raw_dots_multi`], with `t0 + T <= n_tok`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn row_tokens<S: DotStep, const T: usize>(
    w: &BinaryMatrix,
    q: &[i8],
    r: usize,
    i: usize,
    n: usize,
    t0: usize,
    words: &Range<usize>,
    out: &mut [i32],
) {
    let (idx, bitsel) = mask_consts();
    let pc = w.padded_cols();
    let bits = w.row_bits(r);
    let qp: [*const i8; T] = std::array::from_fn(|t| q[(t0 + t) * pc..].as_ptr());
    // SAFETY: register arithmetic in NEON, which every AArch64 target has.
    let mut acc = [unsafe { vdupq_n_s32(0) }; T];
    for wi in words.clone() {
        let m = masks(bits[wi], &idx, bitsel);
        for t in 0..T {
            // SAFETY: token `t0 + t` holds `padded_cols = words * 64` values, word `wi` is
            // inside the row.
            let a: [int8x16_t; 4] =
                std::array::from_fn(|j| unsafe { vld1q_s8(qp[t].add(wi * 64 + 16 * j)) });
            // SAFETY: `S`'s features (caller).
            acc[t] = unsafe { S::select_word(acc[t], &m, a) };
        }
    }
    for (t, &a) in acc.iter().enumerate() {
        out[(t0 + t) * n + i] = S::selected(a);
    }
}

/// See the reference `raw_dots_multi` (`scalar/binary.rs`).
///
/// # Safety
/// The CPU has `S`'s features, and the caller's `#[target_feature]` enables them; shapes as
/// checked by `crate::layout::binary::check_raw_dots`.
#[inline(always)]
pub(crate) unsafe fn raw_dots_multi<S: DotStep>(
    w: &BinaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: Range<usize>,
    words: Range<usize>,
    out: &mut [i32],
) {
    let n = rows.len();
    for (i, r) in rows.enumerate() {
        let mut t0 = 0;
        while t0 + TILE_TOKENS <= n_tok {
            // SAFETY: tokens t0..t0 + 4 exist; shapes checked and features given by the caller.
            unsafe { row_tokens::<S, TILE_TOKENS>(w, q, r, i, n, t0, &words, out) };
            t0 += TILE_TOKENS;
        }
        // SAFETY: tokens t0..n_tok exist; shapes checked and features given by the caller.
        unsafe {
            match n_tok - t0 {
                1 => row_tokens::<S, 1>(w, q, r, i, n, t0, &words, out),
                2 => row_tokens::<S, 2>(w, q, r, i, n, t0, &words, out),
                3 => row_tokens::<S, 3>(w, q, r, i, n, t0, &words, out),
                _ => {}
            }
        }
    }
}
