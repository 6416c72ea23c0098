//! AVX2 1-bit kernels: 32 weight bits are spread to 32 byte codes {0, 1} (broadcast, `pshufb`
//! byte spread, bit test), multiplied with activations by `maddubs`; the XNOR path counts bits
//! with the `pshufb` nibble table and `psadbw`.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::layout::binary::BinaryMatrix;
use crate::x86_64::hsum::hsum_epi32 as hsum;

const TILE_TOKENS: usize = 4;
const CHUNK_WORDS: usize = 32;

/// Byte codes {0, 1} for 32 bits.
#[target_feature(enable = "avx2")]
#[inline]
fn spread_bits(bits: u32, spread: __m256i, sel: __m256i, ones: __m256i) -> __m256i {
    let v = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), spread);
    _mm256_min_epu8(_mm256_and_si256(v, sel), ones)
}

/// Adds to `out[t * ostride]` the raw dots of one bit row (`nw` words) with T activation rows.
///
/// # Safety
/// AVX2; `bits` readable for `nw` words, `q` for `nw * 64` bytes of each of the T rows; `out`
/// writable at the T positions.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn tile<const T: usize>(
    bits: *const u64,
    q: *const i8,
    qstride: usize,
    nw: usize,
    out: *mut i32,
    ostride: usize,
) {
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
        3, 3,
    );
    let sel = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let ones8 = _mm256_set1_epi8(1);
    let ones16 = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_si256(); T];
    for wi in 0..nw {
        // SAFETY: word `wi` and its 64 activations of each of the T rows are readable.
        unsafe {
            let word = bits.add(wi).read();
            let c0 = spread_bits(word as u32, spread, sel, ones8);
            let c1 = spread_bits((word >> 32) as u32, spread, sel, ones8);
            for (t, a) in acc.iter_mut().enumerate() {
                let qa = q.add(t * qstride + wi * 64);
                let p0 = _mm256_maddubs_epi16(c0, _mm256_loadu_si256(qa.cast()));
                let p1 = _mm256_maddubs_epi16(c1, _mm256_loadu_si256(qa.add(32).cast()));
                *a = _mm256_add_epi32(*a, _mm256_madd_epi16(_mm256_add_epi16(p0, p1), ones16));
            }
        }
    }
    for (t, a) in acc.iter().enumerate() {
        // SAFETY: the caller guarantees `out` is writable at these T positions.
        unsafe { *out.add(t * ostride) += hsum(*a) };
    }
}

/// See the reference `raw_dots_multi` (`scalar/binary.rs`).
///
/// # Safety
/// AVX2; shapes as checked by `crate::layout::binary::check_raw_dots`.
#[target_feature(enable = "avx2")]
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
                // SAFETY: row `r` words k0..k0+nw exist; tokens t0..t0+tt are in `q`;
                // out[(t0 + t) * n + i] is in bounds for t < tt.
                unsafe {
                    let bp = w.bits.as_ptr().add(r * w.words + k0);
                    let qp = q.as_ptr().add(t0 * pc + k0 * 64);
                    let op = out.as_mut_ptr().add(t0 * n + i);
                    match tt {
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
/// AVX2; shapes as checked by `crate::layout::binary::check_raw_dots`.
#[target_feature(enable = "avx2")]
pub unsafe fn xor_popcounts(
    w: &BinaryMatrix,
    x: &[u64],
    rows: Range<usize>,
    words: Range<usize>,
    out: &mut [i32],
) {
    let lut = _mm256_setr_epi8(
        0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3,
        3, 4,
    );
    let m4 = _mm256_set1_epi8(0x0F);
    let nw = words.len();
    let full = nw / 4 * 4;
    for (o, r) in out.iter_mut().zip(rows) {
        let row = w.row_bits(r);
        let mut acc = _mm256_setzero_si256();
        let mut i = 0;
        while i < full {
            // SAFETY: words.start + i + 4 <= words.end <= row.len() and <= x.len().
            let v = unsafe {
                _mm256_xor_si256(
                    _mm256_loadu_si256(row.as_ptr().add(words.start + i).cast()),
                    _mm256_loadu_si256(x.as_ptr().add(words.start + i).cast()),
                )
            };
            let lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
            let hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4));
            acc = _mm256_add_epi64(
                acc,
                _mm256_sad_epu8(_mm256_add_epi8(lo, hi), _mm256_setzero_si256()),
            );
            i += 4;
        }
        let mut total = hsum(acc);
        for wi in words.start + full..words.end {
            total += (row[wi] ^ x[wi]).count_ones() as i32;
        }
        *o = total;
    }
}
