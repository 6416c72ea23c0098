//! AVX-512 VNNI ternary kernels over the repacked layout of [`crate::layout::ternary`].
//!
//! One 64-byte load of a row's block holds four code vectors, each lined up with a contiguous
//! run of 64 activations and multiplied by `vpdpbusd` (unsigned codes x signed int8). Both
//! kernels walk 4-row groups (one sequential weight stream) and prefetch weights 4 KiB ahead.
//! - Decode (`raw_dots`, one token) shares the four activation loads of a block among the 4
//!   rows and takes code vector `l` as `x & (3 << 2l)` (no shift: shifts and `vpdpbusd` both
//!   need port 0 on Intel cores) into its own accumulator, rescaled exactly at the end.
//! - Matrix x matrix (`raw_dots_multi`: prefill and batched decode) unpacks a group's block
//!   once (`(x >> 2l) & 3`) per 4 token rows; the group's weights stay in L1 across the token
//!   sub-tiles and the activations of a token block (<= 512 KiB) stay in L2 across groups.
//!   It replaced a row x 8-token register tile with K chunks, which was slower everywhere
//!   (prefetching inside that tile cost too).
//!
//! A `vpmultishiftqb` (VBMI) unpack measured no faster (it also runs on port 0) and was
//! dropped. What each choice measured: `bench/2026-11-26-kernels-figures.md`.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::layout::ternary::{BLOCK, BLOCK_BYTES, ROW_GROUP, TernaryMatrix};
use crate::shared::group_sums::store_group_sums;
use crate::x86_64::hsum::lane_sums4;
use crate::x86_64::stream;

/// Bytes from one block of a row to the next block of the same row.
const BLOCK_STRIDE: usize = ROW_GROUP * BLOCK_BYTES;
/// How far ahead of the current block decode prefetches weights: the distance that came
/// closest to a plain read of a cold set (shorter and longer ones, and the NTA hint, read
/// slower; `bench/2026-11-26-kernels-figures.md`).
pub(crate) const PREFETCH_BYTES: usize = 4096;

/// Raw dots of the 4 rows of one group over `nblk` blocks.
///
/// # Safety
/// AVX-512 F/BW/VNNI; `w` points at the group's first block to use, `q` at the matching
/// activation column; `nblk` blocks are readable from both.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn group4<const HINT: u8>(w: *const u8, q: *const i8, nblk: usize) -> [i32; 4] {
    // Masking without shifting: code vector `l` is taken as `x & (3 << 2l)` = `4^l c`
    // (at most 128, still a valid unsigned byte), accumulated separately per `l` and
    // scaled back by an exact arithmetic shift at the end. This keeps the unpack off
    // port 0 (where both `vpdpbusd` and the shifts run).
    let m = [
        _mm512_set1_epi8(0x03),
        _mm512_set1_epi8(0x0C),
        _mm512_set1_epi8(0x30),
        _mm512_set1_epi8(0xC0u8 as i8),
    ];
    let mut acc = [_mm512_setzero_si512(); 16];
    for b in 0..nblk {
        // SAFETY: block `b` lies inside the caller's `nblk` readable blocks.
        unsafe {
            let qb = q.add(b * BLOCK);
            let a0 = _mm512_loadu_si512(qb.cast());
            let a1 = _mm512_loadu_si512(qb.add(64).cast());
            let a2 = _mm512_loadu_si512(qb.add(128).cast());
            let a3 = _mm512_loadu_si512(qb.add(192).cast());
            let wb = w.add(b * BLOCK_STRIDE);
            // Decode streams weights from DRAM once: ask for them well ahead so the loads
            // overlap the arithmetic (the hardware prefetcher alone reaches ~0.6 of a plain
            // read here). Prefetching past the matrix end is harmless.
            // Into L1 (T0): on Zen 5 that read 0.90 of a plain read on one thread against
            // 0.87 into L2, in three alternated runs (bench/2026-12-07-issue50-zen5.md).
            // (Zen 4 reads faster without: `x86_64/stream.rs` picks the hint by CPU.)
            stream::ahead::<HINT>(wb, ROW_GROUP);
            for r in 0..ROW_GROUP {
                let x = _mm512_loadu_si512(wb.add(r * BLOCK_BYTES).cast());
                let a = [a0, a1, a2, a3];
                for l in 0..4 {
                    let c = _mm512_and_si512(x, m[l]);
                    acc[4 * r + l] = _mm512_dpbusd_epi32(acc[4 * r + l], c, a[l]);
                }
            }
        }
    }
    // Each row's four sums scaled back and folded to 256 bits, then the four rows' sums out
    // of one `hadd` tree: a reduction a row held short rows back measurably
    // (bench/2026-12-07-zen4-decode-gaps.md).
    let fold = |r: usize| {
        let s = _mm512_add_epi32(
            _mm512_add_epi32(acc[4 * r], _mm512_srai_epi32::<2>(acc[4 * r + 1])),
            _mm512_add_epi32(
                _mm512_srai_epi32::<4>(acc[4 * r + 2]),
                _mm512_srai_epi32::<6>(acc[4 * r + 3]),
            ),
        );
        _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64::<1>(s))
    };
    lane_sums4([fold(0), fold(1), fold(2), fold(3)])
}

/// See the reference `raw_dots` (`scalar/ternary.rs`).
///
/// # Safety
/// AVX-512 F/BW/VNNI; shapes as checked by `crate::layout::ternary::check_raw_dots`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
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
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
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
        // SAFETY: group `g` exists (rows.end <= padded rows) and blocks lie inside the row;
        // `q` holds padded_cols values.
        let d = unsafe {
            group4::<HINT>(
                w.data.as_ptr().add(w.offset(g * ROW_GROUP, blocks.start)),
                q.as_ptr().add(blocks.start * BLOCK),
                blocks.len(),
            )
        };
        store_group_sums(out, &rows, g, &d);
    }
}

/// The four code vectors `(x >> 2l) & 3` of one 64-byte block row.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn unpack(x: __m512i, m3: __m512i) -> [__m512i; 4] {
    [
        _mm512_and_si512(x, m3),
        _mm512_and_si512(_mm512_srli_epi16::<2>(x), m3),
        _mm512_and_si512(_mm512_srli_epi16::<4>(x), m3),
        _mm512_and_si512(_mm512_srli_epi16::<6>(x), m3),
    ]
}

/// Activation bytes per token block of `raw_dots_multi` (re-read from L2 for every group).
pub(crate) const ACT_BLOCK_BYTES: usize = 512 << 10;

/// Raw dots of the 4 rows of one group with `T` activation rows (`qstride` apart).
///
/// # Safety
/// AVX-512 F/BW/VNNI; `w` at the group's first block to use, `q` at the matching column of
/// the first activation row; `nblk` blocks readable for the group and each of the T rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn group4_batch<const T: usize>(
    w: *const u8,
    q: *const i8,
    qstride: usize,
    nblk: usize,
) -> [[i32; 4]; T] {
    let m3 = _mm512_set1_epi8(3);
    let mut acc = [[_mm512_setzero_si512(); T]; ROW_GROUP];
    for b in 0..nblk {
        // SAFETY: block `b` lies inside the caller's readable blocks.
        unsafe {
            let wb = w.add(b * BLOCK_STRIDE);
            let pf = wb.wrapping_add(PREFETCH_BYTES);
            _mm_prefetch::<_MM_HINT_T1>(pf.cast());
            _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_add(64).cast());
            _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_add(128).cast());
            _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_add(192).cast());
            let qb = q.add(b * BLOCK);
            for (r, acc) in acc.iter_mut().enumerate() {
                let c = unpack(_mm512_loadu_si512(wb.add(r * BLOCK_BYTES).cast()), m3);
                for (l, &cl) in c.iter().enumerate() {
                    for (t, a) in acc.iter_mut().enumerate() {
                        let act = _mm512_loadu_si512(qb.add(t * qstride + l * 64).cast());
                        *a = _mm512_dpbusd_epi32(*a, cl, act);
                    }
                }
            }
        }
    }
    let mut out = [[0i32; 4]; T];
    for (r, acc) in acc.iter().enumerate() {
        for (t, a) in acc.iter().enumerate() {
            out[t][r] = _mm512_reduce_add_epi32(*a);
        }
    }
    out
}

/// See the reference `raw_dots_multi` (`scalar/ternary.rs`): 4-row groups against 4 token
/// rows at a time, token blocks of at most [`ACT_BLOCK_BYTES`] of activations.
///
/// # Safety
/// AVX-512 F/BW/VNNI; shapes as checked by `crate::layout::ternary::check_raw_dots`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn raw_dots_multi(
    w: &TernaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: Range<usize>,
    blocks: Range<usize>,
    out: &mut [i32],
) {
    out.fill(0);
    if rows.is_empty() || blocks.is_empty() {
        return;
    }
    let pc = w.padded_cols();
    let n = rows.len();
    // Token blocks whose activations fit comfortably in L2 (they are re-read for every group).
    let tb = (ACT_BLOCK_BYTES / pc).max(4) / 4 * 4;
    for tb0 in (0..n_tok).step_by(tb) {
        for g in rows.start / ROW_GROUP..rows.end.div_ceil(ROW_GROUP) {
            // Token sub-tiles of up to 4: the group's weights stay in L1 after the first one.
            for t0 in (tb0..n_tok.min(tb0 + tb)).step_by(4) {
                let tt = 4.min(n_tok - t0);
                // SAFETY: group `g` exists and blocks lie inside the row; `q` holds n_tok padded
                // rows, of which rows t0..t0+tt are used.
                let d: [[i32; 4]; 4] = unsafe {
                    let wp = w.data.as_ptr().add(w.offset(g * ROW_GROUP, blocks.start));
                    let qp = q.as_ptr().add(t0 * pc + blocks.start * BLOCK);
                    let nb = blocks.len();
                    let mut d = [[0; 4]; 4];
                    match tt {
                        4 => d = group4_batch::<4>(wp, qp, pc, nb),
                        3 => d[..3].copy_from_slice(&group4_batch::<3>(wp, qp, pc, nb)),
                        2 => d[..2].copy_from_slice(&group4_batch::<2>(wp, qp, pc, nb)),
                        _ => d[..1].copy_from_slice(&group4_batch::<1>(wp, qp, pc, nb)),
                    }
                    d
                };
                for (t, d) in d.iter().enumerate().take(tt) {
                    for (rr, &v) in d.iter().enumerate() {
                        let r = g * ROW_GROUP + rr;
                        if rows.contains(&r) {
                            out[(t0 + t) * n + r - rows.start] = v;
                        }
                    }
                }
            }
        }
    }
}
