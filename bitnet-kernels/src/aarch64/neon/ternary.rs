//! NEON ternary kernels over the repacked layout of [`crate::layout::ternary`].
//!
//! A row group's four 64-byte rows of a block are read as 16-byte chunks `k`; chunk `k` gives
//! four code vectors (`(x >> 2l) & 3`, `USHR` + `AND`) lined up with the activation runs
//! `64 l + 16 k ..`. Codes are 0..=2, so `SMULL`/`SMLAL` (+ the `2` forms for the high
//! halves) of codes x int8 stay within 256 per product; a block adds 32 products to an i16
//! lane (<= 8192), which is then widened into i32 once per block with `SADALP`. The four rows
//! of a group are done together so each activation vector is loaded once per block for them
//! all; a row range that starts or ends inside a group computes the whole (padded) group and
//! keeps the rows asked for.
//!
//! Single token (`raw_dots`): levels 1 and 2 are not shifted down: `x & 0x0c`, `x & 0x30`
//! are the codes times 4 and 16, one instruction per code vector instead of two. They are
//! summed in their own i16 sets (the x16 set gets 8 products of at most 32 * 128 per lane
//! and block: within -32768..=32512, exact) and folded back with `SSRA` (shift right and
//! add, exact: every lane is a multiple) once per block; this needs 12 i16 accumulators, so
//! the multi-token tiles keep the shifts.

use std::arch::aarch64::*;
use std::ops::Range;

use crate::layout::ternary::{BLOCK, BLOCK_BYTES, ROW_GROUP, TernaryMatrix};
use crate::shared::group_sums::store_group_sums;

const BLOCK_STRIDE: usize = ROW_GROUP * BLOCK_BYTES;
/// Token rows per register tile of the multi-token kernel.
const TILE_TOKENS: usize = 2;

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
/// NEON; `w` at the group's first block, `nblk` blocks of the group readable from there, and
/// `nblk * BLOCK` activations readable from each `q[t]`.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn group_tile<const T: usize>(
    w: *const u8,
    q: [*const i8; T],
    nblk: usize,
) -> [[i32; ROW_GROUP]; T] {
    let m3 = vdupq_n_u8(3);
    let mut acc = [[vdupq_n_s32(0); ROW_GROUP]; T];
    for b in 0..nblk {
        // SAFETY: block `b` of the group and of each activation row is readable.
        unsafe {
            let wb = w.add(b * BLOCK_STRIDE);
            let mut acc16 = [[vdupq_n_s16(0); ROW_GROUP]; T];
            for k in 0..4 {
                let x: [uint8x16_t; ROW_GROUP] =
                    std::array::from_fn(|r| vld1q_u8(wb.add(r * BLOCK_BYTES + 16 * k)));
                for l in 0..4 {
                    let c: [int8x16_t; ROW_GROUP] = std::array::from_fn(|r| code(x[r], l, m3));
                    for t in 0..T {
                        let a = vld1q_s8(q[t].add(b * BLOCK + 64 * l + 16 * k));
                        let al = vget_low_s8(a);
                        for r in 0..ROW_GROUP {
                            let s = vmlal_s8(acc16[t][r], vget_low_s8(c[r]), al);
                            acc16[t][r] = vmlal_high_s8(s, c[r], a);
                        }
                    }
                }
            }
            for t in 0..T {
                for r in 0..ROW_GROUP {
                    acc[t][r] = vpadalq_s16(acc[t][r], acc16[t][r]);
                }
            }
        }
    }
    std::array::from_fn(|t| std::array::from_fn(|r| vaddvq_s32(acc[t][r])))
}

/// Raw dots of the 4 rows of one group against one activation row over `nblk` blocks.
///
/// # Safety
/// NEON; `w` at the group's first block, `nblk` blocks of the group readable from there, and
/// `nblk * BLOCK` activations from `q`.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn group1(w: *const u8, q: *const i8, nblk: usize) -> [i32; ROW_GROUP] {
    let m0 = vdupq_n_u8(0x03);
    let m1 = vdupq_n_u8(0x0c);
    let m2 = vdupq_n_u8(0x30);
    let mut acc = [vdupq_n_s32(0); ROW_GROUP];
    for b in 0..nblk {
        let z = vdupq_n_s16(0);
        // x1: levels 0 and 3; x4: level 1 (codes times 4); x16: level 2 (codes times 16).
        let (mut x1, mut x4, mut x16) = ([z; ROW_GROUP], [z; ROW_GROUP], [z; ROW_GROUP]);
        // SAFETY: block `b` of the group and of the activation row is readable.
        unsafe {
            let wb = w.add(b * BLOCK_STRIDE);
            let qb = q.add(b * BLOCK);
            for k in 0..4 {
                let a: [int8x16_t; 4] = std::array::from_fn(|l| vld1q_s8(qb.add(64 * l + 16 * k)));
                for r in 0..ROW_GROUP {
                    let x = vld1q_u8(wb.add(r * BLOCK_BYTES + 16 * k));
                    let mla = |acc: int16x8_t, c: uint8x16_t, a: int8x16_t| {
                        let c = vreinterpretq_s8_u8(c);
                        vmlal_high_s8(vmlal_s8(acc, vget_low_s8(c), vget_low_s8(a)), c, a)
                    };
                    x1[r] = mla(x1[r], vandq_u8(x, m0), a[0]);
                    x4[r] = mla(x4[r], vandq_u8(x, m1), a[1]);
                    x16[r] = mla(x16[r], vandq_u8(x, m2), a[2]);
                    x1[r] = mla(x1[r], vshrq_n_u8::<6>(x), a[3]);
                }
            }
        }
        for r in 0..ROW_GROUP {
            let s = vsraq_n_s16::<4>(vsraq_n_s16::<2>(x1[r], x4[r]), x16[r]);
            acc[r] = vpadalq_s16(acc[r], s);
        }
    }
    acc.map(|a| vaddvq_s32(a))
}

/// See the reference `raw_dots` (`scalar/ternary.rs`).
///
/// # Safety
/// NEON; shapes as checked by `crate::layout::ternary::check_raw_dots`.
#[target_feature(enable = "neon")]
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

/// One group against `T` token rows from `t0`, written into `out`.
///
/// # Safety
/// NEON; as [`raw_dots_multi`], with `t0 + T <= n_tok` and group `g` inside the rows' groups.
#[target_feature(enable = "neon")]
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
/// [`TILE_TOKENS`] token rows, codes unpacked once per tile.
///
/// # Safety
/// NEON; shapes as checked by `crate::layout::ternary::check_raw_dots`.
#[target_feature(enable = "neon")]
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
            // SAFETY: tokens t0..t0 + 2 exist; shapes checked by the caller.
            unsafe { group_tokens::<TILE_TOKENS>(w, q, g, t0, &rows, &blocks, out) };
            t0 += TILE_TOKENS;
        }
        if t0 < n_tok {
            // SAFETY: token t0 exists; shapes checked by the caller.
            unsafe { group_tokens::<1>(w, q, g, t0, &rows, &blocks, out) };
        }
    }
}
