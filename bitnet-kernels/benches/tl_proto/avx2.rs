//! AVX2 table-lookup prototype (T-MAC / bitnet.cpp TL1 style), exact: two trits form one
//! 4-bit index `c0 + 3 c1` (9 values); a byte holds the indices of two column pairs for one
//! row, 32 rows per 32-byte vector (2 bits/weight, the same bytes as the 2-bit layout). Per
//! activation pair a 16-entry i16 table `(c0 - 1) a0 + (c1 - 1) a1` is split into a low-byte
//! and a high-byte plane so that `pshufb` can look it up; the planes are re-interleaved into
//! i16 by `unpacklo/hi_epi8` and summed in i16 (flushed to i32 every 32 bytes: 64 * 256 <
//! 32768).

use std::arch::x86_64::*;

use bitnet_kernels::AlignedVec;

const GROUP_ROWS: usize = 32;
const FLUSH_BYTES: usize = 32;

/// A ternary matrix in the AVX2 table-lookup layout.
#[derive(Debug)]
pub struct Tl1Matrix {
    rows: usize,
    /// Bytes per row (each covers 4 columns).
    bytes: usize,
    data: AlignedVec<u8>,
}

impl Tl1Matrix {
    pub fn new(trits: &[i8], rows: usize, cols: usize) -> Self {
        let bytes = cols.div_ceil(4);
        let groups = rows.div_ceil(GROUP_ROWS);
        // Index 4 = codes (1, 1) = two zero weights: the padding value.
        let mut data = AlignedVec::<u8>::zeroed(groups * bytes * GROUP_ROWS);
        data.fill(4 | 4 << 4);
        for r in 0..rows {
            for k in 0..bytes {
                let mut byte = 0u8;
                for p in 0..2 {
                    let code = |c: usize| {
                        if c < cols {
                            (trits[r * cols + c] + 1) as u8
                        } else {
                            1
                        }
                    };
                    let c0 = 4 * k + 2 * p;
                    byte |= (code(c0) + 3 * code(c0 + 1)) << (4 * p);
                }
                data[((r / GROUP_ROWS) * bytes + k) * GROUP_ROWS + r % GROUP_ROWS] = byte;
            }
        }
        Tl1Matrix { rows, bytes, data }
    }

    /// Activations padded to `4 * bytes`.
    pub fn padded_cols(&self) -> usize {
        4 * self.bytes
    }
}

/// Tables: for pair `j`, 32 bytes: 16 low bytes then 16 high bytes of the i16 entries.
///
/// # Safety
/// AVX2; `q.len() >= 2 * tables.len() / 32`.
#[target_feature(enable = "avx2")]
pub unsafe fn build_tables(q: &[i8], tables: &mut [u8]) {
    let mut coef = [[0i16; 16]; 2];
    for (m, row) in coef.iter_mut().enumerate() {
        for (i, v) in row[..9].iter_mut().enumerate() {
            *v = ((i / [1, 3][m]) % 3) as i16 - 1;
        }
    }
    // SAFETY: each coefficient row holds 16 i16.
    let (c0, c1) = unsafe {
        (
            _mm256_loadu_si256(coef[0].as_ptr().cast()),
            _mm256_loadu_si256(coef[1].as_ptr().cast()),
        )
    };
    // Per 128-bit lane: low bytes of the 8 entries, then their high bytes.
    let split = _mm256_setr_epi8(
        0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5,
        7, 9, 11, 13, 15,
    );
    for (j, t) in tables.chunks_exact_mut(32).enumerate() {
        let e = _mm256_add_epi16(
            _mm256_mullo_epi16(c0, _mm256_set1_epi16(q[2 * j] as i16)),
            _mm256_mullo_epi16(c1, _mm256_set1_epi16(q[2 * j + 1] as i16)),
        );
        // [lo0..7 hi0..7 | lo8..15 hi8..15] -> [lo0..7 lo8..15 | hi0..7 hi8..15]
        let v = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_shuffle_epi8(e, split));
        // SAFETY: `t` holds 32 bytes.
        unsafe { _mm256_storeu_si256(t.as_mut_ptr().cast(), v) };
    }
}

/// `acc + (8 i16 lanes widened to i32)`.
#[target_feature(enable = "avx2")]
#[inline]
fn widen_add(acc: __m256i, v16: __m128i) -> __m256i {
    _mm256_add_epi32(acc, _mm256_cvtepi16_epi32(v16))
}

/// Exact `sum_j w[r][j] q[j]` for all rows from the tables.
///
/// # Safety
/// AVX2; `tables` built for this matrix's `padded_cols`; `out.len() >= rows`.
#[target_feature(enable = "avx2")]
pub unsafe fn matvec(w: &Tl1Matrix, tables: &[u8], out: &mut [i32]) {
    let m4 = _mm256_set1_epi8(0x0F);
    for g in 0..w.rows.div_ceil(GROUP_ROWS) {
        // i32 sums of rows 0..8, 8..16, 16..24, 24..32.
        let mut acc = [_mm256_setzero_si256(); 4];
        let mut k = 0;
        while k < w.bytes {
            let end = (k + FLUSH_BYTES).min(w.bytes);
            let mut s0 = _mm256_setzero_si256();
            let mut s1 = _mm256_setzero_si256();
            for kk in k..end {
                // SAFETY: byte column `kk` of group `g` and pair tables 2kk, 2kk+1 exist.
                unsafe {
                    let x = _mm256_load_si256(
                        w.data.as_ptr().add((g * w.bytes + kk) * GROUP_ROWS).cast(),
                    );
                    let idx = [
                        _mm256_and_si256(x, m4),
                        _mm256_and_si256(_mm256_srli_epi16::<4>(x), m4),
                    ];
                    for (p, &i) in idx.iter().enumerate() {
                        let t = tables.as_ptr().add((2 * kk + p) * 32);
                        let lo_t = _mm256_broadcastsi128_si256(_mm_loadu_si128(t.cast()));
                        let hi_t = _mm256_broadcastsi128_si256(_mm_loadu_si128(t.add(16).cast()));
                        let lo = _mm256_shuffle_epi8(lo_t, i);
                        let hi = _mm256_shuffle_epi8(hi_t, i);
                        s0 = _mm256_add_epi16(s0, _mm256_unpacklo_epi8(lo, hi));
                        s1 = _mm256_add_epi16(s1, _mm256_unpackhi_epi8(lo, hi));
                    }
                }
            }
            // unpacklo: lane 0 -> rows 0..8, lane 1 -> rows 16..24; unpackhi: 8..16, 24..32.
            acc[0] = widen_add(acc[0], _mm256_castsi256_si128(s0));
            acc[2] = widen_add(acc[2], _mm256_extracti128_si256::<1>(s0));
            acc[1] = widen_add(acc[1], _mm256_castsi256_si128(s1));
            acc[3] = widen_add(acc[3], _mm256_extracti128_si256::<1>(s1));
            k = end;
        }
        let mut lanes = [0i32; 32];
        for (a, chunk) in acc.iter().zip(lanes.chunks_exact_mut(8)) {
            // SAFETY: `chunk` holds 8 i32.
            unsafe { _mm256_storeu_si256(chunk.as_mut_ptr().cast(), *a) };
        }
        for (i, &v) in lanes.iter().enumerate() {
            if let Some(o) = out.get_mut(g * GROUP_ROWS + i) {
                *o = v;
            }
        }
    }
}
