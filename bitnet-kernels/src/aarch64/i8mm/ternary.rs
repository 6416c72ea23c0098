//! Int8 matrix-multiply (`SMMLA`) multi-token ternary kernel over the repacked layout of
//! [`crate::layout::ternary`].
//!
//! `SMMLA` takes a 2x8 tile A (two rows' 8 codes) and a 2x8 tile B (two tokens' 8
//! activations) and adds the 2x2 products `[r0.t0, r0.t1, r1.t0, r1.t1]` into four i32
//! lanes: 32 multiply-adds per instruction against `SDOT`'s 16. The register tile is one row
//! group (two row pairs) x two token pairs. The operand layout comes from `ZIP1`/`ZIP2` on
//! 64-bit lanes: a 16-byte chunk `k` of rows `2p` and `2p + 1` zips into `[r0 0..8, r1 0..8]`
//! and `[r0 8..16, r1 8..16]`, before unpacking, so the four levels share the zip. The
//! activations are interleaved the same way once per call, token pair by token pair, into a
//! buffer (512 bytes per pair and block) that every row group then reads with plain loads:
//! zipping them inside the tile cost 16 of its 96 instructions per chunk.
//!
//! Codes come out with one instruction each, as in the dot-product single-token kernel:
//! `x & 3`, `x >> 6` (levels 0, 3) and `x & 0x0c`, `x & 0x30` (levels 1, 2: the codes times
//! 4 and 16), summed in three accumulator sets and shifted back exactly. A 2x2 lane holds one
//! row x token over 64 columns per level per block (<= 2^18 in the x16 set), so the scaled
//! sets are folded into the plain one every [`FOLD_BLOCKS`] blocks.
//!
//! An odd token count pairs its last token with zeros in that buffer; those lanes are
//! dropped.

use std::arch::aarch64::*;
use std::ops::Range;

use crate::aarch64::asm::smmla;
use crate::layout::ternary::{BLOCK, BLOCK_BYTES, ROW_GROUP, TernaryMatrix};

const BLOCK_STRIDE: usize = ROW_GROUP * BLOCK_BYTES;
/// Blocks summed in the scaled accumulators before they are folded (64 * 2^18 < 2^31).
const FOLD_BLOCKS: usize = 64;
/// Interleaved activation bytes per token pair and block.
const PAIR_BLOCK: usize = 2 * BLOCK;

/// `[a 0..8, b 0..8]` and `[a 8..16, b 8..16]`.
#[target_feature(enable = "neon")]
#[inline]
fn zip64(a: uint8x16_t, b: uint8x16_t) -> (uint8x16_t, uint8x16_t) {
    let (a, b) = (vreinterpretq_u64_u8(a), vreinterpretq_u64_u8(b));
    (
        vreinterpretq_u8_u64(vzip1q_u64(a, b)),
        vreinterpretq_u8_u64(vzip2q_u64(a, b)),
    )
}

/// Raw dots of the 4 rows of one group against `P` token pairs (`q[p]`: the pair's
/// interleaved activations, [`PAIR_BLOCK`] bytes per block) over `nblk` blocks: one 2x2
/// vector `[rp][p]` per row pair and token pair, lanes `[r0.t0, r0.t1, r1.t0, r1.t1]`.
///
/// # Safety
/// NEON + dotprod + i8mm; `w` at the group's first block, `nblk` blocks of the group
/// readable from there, and `nblk * PAIR_BLOCK` bytes from each `q[p]`.
#[target_feature(enable = "neon,dotprod,i8mm")]
#[inline]
unsafe fn group_tile<const P: usize>(
    w: *const u8,
    q: [*const i8; P],
    nblk: usize,
) -> [[int32x4_t; P]; 2] {
    let m0 = vdupq_n_u8(0x03);
    let m1 = vdupq_n_u8(0x0c);
    let m2 = vdupq_n_u8(0x30);
    let z = vdupq_n_s32(0);
    let mut acc = [[z; P]; 2];
    let mut b0 = 0;
    while b0 < nblk {
        let b1 = nblk.min(b0 + FOLD_BLOCKS);
        // x4: level 1 (codes times 4); x16: level 2 (codes times 16).
        let (mut x4, mut x16) = ([[z; P]; 2], [[z; P]; 2]);
        for b in b0..b1 {
            // SAFETY: block `b` of the group and of each token pair is readable; the CPU
            // has i8mm (target feature).
            unsafe {
                let wb = w.add(b * BLOCK_STRIDE);
                for k in 0..4 {
                    let x: [uint8x16_t; ROW_GROUP] =
                        std::array::from_fn(|r| vld1q_u8(wb.add(r * BLOCK_BYTES + 16 * k)));
                    // [pair][half]: the A operands of this chunk, before unpacking.
                    let (p0l, p0h) = zip64(x[0], x[1]);
                    let (p1l, p1h) = zip64(x[2], x[3]);
                    let za = [[p0l, p0h], [p1l, p1h]];
                    for l in 0..4 {
                        let c = za.map(|h| {
                            h.map(|v| {
                                vreinterpretq_s8_u8(match l {
                                    0 => vandq_u8(v, m0),
                                    1 => vandq_u8(v, m1),
                                    2 => vandq_u8(v, m2),
                                    _ => vshrq_n_u8::<6>(v),
                                })
                            })
                        });
                        let set = match l {
                            1 => &mut x4,
                            2 => &mut x16,
                            _ => &mut acc,
                        };
                        for (tp, &qp) in q.iter().enumerate() {
                            // Run `4 l + k` of the block: 16 columns of both tokens.
                            let a = qp.add(b * PAIR_BLOCK + 32 * (4 * l + k));
                            let (bl, bh) = (vld1q_s8(a), vld1q_s8(a.add(16)));
                            for rp in 0..2 {
                                let s = smmla(set[rp][tp], c[rp][0], bl);
                                set[rp][tp] = smmla(s, c[rp][1], bh);
                            }
                        }
                    }
                }
            }
        }
        for rp in 0..2 {
            for tp in 0..P {
                let s = vaddq_s32(acc[rp][tp], vshrq_n_s32::<2>(x4[rp][tp]));
                acc[rp][tp] = vaddq_s32(s, vshrq_n_s32::<4>(x16[rp][tp]));
            }
        }
        b0 = b1;
    }
    acc
}

/// One group against the token pairs `p0..p0 + P` of `pairs` (tokens `2 p0..`, `nt` of them
/// real, `2 P - 1 <= nt <= 2 P`), written into `out`.
///
/// # Safety
/// NEON + dotprod + i8mm; as [`raw_dots_multi`], with group `g` inside the rows' groups and
/// `pairs` holding `nblk * PAIR_BLOCK` bytes per pair up to `p0 + P`.
#[target_feature(enable = "neon,dotprod,i8mm")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn group_tokens<const P: usize>(
    w: &TernaryMatrix,
    pairs: &[i8],
    g: usize,
    p0: usize,
    nt: usize,
    rows: &Range<usize>,
    blocks: &Range<usize>,
    out: &mut [i32],
) {
    let n = rows.len();
    let pair_len = blocks.len() * PAIR_BLOCK;
    let t0 = 2 * p0;
    // SAFETY: the caller's shapes: group `g` and the blocks exist; the pairs are whole.
    let d = unsafe {
        group_tile::<P>(
            w.data.as_ptr().add(w.offset(g * ROW_GROUP, blocks.start)),
            std::array::from_fn(|p| pairs[(p0 + p) * pair_len..].as_ptr()),
            blocks.len(),
        )
    };
    for (rp, drp) in d.iter().enumerate() {
        for (tp, v) in drp.iter().enumerate() {
            let mut lanes = [0i32; 4];
            // SAFETY: `lanes` holds 4 i32.
            unsafe { vst1q_s32(lanes.as_mut_ptr(), *v) };
            for (j, &v) in lanes.iter().enumerate() {
                let (r, t) = (g * ROW_GROUP + 2 * rp + j / 2, 2 * tp + j % 2);
                if t < nt && rows.contains(&r) {
                    out[(t0 + t) * n + r - rows.start] = v;
                }
            }
        }
    }
}

/// The activations of `blocks` of every token, interleaved per token pair for `SMMLA`:
/// pair `p`, block `b`, run `j` (columns `16 j..16 j + 16`) at `(p * nblk + b) * 512 + 32 j`
/// as `[t0 8 bytes, t1 8 bytes]` for the run's two halves; a missing last token is zeros.
///
/// # Safety
/// NEON; `q` holds `n_tok` rows of `pc` values and the blocks lie inside them.
#[target_feature(enable = "neon")]
unsafe fn interleave_pairs(
    q: &[i8],
    n_tok: usize,
    pc: usize,
    blocks: &Range<usize>,
    buf: &mut Vec<i8>,
) {
    let nblk = blocks.len();
    let n_pairs = n_tok.div_ceil(2);
    // Every byte is written below; only growth needs filling.
    buf.resize(n_pairs * nblk * PAIR_BLOCK, 0);
    let zero = vdupq_n_u8(0);
    for p in 0..n_pairs {
        let t1 = (2 * p + 1 < n_tok).then_some(2 * p + 1);
        for b in 0..nblk {
            let col = (blocks.start + b) * BLOCK;
            let dst = &mut buf[(p * nblk + b) * PAIR_BLOCK..][..PAIR_BLOCK];
            for j in 0..BLOCK / 16 {
                // SAFETY: columns `col + 16 j..+16` lie inside each token row (blocks in
                // range); `dst` holds 32 bytes at `32 j`.
                unsafe {
                    let a0 = vld1q_u8(q.as_ptr().add(2 * p * pc + col + 16 * j).cast());
                    let a1 = match t1 {
                        Some(t) => vld1q_u8(q.as_ptr().add(t * pc + col + 16 * j).cast()),
                        None => zero,
                    };
                    let (lo, hi) = zip64(a0, a1);
                    vst1q_u8(dst.as_mut_ptr().add(32 * j).cast(), lo);
                    vst1q_u8(dst.as_mut_ptr().add(32 * j + 16).cast(), hi);
                }
            }
        }
    }
}

/// See the reference `raw_dots_multi` (`scalar/ternary.rs`): the activations interleaved
/// once, then tiles of one row group x 2 token pairs, and one tile of the last pair.
///
/// # Safety
/// NEON + dotprod + i8mm; shapes as checked by `crate::layout::ternary::check_raw_dots`.
#[target_feature(enable = "neon,dotprod,i8mm")]
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
    // One buffer per thread, reused across calls: the per-block-scale path calls this once
    // per block, and an allocation each time would cost more than the interleave.
    PAIRS.with_borrow_mut(|pairs| {
        // SAFETY: shapes checked by the caller.
        unsafe { interleave_pairs(q, n_tok, w.padded_cols(), &blocks, pairs) };
        // SAFETY: as above; the buffer holds every pair of every block.
        unsafe { tiles(w, pairs, n_tok, &rows, &blocks, out) };
    });
}

thread_local! {
    static PAIRS: std::cell::RefCell<Vec<i8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Every row group against every token pair of the interleaved `pairs`.
///
/// # Safety
/// NEON and I8MM; `pairs` is `interleave_pairs`' output for `n_tok` tokens and `blocks`;
/// shapes checked by the caller.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "neon,dotprod,i8mm")]
unsafe fn tiles(
    w: &TernaryMatrix,
    pairs: &[i8],
    n_tok: usize,
    rows: &Range<usize>,
    blocks: &Range<usize>,
    out: &mut [i32],
) {
    let (rows, blocks) = (rows.clone(), blocks.clone());
    let n_pairs = n_tok.div_ceil(2);
    for g in rows.start / ROW_GROUP..rows.end.div_ceil(ROW_GROUP) {
        let mut p0 = 0;
        while p0 + 2 <= n_pairs {
            let nt = (n_tok - 2 * p0).min(4);
            // SAFETY: pairs p0, p0 + 1 are in the buffer; shapes checked by the caller.
            unsafe { group_tokens::<2>(w, pairs, g, p0, nt, &rows, &blocks, out) };
            p0 += 2;
        }
        if p0 < n_pairs {
            let nt = n_tok - 2 * p0;
            // SAFETY: pair p0 is in the buffer; shapes checked by the caller.
            unsafe { group_tokens::<1>(w, pairs, g, p0, nt, &rows, &blocks, out) };
        }
    }
}
