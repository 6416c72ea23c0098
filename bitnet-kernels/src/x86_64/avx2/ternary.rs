//! AVX2 ternary kernels over the repacked layout of [`crate::layout::ternary`].
//!
//! Each 64-byte row block is read as two 32-byte halves; half `h` gives four code vectors
//! (`(x >> 2l) & 3`) lined up with the activation runs `64 l + 32 h ..`. `maddubs` (unsigned
//! codes x signed int8, pair sums <= 512 so no saturation) feeds i16 sums of the four code
//! vectors (<= 2048), kept in i16 over eight blocks (the register tile of prefill and batched
//! decode) and then widened with `madd` against ones. One-token decode ([`raw_dots`]) unpacks
//! with masks and one shift instead (see [`group4`]) and prefetches as `x86_64/stream.rs`
//! says for the CPU.
//!
//! Without VNNI, 32 multiply-adds cost at least a `maddubs` and an `add` (the instruction
//! bound `examples/madd_ceiling.rs` measures); the tile spends 2 + 7 / 32 vector operations
//! on them (the unpacking shared by 8 tokens).

use std::arch::x86_64::*;
use std::ops::Range;

use crate::layout::ternary::{BLOCK, BLOCK_BYTES, ROW_GROUP, TernaryMatrix};
use crate::shared::group_sums::store_group_sums;
use crate::x86_64::hsum::{add_lane_sums, hsum_epi32 as hsum, lane_sums4};
use crate::x86_64::stream;

const BLOCK_STRIDE: usize = ROW_GROUP * BLOCK_BYTES;
const PREFETCH_BYTES: usize = 4096;
/// Token rows per register tile at most (its i16 sums stay in registers; the code vector
/// is unpacked once for all of them). Up to this many token rows (batched decode,
/// speculative verification) one tile covers them all, so each row's weights are read once
/// per call; more are cut into even tiles of at most this many. Measured against 6 (the
/// previous tile) and 12, interleaved in one process (2B-4T layer shapes, 2 threads, 30
/// rounds): 8 matched 6 at 256 tokens (median ratio 1.01) and beat it at 8 tokens (1.04,
/// faster in 22 of 30 rounds); 12 spilled its sums and lost (0.97).
const TILE_TOKENS: usize = 8;

/// The four code vectors of one 32-byte half.
#[target_feature(enable = "avx2")]
#[inline]
fn codes(x: __m256i, m3: __m256i) -> [__m256i; 4] {
    [
        _mm256_and_si256(x, m3),
        _mm256_and_si256(_mm256_srli_epi16::<2>(x), m3),
        _mm256_and_si256(_mm256_srli_epi16::<4>(x), m3),
        _mm256_and_si256(_mm256_srli_epi16::<6>(x), m3),
    ]
}

/// i16 lanes of `sum_l codes[l] . act[l]` for one half (each lane <= 2048 in magnitude).
///
/// # Safety
/// AVX2; `a` readable at offsets 0, 64, 128, 192 (32 bytes each).
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn half_dot16(c: &[__m256i; 4], a: *const i8) -> __m256i {
    // SAFETY: the caller guarantees the four 32-byte runs are readable.
    unsafe {
        let p0 = _mm256_maddubs_epi16(c[0], _mm256_loadu_si256(a.cast()));
        let p1 = _mm256_maddubs_epi16(c[1], _mm256_loadu_si256(a.add(64).cast()));
        let p2 = _mm256_maddubs_epi16(c[2], _mm256_loadu_si256(a.add(128).cast()));
        let p3 = _mm256_maddubs_epi16(c[3], _mm256_loadu_si256(a.add(192).cast()));
        _mm256_add_epi16(_mm256_add_epi16(p0, p1), _mm256_add_epi16(p2, p3))
    }
}

/// One half of one row's block for [`group4`]: the 32 code bytes at `w`, the four activation
/// runs at `a + 64 l`; adds the unscaled products (vectors 0 and 2) to `e`, the products of
/// the vectors scaled by 4 (1 and 3) to `o`. In `asm!` so the activations stay memory
/// operands: as intrinsics the compiler loaded the block's eight runs once for the four
/// rows, which does not fit the 16 registers beside the eight sums, and spilled.
///
/// # Safety
/// AVX2; 32 bytes at `w` and 32 at each `a + 64 l` (l < 4) readable.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn half_step(
    w: *const u8,
    a: *const i8,
    m_lo: __m256i,
    m_hi: __m256i,
    e: &mut __m256i,
    o: &mut __m256i,
) {
    // SAFETY: reads the 32 + 4 * 32 bytes the caller guarantees; registers otherwise.
    unsafe {
        std::arch::asm!(
            "vmovdqu {x}, ymmword ptr [{w}]",
            "vpsrlw {y}, {x}, 4",
            "vpand {t}, {x}, {lo}",
            "vpmaddubsw {t}, {t}, ymmword ptr [{a}]",
            "vpaddw {e}, {e}, {t}",
            "vpand {t}, {x}, {hi}",
            "vpmaddubsw {t}, {t}, ymmword ptr [{a} + 64]",
            "vpaddw {o}, {o}, {t}",
            "vpand {t}, {y}, {lo}",
            "vpmaddubsw {t}, {t}, ymmword ptr [{a} + 128]",
            "vpaddw {e}, {e}, {t}",
            "vpand {t}, {y}, {hi}",
            "vpmaddubsw {t}, {t}, ymmword ptr [{a} + 192]",
            "vpaddw {o}, {o}, {t}",
            w = in(reg) w,
            a = in(reg) a,
            lo = in(ymm_reg) m_lo,
            hi = in(ymm_reg) m_hi,
            e = inout(ymm_reg) *e,
            o = inout(ymm_reg) *o,
            x = out(ymm_reg) _,
            y = out(ymm_reg) _,
            t = out(ymm_reg) _,
            options(pure, readonly, nostack, preserves_flags)
        )
    };
}

/// Blocks one-token decode keeps its i16 sums over before widening them (see [`group4`]).
const DECODE_WIDEN_BLOCKS: usize = 4;

/// Raw dots of the 4 rows of one group over `nblk` blocks, against one token.
///
/// Code vector `l` of a half is taken without a shift where it can be: `x & 0x03` (code
/// vector 0) and `x & 0x0C` (vector 1, as `4 c`), then from `y = x >> 4` the same two masks
/// (vectors 2 and 3): one shift and four `and`s for 128 weights where `(x >> 2l) & 3` takes
/// three and four. The vectors scaled by 4 have their own i16 sums, which stay multiples of
/// 4 and are scaled back exactly (`>> 2`) when the sums are widened. Per 128 weights that
/// leaves 5 unpacking operations, 4 `maddubs` and 4 `add`s: 13 where the shifting kernel
/// spent 15.5, on a core that runs out of instructions before memory does.
///
/// Bounds (activations in -128..=127, codes <= 2): a `maddubs` of the unscaled vectors moves
/// an i16 lane by at most 2 * 2 * 128 = 512, of the scaled ones by 2048. Over
/// [`DECODE_WIDEN_BLOCKS`] = 4 blocks a row's scaled sum takes 16 of them: -32768..=32512,
/// the i16 range; the unscaled one 8192; their widened sum `e + (o >> 2)` at most 16384.
///
/// # Safety
/// AVX2; `w` at the group's first block, `q` at the matching column; `nblk` blocks readable.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn group4<const HINT: u8>(w: *const u8, q: *const i8, nblk: usize) -> [i32; 4] {
    let m_lo = _mm256_set1_epi8(0x03);
    let m_hi = _mm256_set1_epi8(0x0C);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_si256(); 4];
    let mut b = 0;
    while b < nblk {
        let end = (b + DECODE_WIDEN_BLOCKS).min(nblk);
        let mut e16 = [_mm256_setzero_si256(); 4];
        let mut o16 = [_mm256_setzero_si256(); 4];
        while b < end {
            // SAFETY: block `b` lies inside the caller's readable blocks.
            unsafe {
                let qb = q.add(b * BLOCK);
                let wb = w.add(b * BLOCK_STRIDE);
                stream::ahead::<HINT>(wb, ROW_GROUP);
                for r in 0..ROW_GROUP {
                    for h in 0..2 {
                        let x = wb.add(r * BLOCK_BYTES + 32 * h);
                        half_step(x, qb.add(32 * h), m_lo, m_hi, &mut e16[r], &mut o16[r]);
                    }
                }
            }
            b += 1;
        }
        for r in 0..ROW_GROUP {
            let s = _mm256_add_epi16(e16[r], _mm256_srai_epi16::<2>(o16[r]));
            acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(s, ones));
        }
    }
    lane_sums4(acc)
}

/// See the reference `raw_dots` (`scalar/ternary.rs`).
///
/// # Safety
/// AVX2; shapes as checked by `crate::layout::ternary::check_raw_dots`.
#[target_feature(enable = "avx2")]
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
    unsafe { stream::with_hint!(stream::L2, groups(w, q, rows, blocks, out)) }
}

/// [`raw_dots`] with prefetch hint `HINT`.
///
/// # Safety
/// As [`raw_dots`]; `rows` and `blocks` not empty.
#[target_feature(enable = "avx2")]
pub(in crate::x86_64) unsafe fn groups<const HINT: u8>(
    w: &TernaryMatrix,
    q: &[i8],
    rows: Range<usize>,
    blocks: Range<usize>,
    out: &mut [i32],
) {
    for g in rows.start / ROW_GROUP..rows.end.div_ceil(ROW_GROUP) {
        // SAFETY: group `g` exists and blocks lie inside the row; `q` holds padded_cols values.
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

/// Adds one 256-column block of one row, against the `T` activation runs of the block at
/// `q` (token `t` at `t * BLOCK`, as `tile_plan::PackedActs` packs them), to the i16 sums
/// `acc16` (each lane moves by at most 8 * 512 = 4096: 8 `maddubs` of codes <= 2 against
/// int8).
///
/// Code vector by code vector: each is unpacked once (one or two operations) and multiplied
/// into every token of the tile straight away, so only one code vector is live beside the
/// tile's sums. Per `maddubs` that leaves one `add` and 7 / (4 T) unpacking operations.
///
/// # Safety
/// AVX2; the row's block at `w` and `T * BLOCK` activations at `q` readable.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn tile_block<const T: usize>(w: *const u8, q: *const i8, acc16: &mut [__m256i; T]) {
    let m3 = _mm256_set1_epi8(3);
    for h in 0..2 {
        // SAFETY: the caller guarantees the block is readable for the row and every token.
        unsafe {
            let x = _mm256_loadu_si256(w.add(32 * h).cast());
            let qh = q.add(32 * h);
            let mut run = |c: __m256i, l: usize| {
                let ql = qh.add(64 * l);
                if T == 8 {
                    // SAFETY: T == 8: the array is an [__m256i; 8].
                    tile_step8(c, ql, &mut *(acc16 as *mut [__m256i; T]).cast());
                    return;
                }
                for (t, a) in acc16.iter_mut().enumerate() {
                    let p = _mm256_maddubs_epi16(c, _mm256_loadu_si256(ql.add(t * BLOCK).cast()));
                    *a = _mm256_add_epi16(*a, p);
                }
            };
            run(_mm256_and_si256(x, m3), 0);
            run(_mm256_and_si256(_mm256_srli_epi16::<2>(x), m3), 1);
            run(_mm256_and_si256(_mm256_srli_epi16::<4>(x), m3), 2);
            run(_mm256_and_si256(_mm256_srli_epi16::<6>(x), m3), 3);
        }
    }
}

/// `a[t] += maddubs(c, q[t * BLOCK..])` for the 8 tokens of a full tile, in this order, in
/// `asm!`: the compiler, given the same steps as intrinsics, reassociated the adds and
/// spilled sums.
///
/// # Safety
/// AVX2; `q` readable at `t * BLOCK` (32 bytes) for t < 8.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn tile_step8(c: __m256i, q: *const i8, a: &mut [__m256i; 8]) {
    // SAFETY: reads the 8 runs the caller guarantees; register arithmetic otherwise.
    unsafe {
        std::arch::asm!(
            "vpmaddubsw {t}, {c}, ymmword ptr [{q}]",
            "vpaddw {0}, {0}, {t}",
            "vpmaddubsw {t}, {c}, ymmword ptr [{q} + 256]",
            "vpaddw {1}, {1}, {t}",
            "vpmaddubsw {t}, {c}, ymmword ptr [{q} + 512]",
            "vpaddw {2}, {2}, {t}",
            "vpmaddubsw {t}, {c}, ymmword ptr [{q} + 768]",
            "vpaddw {3}, {3}, {t}",
            "vpmaddubsw {t}, {c}, ymmword ptr [{q} + 1024]",
            "vpaddw {4}, {4}, {t}",
            "vpmaddubsw {t}, {c}, ymmword ptr [{q} + 1280]",
            "vpaddw {5}, {5}, {t}",
            "vpmaddubsw {t}, {c}, ymmword ptr [{q} + 1536]",
            "vpaddw {6}, {6}, {t}",
            "vpmaddubsw {t}, {c}, ymmword ptr [{q} + 1792]",
            "vpaddw {7}, {7}, {t}",
            inout(ymm_reg) a[0],
            inout(ymm_reg) a[1],
            inout(ymm_reg) a[2],
            inout(ymm_reg) a[3],
            inout(ymm_reg) a[4],
            inout(ymm_reg) a[5],
            inout(ymm_reg) a[6],
            inout(ymm_reg) a[7],
            c = in(ymm_reg) c,
            q = in(reg) q,
            t = out(ymm_reg) _,
            options(pure, readonly, nostack, preserves_flags)
        )
    };
}

/// Blocks whose i16 sums a tile keeps before widening them: 8 blocks move a lane by at most
/// 8 * 8 `maddubs` of two products, each code <= 2 times an activation in -128..=127, so
/// from -32768 to 32512: the i16 range, exactly (`quantize_act` clamps to -128..=127).
const WIDEN_BLOCKS: usize = 8;

/// Adds to `out[t * ostride]` the raw dots of one row with `T` activation rows, packed as
/// `tile_plan::PackedActs` lays them out.
///
/// # Safety
/// AVX2; `w` readable for `nblk` blocks, `q` for `nblk * T` activation runs; `out` writable
/// at T positions.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn tile<const T: usize>(
    w: *const u8,
    q: *const i8,
    nblk: usize,
    out: *mut i32,
    ostride: usize,
) {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_si256(); T];
    let mut b = 0;
    while b < nblk {
        let end = (b + WIDEN_BLOCKS).min(nblk);
        let mut acc16 = [_mm256_setzero_si256(); T];
        while b < end {
            // Few-token matmuls (batched decode) stream cold weights: prefetch this row ahead.
            _mm_prefetch::<_MM_HINT_T1>(w.wrapping_add((b + 16) * BLOCK_STRIDE).cast());
            // SAFETY: block b is readable for the row and the tokens.
            unsafe { tile_block::<T>(w.add(b * BLOCK_STRIDE), q.add(b * T * BLOCK), &mut acc16) };
            b += 1;
        }
        // The i32 sums stay in memory for wide tiles; they are touched once per WIDEN_BLOCKS.
        for (a, a16) in acc.iter_mut().zip(&acc16) {
            *a = _mm256_add_epi32(*a, _mm256_madd_epi16(*a16, ones));
        }
    }
    // SAFETY: the caller guarantees `out` is writable at these T positions.
    unsafe { add_lane_sums(&acc, out, ostride) };
}

/// Register-tile matmul: each row's block unpacked once for a tile of token rows (all of them
/// up to [`TILE_TOKENS`], else even tiles of at most that many), over column passes whose
/// activations stay in L1 for all the rows (`x86_64/tile_plan.rs`).
///
/// # Safety
/// AVX2; shapes as checked by `crate::layout::ternary::check_raw_dots`.
#[target_feature(enable = "avx2")]
unsafe fn raw_dots_multi_tile(
    w: &TernaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: Range<usize>,
    blocks: Range<usize>,
    out: &mut [i32],
) {
    crate::x86_64::tile_plan::tile_matmul!(tile, TILE_TOKENS, w, q, n_tok, rows, blocks, out);
}

/// Raw dots of the 4 rows of one group with `T` activation rows `qstride` apart.
///
/// # Safety
/// AVX2; `w` at the group's first block, `q` at the matching column of the first activation
/// row; `nblk` blocks readable for the group and each of the T rows.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn group4_multi<const T: usize>(
    w: *const u8,
    q: *const i8,
    qstride: usize,
    nblk: usize,
) -> [[i32; 4]; T] {
    let m3 = _mm256_set1_epi8(3);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_si256(); T]; ROW_GROUP];
    for b in 0..nblk {
        // SAFETY: block `b` lies inside the caller's readable blocks.
        unsafe {
            let qb = q.add(b * BLOCK);
            let wb = w.add(b * BLOCK_STRIDE);
            let pf = wb.wrapping_add(PREFETCH_BYTES);
            _mm_prefetch::<_MM_HINT_T1>(pf.cast());
            _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_add(64).cast());
            _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_add(128).cast());
            _mm_prefetch::<_MM_HINT_T1>(pf.wrapping_add(192).cast());
            for (r, acc) in acc.iter_mut().enumerate() {
                let c0 = codes(_mm256_loadu_si256(wb.add(r * BLOCK_BYTES).cast()), m3);
                let c1 = codes(_mm256_loadu_si256(wb.add(r * BLOCK_BYTES + 32).cast()), m3);
                for (t, a) in acc.iter_mut().enumerate() {
                    let qt = qb.add(t * qstride);
                    let s = _mm256_add_epi16(half_dot16(&c0, qt), half_dot16(&c1, qt.add(32)));
                    *a = _mm256_add_epi32(*a, _mm256_madd_epi16(s, ones));
                }
            }
        }
    }
    let mut out = [[0i32; 4]; T];
    for (r, acc) in acc.iter().enumerate() {
        for (t, a) in acc.iter().enumerate() {
            out[t][r] = hsum(*a);
        }
    }
    out
}

/// Up to this many token rows the group kernel (4 rows against 2 tokens); beyond, the register
/// tile, which unpacks each weight half once for all the tile's tokens instead of once per
/// token pair, and for batched decode (up to [`TILE_TOKENS`] tokens) also reads the
/// weights once (the tile measured faster for prefill; `bench/2026-11-26-kernels-figures.md`).
const GROUP_TOKENS_MAX: usize = 2;

/// Activation bytes per token block of `raw_dots_multi`.
const ACT_BLOCK_BYTES: usize = 512 << 10;

/// See the reference `raw_dots_multi` (`scalar/ternary.rs`): for a few token rows, 4-row
/// groups against 2 token rows at a time; otherwise the register tile.
///
/// # Safety
/// AVX2; shapes as checked by `crate::layout::ternary::check_raw_dots`.
#[target_feature(enable = "avx2")]
pub unsafe fn raw_dots_multi(
    w: &TernaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: Range<usize>,
    blocks: Range<usize>,
    out: &mut [i32],
) {
    if n_tok > GROUP_TOKENS_MAX {
        // SAFETY: same preconditions.
        return unsafe { raw_dots_multi_tile(w, q, n_tok, rows, blocks, out) };
    }
    out.fill(0);
    if rows.is_empty() || blocks.is_empty() {
        return;
    }
    let pc = w.padded_cols();
    let n = rows.len();
    let tb = (ACT_BLOCK_BYTES / pc).max(2) / 2 * 2;
    for tb0 in (0..n_tok).step_by(tb) {
        for g in rows.start / ROW_GROUP..rows.end.div_ceil(ROW_GROUP) {
            for t0 in (tb0..n_tok.min(tb0 + tb)).step_by(2) {
                let tt = 2.min(n_tok - t0);
                // SAFETY: group `g` exists and blocks lie inside the row; `q` holds n_tok
                // padded rows, of which rows t0..t0+tt are used.
                let d: [[i32; 4]; 2] = unsafe {
                    let wp = w.data.as_ptr().add(w.offset(g * ROW_GROUP, blocks.start));
                    let qp = q.as_ptr().add(t0 * pc + blocks.start * BLOCK);
                    let nb = blocks.len();
                    if tt == 2 {
                        group4_multi::<2>(wp, qp, pc, nb)
                    } else {
                        let [d] = group4_multi::<1>(wp, qp, pc, nb);
                        [d, [0; 4]]
                    }
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
