//! Dot-product (`SDOT`) ternary kernels over the repacked layout of [`crate::layout::ternary`].
//!
//! A row group's four 64-byte rows of a block are read as 16-byte chunks `k`, each lined up
//! (level `l`) with the activation run `64 l + 16 k ..`; one `SDOT` adds 16 code x int8
//! products into four i32 lanes, so nothing is widened.
//!
//! Single token (`raw_dots`): unpacking would cost as much as the `SDOT`s, so levels 1 and 2
//! are not shifted down: `x & 0x0c` and `x & 0x30` are the codes times 4 and 16 (<= 32, still
//! positive int8), summed in their own accumulators and shifted back (exactly: every lane is
//! a multiple) at the end; level 0 is `x & 3`, level 3 is `x >> 6`. One instruction per code
//! vector. Per lane at most 2^16 per block for the x16 set, so 2^14 blocks (`MAX_COLS`) stay
//! below 2^31.
//!
//! Multi token: tiles of one row group x up to 4 token rows, 16 i32 accumulators in
//! registers; the codes are unpacked with shifts (`(x >> 2l) & 3`) once per tile.

use std::arch::aarch64::*;
use std::ops::Range;

use crate::aarch64::asm::sdot;
use crate::layout::ternary::{BLOCK, BLOCK_BYTES, ROW_GROUP, TernaryMatrix};
use crate::shared::group_sums::store_group_sums;

const BLOCK_STRIDE: usize = ROW_GROUP * BLOCK_BYTES;
/// Token rows per register tile of the multi-token kernel.
const TILE_TOKENS: usize = 4;

/// Raw dots of the 4 rows of one group against one activation row over `nblk` blocks.
///
/// # Safety
/// NEON + dotprod; `w` at the group's first block, `nblk` blocks of the group readable from
/// there, and `nblk * BLOCK` activations from `q`.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn group1(w: *const u8, q: *const i8, nblk: usize) -> [i32; ROW_GROUP] {
    let m0 = vdupq_n_u8(0x03);
    let m1 = vdupq_n_u8(0x0c);
    let m2 = vdupq_n_u8(0x30);
    let z = vdupq_n_s32(0);
    // x1: levels 0 and 3; x4: level 1 (codes times 4); x16: level 2 (codes times 16).
    let (mut x1, mut x4, mut x16) = ([z; ROW_GROUP], [z; ROW_GROUP], [z; ROW_GROUP]);
    for b in 0..nblk {
        // SAFETY: block `b` of the group and of the activation row is readable; the CPU has
        // dotprod (target feature).
        unsafe {
            let wb = w.add(b * BLOCK_STRIDE);
            let qb = q.add(b * BLOCK);
            for k in 0..4 {
                let a0 = vld1q_s8(qb.add(16 * k));
                let a1 = vld1q_s8(qb.add(64 + 16 * k));
                let a2 = vld1q_s8(qb.add(128 + 16 * k));
                let a3 = vld1q_s8(qb.add(192 + 16 * k));
                for r in 0..ROW_GROUP {
                    let x = vld1q_u8(wb.add(r * BLOCK_BYTES + 16 * k));
                    x1[r] = sdot(x1[r], vreinterpretq_s8_u8(vandq_u8(x, m0)), a0);
                    x4[r] = sdot(x4[r], vreinterpretq_s8_u8(vandq_u8(x, m1)), a1);
                    x16[r] = sdot(x16[r], vreinterpretq_s8_u8(vandq_u8(x, m2)), a2);
                    x1[r] = sdot(x1[r], vreinterpretq_s8_u8(vshrq_n_u8::<6>(x)), a3);
                }
            }
        }
    }
    std::array::from_fn(|r| {
        let s = vaddq_s32(x1[r], vshrq_n_s32::<2>(x4[r]));
        vaddvq_s32(vaddq_s32(s, vshrq_n_s32::<4>(x16[r])))
    })
}

/// See the reference `raw_dots` (`scalar/ternary.rs`).
///
/// # Safety
/// NEON + dotprod; shapes as checked by `crate::layout::ternary::check_raw_dots`.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn raw_dots(
    w: &TernaryMatrix,
    q: &[i8],
    rows: Range<usize>,
    blocks: Range<usize>,
    out: &mut [i32],
) {
    if rows.is_empty() || blocks.is_empty() {
        out.fill(0);
        return;
    }
    for g in rows.start / ROW_GROUP..rows.end.div_ceil(ROW_GROUP) {
        // SAFETY: group `g` exists (rows end within the padded groups), the blocks lie inside
        // the row, and `q` holds `padded_cols` values.
        let d = unsafe {
            group1(
                w.data.as_ptr().add(w.offset(g * ROW_GROUP, blocks.start)),
                q.as_ptr().add(blocks.start * BLOCK),
                blocks.len(),
            )
        };
        store_group_sums(out, &rows, g, &d);
    }
}

/// The code vector of level `l` (columns `64 l + i`) of the bytes `x`.
#[target_feature(enable = "neon")]
#[inline]
fn code(x: uint8x16_t, l: usize, m3: uint8x16_t) -> int8x16_t {
    let c = match l {
        0 => vandq_u8(x, m3),
        1 => vandq_u8(vshrq_n_u8::<2>(x), m3),
        2 => vandq_u8(vshrq_n_u8::<4>(x), m3),
        _ => vshrq_n_u8::<6>(x),
    };
    vreinterpretq_s8_u8(c)
}

/// Raw dots of the 4 rows of one group against `T` activation rows over `nblk` blocks:
/// `[t][r]`.
///
/// # Safety
/// NEON + dotprod; `w` at the group's first block, `nblk` blocks of the group readable from
/// there, and `nblk * BLOCK` activations from each `q[t]`.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn group_tile<const T: usize>(
    w: *const u8,
    q: [*const i8; T],
    nblk: usize,
) -> [[i32; ROW_GROUP]; T] {
    let m3 = vdupq_n_u8(3);
    let mut acc = [[vdupq_n_s32(0); ROW_GROUP]; T];
    for b in 0..nblk {
        // SAFETY: block `b` of the group and of each activation row is readable; the CPU has
        // dotprod (target feature).
        unsafe {
            let wb = w.add(b * BLOCK_STRIDE);
            for k in 0..4 {
                let x: [uint8x16_t; ROW_GROUP] =
                    std::array::from_fn(|r| vld1q_u8(wb.add(r * BLOCK_BYTES + 16 * k)));
                for l in 0..4 {
                    let c: [int8x16_t; ROW_GROUP] = std::array::from_fn(|r| code(x[r], l, m3));
                    for t in 0..T {
                        let a = vld1q_s8(q[t].add(b * BLOCK + 64 * l + 16 * k));
                        for r in 0..ROW_GROUP {
                            acc[t][r] = sdot(acc[t][r], c[r], a);
                        }
                    }
                }
            }
        }
    }
    std::array::from_fn(|t| std::array::from_fn(|r| vaddvq_s32(acc[t][r])))
}

/// One group against `T` token rows from `t0`, written into `out`.
///
/// # Safety
/// NEON + dotprod; as [`raw_dots_multi`], with `t0 + T <= n_tok` and group `g` inside the
/// rows' groups.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn group_tokens<const T: usize>(
    w: &TernaryMatrix,
    q: &[i8],
    g: usize,
    t0: usize,
    rows: &Range<usize>,
    blocks: &Range<usize>,
    out: &mut [i32],
) {
    let pc = w.padded_cols();
    let n = rows.len();
    // SAFETY: the caller's shapes: group `g` and the blocks exist, each token row is whole.
    let d = unsafe {
        group_tile::<T>(
            w.data.as_ptr().add(w.offset(g * ROW_GROUP, blocks.start)),
            std::array::from_fn(|t| q.as_ptr().add((t0 + t) * pc + blocks.start * BLOCK)),
            blocks.len(),
        )
    };
    for (t, dt) in d.iter().enumerate() {
        for (rr, &v) in dt.iter().enumerate() {
            let r = g * ROW_GROUP + rr;
            if rows.contains(&r) {
                out[(t0 + t) * n + r - rows.start] = v;
            }
        }
    }
}

/// See the reference `raw_dots_multi` (`scalar/ternary.rs`): tiles of one row group x
/// [`TILE_TOKENS`] token rows, then one tile of the 1..=3 left.
///
/// # Safety
/// NEON + dotprod; shapes as checked by `crate::layout::ternary::check_raw_dots`.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn raw_dots_multi(
    w: &TernaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: Range<usize>,
    blocks: Range<usize>,
    out: &mut [i32],
) {
    if rows.is_empty() || blocks.is_empty() || n_tok == 0 {
        out.fill(0);
        return;
    }
    for g in rows.start / ROW_GROUP..rows.end.div_ceil(ROW_GROUP) {
        let mut t0 = 0;
        while t0 + TILE_TOKENS <= n_tok {
            // SAFETY: tokens t0..t0 + 4 exist; shapes checked by the caller.
            unsafe { group_tokens::<TILE_TOKENS>(w, q, g, t0, &rows, &blocks, out) };
            t0 += TILE_TOKENS;
        }
        // SAFETY: tokens t0..n_tok exist; shapes checked by the caller.
        unsafe {
            match n_tok - t0 {
                1 => group_tokens::<1>(w, q, g, t0, &rows, &blocks, out),
                2 => group_tokens::<2>(w, q, g, t0, &rows, &blocks, out),
                3 => group_tokens::<3>(w, q, g, t0, &rows, &blocks, out),
                _ => {}
            }
        }
    }
}
