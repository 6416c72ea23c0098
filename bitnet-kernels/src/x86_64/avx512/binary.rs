//! AVX-512 1-bit kernels: a 64-bit weight word becomes a mask register, expanded to byte
//! codes {0, 1} by one masked move and multiplied with 64 activations by `vpdpbusd`; the
//! XNOR path XORs 512 bits at a time and counts them with VPOPCNTDQ.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::layout::binary::BinaryMatrix;

/// Token rows per tile.
const TILE_TOKENS: usize = 8;
/// Words per column chunk (2048 columns).
const CHUNK_WORDS: usize = 32;

/// Adds to `out[t * ostride]` the raw dots of one bit row (`nw` words) with `T` activation
/// rows `qstride` apart.
///
/// # Safety
/// AVX-512 F/BW/VNNI; `bits` readable for `nw` words, `q` for `nw * 64` bytes of each of the T
/// rows; `out` writable at the T positions.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn tile<const T: usize>(
    bits: *const u64,
    q: *const i8,
    qstride: usize,
    nw: usize,
    out: *mut i32,
    ostride: usize,
) {
    let ones = _mm512_set1_epi8(1);
    // Two accumulator sets (even / odd words) halve the vpdpbusd dependency chains.
    let mut acc = [[_mm512_setzero_si512(); T]; 2];
    for wi in 0..nw {
        // SAFETY: word `wi` and its 64 activations of each of the T rows are readable.
        unsafe {
            let k: __mmask64 = bits.add(wi).read();
            let codes = _mm512_maskz_mov_epi8(k, ones);
            let set = &mut acc[wi & 1];
            for (t, a) in set.iter_mut().enumerate() {
                let act = _mm512_loadu_si512(q.add(t * qstride + wi * 64).cast());
                *a = _mm512_dpbusd_epi32(*a, codes, act);
            }
        }
    }
    for t in 0..T {
        let s = _mm512_reduce_add_epi32(_mm512_add_epi32(acc[0][t], acc[1][t]));
        // SAFETY: the caller guarantees `out` is writable at these T positions.
        unsafe { *out.add(t * ostride) += s };
    }
}

/// See the reference `raw_dots_multi` (`scalar/binary.rs`).
///
/// # Safety
/// AVX-512 F/BW/VNNI; shapes as checked by `crate::layout::binary::check_raw_dots`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn raw_dots_multi(
    w: &BinaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: Range<usize>,
    words: Range<usize>,
    out: &mut [i32],
) {
    out.fill(0);
    let pc = w.padded_cols();
    let n = rows.len();
    let mut k0 = words.start;
    while k0 < words.end {
        let nw = CHUNK_WORDS.min(words.end - k0);
        let mut t0 = 0;
        while t0 < n_tok {
            let tt = TILE_TOKENS.min(n_tok - t0);
            for (i, r) in rows.clone().enumerate() {
                // SAFETY: row `r` words k0..k0+nw exist; tokens t0..t0+tt have padded rows in
                // `q`; out[(t0 + t) * n + i] is in bounds for t < tt.
                unsafe {
                    let bp = w.bits.as_ptr().add(r * w.words + k0);
                    let qp = q.as_ptr().add(t0 * pc + k0 * 64);
                    let op = out.as_mut_ptr().add(t0 * n + i);
                    match tt {
                        8 => tile::<8>(bp, qp, pc, nw, op, n),
                        7 => tile::<7>(bp, qp, pc, nw, op, n),
                        6 => tile::<6>(bp, qp, pc, nw, op, n),
                        5 => tile::<5>(bp, qp, pc, nw, op, n),
                        4 => tile::<4>(bp, qp, pc, nw, op, n),
                        3 => tile::<3>(bp, qp, pc, nw, op, n),
                        2 => tile::<2>(bp, qp, pc, nw, op, n),
                        _ => tile::<1>(bp, qp, pc, nw, op, n),
                    }
                }
            }
            t0 += tt;
        }
        k0 += nw;
    }
}

/// See the reference `xor_popcounts` (`scalar/binary.rs`).
///
/// # Safety
/// AVX-512 F/BW/VNNI and VPOPCNTDQ; shapes as checked by `crate::layout::binary::check_raw_dots`.
#[target_feature(enable = "avx512f,avx512bw,avx512vpopcntdq")]
pub unsafe fn xor_popcounts(
    w: &BinaryMatrix,
    x: &[u64],
    rows: Range<usize>,
    words: Range<usize>,
    out: &mut [i32],
) {
    let nw = words.len();
    let full = nw / 8 * 8;
    let tail: __mmask8 = ((1u32 << (nw - full)) - 1) as u8;
    for (o, r) in out.iter_mut().zip(rows) {
        // SAFETY: row `r` has `w.words >= words.end` words; `x` has at least `words.end`.
        unsafe {
            let bp = w.bits.as_ptr().add(r * w.words + words.start);
            let xp = x.as_ptr().add(words.start);
            let mut acc = _mm512_setzero_si512();
            let mut i = 0;
            while i < full {
                let v = _mm512_xor_si512(
                    _mm512_loadu_si512(bp.add(i).cast()),
                    _mm512_loadu_si512(xp.add(i).cast()),
                );
                acc = _mm512_add_epi64(acc, _mm512_popcnt_epi64(v));
                i += 8;
            }
            if tail != 0 {
                let v = _mm512_xor_si512(
                    _mm512_maskz_loadu_epi64(tail, bp.add(full).cast()),
                    _mm512_maskz_loadu_epi64(tail, xp.add(full).cast()),
                );
                acc = _mm512_add_epi64(acc, _mm512_popcnt_epi64(v));
            }
            *o = _mm512_reduce_add_epi64(acc) as i32;
        }
    }
}
