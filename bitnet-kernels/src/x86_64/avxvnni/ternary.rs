//! AVX-VNNI ternary kernels over the repacked layout of [`crate::layout::ternary`]: one-token
//! decode ([`raw_dots`]) and products of several token rows (prefill, batched decode,
//! speculative verification).
//!
//! The layout and the code unpacking are the AVX2 tree's (`(x >> 2l) & 3` gives the code
//! vector lined up with the activation run `64 l + 32 h` of half `h`); what changes is the
//! multiply-add. `vpdpbusd` (unsigned codes x signed int8, four products summed into each
//! i32 lane and added to it) does in one instruction what AVX2 needs a `maddubs` and an
//! `add` for, and its sums are i32 from the start, so there is no i16 stage to widen. The
//! tile spends 1 + 7 / 32 vector operations on 32 multiply-adds (AVX2: 2 + 7 / 32).

use std::arch::x86_64::*;
use std::ops::Range;

use crate::layout::ternary::{BLOCK, BLOCK_BYTES, ROW_GROUP, TernaryMatrix};
use crate::x86_64::hsum::{add_lane_sums, hsum_epi32};
use crate::x86_64::stream;

/// Bytes from one block of a row to its next (the row group's blocks are interleaved).
const BLOCK_STRIDE: usize = ROW_GROUP * BLOCK_BYTES;
/// Token rows per register tile at most: their i32 sums stay in registers (8 of the 16, beside
/// the weight half, the code vector and the mask).
const TILE_TOKENS: usize = 8;

/// Raw dots of two rows of a group (`w` at the first one's first block to use; the other is
/// `BLOCK_BYTES` further) over `nblk` blocks, against one token's activations at `q`. With
/// `pf`, prefetches the whole group's blocks ahead with hint `HINT` (the first pair's pass
/// does it for both pairs: the second pair's lines are then in cache).
///
/// Code vector `l` of half `h` is taken as `x & (3 << 2l)` = `4^l c` (at most 192, still a
/// valid unsigned byte for `vpdpbusd`), summed separately per `l` and scaled back by exact
/// shifts at the end, as AVX-512 does: four `vpand` and four `vpdpbusd` for 128 weights where
/// AVX2 spends seven unpacking operations, four `maddubs`, adds and a widening. Eight sums
/// and four masks are 12 of the 16 registers, so the group runs as two passes of two rows
/// (their lines are disjoint: each row's block is one line), the activations read from L1
/// as memory operands.
///
/// # Safety
/// AVX2 and AVX-VNNI; `nblk` blocks readable for both rows and `nblk * BLOCK` activations.
#[target_feature(enable = "avx2,avxvnni")]
#[inline]
unsafe fn row_pair<const HINT: u8>(w: *const u8, q: *const i8, nblk: usize, pf: bool) -> [i32; 2] {
    let m = [
        _mm256_set1_epi8(0x03),
        _mm256_set1_epi8(0x0C),
        _mm256_set1_epi8(0x30),
        _mm256_set1_epi8(0xC0u8 as i8),
    ];
    let mut acc = [[_mm256_setzero_si256(); 4]; 2];
    for b in 0..nblk {
        // SAFETY: block `b` lies inside the caller's `nblk` readable blocks; prefetches
        // never fault.
        unsafe {
            let wb = w.add(b * BLOCK_STRIDE);
            let qb = q.add(b * BLOCK);
            if pf {
                stream::ahead::<HINT>(wb, ROW_GROUP);
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                for h in 0..2 {
                    let x = _mm256_loadu_si256(wb.add(r * BLOCK_BYTES + 32 * h).cast());
                    for (l, a) in acc.iter_mut().enumerate() {
                        let act = _mm256_loadu_si256(qb.add(64 * l + 32 * h).cast());
                        *a = _mm256_dpbusd_avx_epi32(*a, _mm256_and_si256(x, m[l]), act);
                    }
                }
            }
        }
    }
    acc.map(|[a0, a1, a2, a3]| {
        let s = _mm256_add_epi32(
            _mm256_add_epi32(a0, _mm256_srai_epi32::<2>(a1)),
            _mm256_add_epi32(_mm256_srai_epi32::<4>(a2), _mm256_srai_epi32::<6>(a3)),
        );
        hsum_epi32(s)
    })
}

/// See the reference `raw_dots` (`scalar/ternary.rs`): one token row, 4-row groups as two
/// passes of [`row_pair`].
///
/// # Safety
/// AVX2 and AVX-VNNI; shapes as checked by `crate::layout::ternary::check_raw_dots`.
#[target_feature(enable = "avx2,avxvnni")]
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
    // SAFETY: the caller's guarantees are the callee's.
    unsafe { stream::with_hint!(stream::L1, groups(w, q, rows, blocks, out)) }
}

/// [`raw_dots`] with prefetch hint `HINT`.
///
/// # Safety
/// As [`raw_dots`]; `rows` and `blocks` not empty.
#[target_feature(enable = "avx2,avxvnni")]
pub(in crate::x86_64) unsafe fn groups<const HINT: u8>(
    w: &TernaryMatrix,
    q: &[i8],
    rows: Range<usize>,
    blocks: Range<usize>,
    out: &mut [i32],
) {
    let g0 = rows.start / ROW_GROUP;
    let g1 = rows.end.div_ceil(ROW_GROUP);
    for g in g0..g1 {
        // SAFETY: group `g` exists (rows.end <= padded rows) and the blocks lie inside the
        // row; `q` holds padded_cols values.
        let (base, qb) = unsafe {
            (
                w.data.as_ptr().add(w.offset(g * ROW_GROUP, blocks.start)),
                q.as_ptr().add(blocks.start * BLOCK),
            )
        };
        for pair in 0..2 {
            let r0 = g * ROW_GROUP + 2 * pair;
            if !rows.contains(&r0) && !rows.contains(&(r0 + 1)) {
                continue;
            }
            // SAFETY: as above; rows `r0` and `r0 + 1` are in the padded group.
            let d = unsafe {
                row_pair::<HINT>(
                    base.add(2 * pair * BLOCK_BYTES),
                    qb,
                    blocks.len(),
                    pair == 0,
                )
            };
            for (i, &v) in d.iter().enumerate() {
                if rows.contains(&(r0 + i)) {
                    out[r0 + i - rows.start] = v;
                }
            }
        }
    }
}

/// Adds one 256-column block of one row, against the `T` activation runs of the block at
/// `q` (token `t` at `t * BLOCK`, as `tile_plan::PackedActs` packs them), to the i32 sums
/// `acc`: each code vector is unpacked once and multiplied into every token of
/// the tile straight away. Code vector `k` (of 8) goes to sum set `k % S`: with few tokens,
/// `S` sets give each token `S` independent chains of `vpdpbusd`.
///
/// # Safety
/// AVX2 and AVX-VNNI; the row's block at `w` and `T * BLOCK` activations at `q` readable.
#[target_feature(enable = "avx2,avxvnni")]
#[inline]
unsafe fn tile_block<const T: usize, const S: usize>(
    w: *const u8,
    q: *const i8,
    acc: &mut [[__m256i; T]; S],
) {
    let m3 = _mm256_set1_epi8(3);
    for h in 0..2 {
        // SAFETY: the caller guarantees the block is readable for the row and every token.
        unsafe {
            let x = _mm256_loadu_si256(w.add(32 * h).cast());
            let qh = q.add(32 * h);
            let mut run = |c: __m256i, l: usize| {
                let ql = qh.add(64 * l);
                for (t, a) in acc[(4 * h + l) % S].iter_mut().enumerate() {
                    let act = _mm256_loadu_si256(ql.add(t * BLOCK).cast());
                    *a = _mm256_dpbusd_avx_epi32(*a, c, act);
                }
            };
            run(_mm256_and_si256(x, m3), 0);
            run(_mm256_and_si256(_mm256_srli_epi16::<2>(x), m3), 1);
            run(_mm256_and_si256(_mm256_srli_epi16::<4>(x), m3), 2);
            run(_mm256_and_si256(_mm256_srli_epi16::<6>(x), m3), 3);
        }
    }
}

/// Adds to `out[t * ostride]` the raw dots of one row with `T` activation rows (packed as
/// `tile_plan::PackedActs` lays them out), in `S` sum sets.
///
/// # Safety
/// AVX2 and AVX-VNNI; `w` readable for `nblk` blocks, `q` for `nblk * T` activation runs;
/// `out` writable at T positions.
#[target_feature(enable = "avx2,avxvnni")]
#[inline]
unsafe fn tile_sets<const T: usize, const S: usize>(
    w: *const u8,
    q: *const i8,
    nblk: usize,
    out: *mut i32,
    ostride: usize,
) {
    let mut acc = [[_mm256_setzero_si256(); T]; S];
    for b in 0..nblk {
        // Few-token matmuls (batched decode) stream cold weights: prefetch this row ahead.
        _mm_prefetch::<_MM_HINT_T1>(w.wrapping_add((b + 16) * BLOCK_STRIDE).cast());
        // SAFETY: block b is readable for the row and the tokens.
        unsafe { tile_block::<T, S>(w.add(b * BLOCK_STRIDE), q.add(b * T * BLOCK), &mut acc) };
    }
    let mut sums = acc[0];
    for set in &acc[1..] {
        for (a, s) in sums.iter_mut().zip(set) {
            *a = _mm256_add_epi32(*a, *s);
        }
    }
    // SAFETY: the caller guarantees `out` is writable at these T positions.
    unsafe { add_lane_sums(&sums, out, ostride) };
}

/// [`tile_sets`] with as many sum sets as keep `vpdpbusd` busy: each sum is a dependency
/// chain of the instruction's latency (5 cycles on Golden Cove, two issued a cycle), so about
/// 10 chains are needed; the 16 registers hold at most 12 sums beside the weight half, the
/// code vector and the mask. 7 and 8 tokens: one set; 3 to 6: two.
///
/// # Safety
/// As [`tile_sets`].
#[target_feature(enable = "avx2,avxvnni")]
#[inline]
unsafe fn tile<const T: usize>(
    w: *const u8,
    q: *const i8,
    nblk: usize,
    out: *mut i32,
    ostride: usize,
) {
    // SAFETY: the caller's guarantees are the callee's.
    unsafe {
        if T >= 7 {
            tile_sets::<T, 1>(w, q, nblk, out, ostride)
        } else {
            tile_sets::<T, 2>(w, q, nblk, out, ostride)
        }
    }
}

/// See the reference `raw_dots_multi` (`scalar/ternary.rs`): the register tile over the
/// passes and tiles of `x86_64/tile_plan.rs`. The token calls it for 3 token rows and more
/// (fewer take the AVX2 kernels: see `avxvnni/mod.rs`).
///
/// # Safety
/// AVX2 and AVX-VNNI; shapes as checked by `crate::layout::ternary::check_raw_dots`.
#[target_feature(enable = "avx2,avxvnni")]
pub unsafe fn raw_dots_multi(
    w: &TernaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: Range<usize>,
    blocks: Range<usize>,
    out: &mut [i32],
) {
    crate::x86_64::tile_plan::tile_matmul!(tile, TILE_TOKENS, w, q, n_tok, rows, blocks, out);
}
