//! The Q6_K output head in the layout its kernels stream ([`Q6KR`]): a file's Q6_K head
//! (bitnet.cpp's recommended embedding) or `--head q6_k`, at 6.625 bits a weight as in the
//! file, with no horizontal sum in its product.
//!
//! ## Why a layout of its own
//! In Q6_K rows a product dots one row at a time: every 256-element block ends in a
//! horizontal sum of its lanes, its 16 sub-block scales are shuffled into place per row, and
//! the codes are unpacked from two planes whose order suits the scalar decoder. On a 2 GHz
//! core that costs twice the time the row's bytes take to arrive. As in
//! [`crate::layout::q8r::Q8R`], rows come in groups of 16 interleaved four columns at a time,
//! so each 32-bit lane of a register is one row: a block's integer dot accumulates in lanes,
//! each sub-block's 16 scales are one sign-extending load, and nothing is summed across lanes.
//!
//! ## Layout
//! Rows come in groups of [`Q6KR_ROWS`] = 16, the last group padded with zero rows (scale 0,
//! codes 0). A group is its blocks (256 columns) in column order, each [`Q6KR_BLOCK_BYTES`] =
//! 3,392 bytes (53 lines of 64; the 16 rows' 210-byte Q6_K blocks are 3,360 of them):
//!
//! - bytes `0..32`: `d` of each row, f16, `[row r]`; bytes `32..64` zero;
//! - bytes `64..320`: the sub-block scales, i8, `[sub-block j < 16][row r]`;
//! - from byte 320, per sub-block `j` (columns `16 j..16 j + 16`) 192 bytes, three lines:
//!   - line 0, byte `4 r + c`: low nibble the low 4 bits of row `r`'s code at column
//!     `16 j + c`, high nibble those at column `16 j + 8 + c` (`c < 4`);
//!   - line 1, byte `4 r + c`: the same for columns `16 j + 4 + c` and `16 j + 12 + c`;
//!   - line 2, byte `4 r + c`: bits `2 i..2 i + 2` the high 2 bits of the code at column
//!     `16 j + 4 i + c` (`i < 4`).
//!
//! A code is the Q6_K one, 0..63 for a weight `d * sc_j * (code - 32)`. So the four
//! "code lines" of a sub-block (four consecutive columns of all 16 rows, 64 bytes: one
//! AVX-512 register, two AVX2 ones, four NEON ones) come out of its three lines with a shift
//! and two masks each, ready to multiply the same four activation bytes broadcast to every
//! row. Group `g` starts at byte `g * n_blocks * 3392`; a range of whole groups is one stretch.

use std::ops::Range;

use crate::aligned::AlignedVec;
use crate::error::KernelError;
use crate::extent::holds;
use crate::layout::half::f16_to_f32;
use crate::layout::q8k::{Q8K_SUB, Q8K_SUMS, Q8KActs};
use crate::layout::rows::{Q6K_BLOCK_BYTES, QK_K, RowFormat, dequantize_row, q6k_position};

/// Rows of a group.
pub const Q6KR_ROWS: usize = 16;
/// Bytes of one block of a group.
pub const Q6KR_BLOCK_BYTES: usize = Q6KR_CODES + Q8K_SUMS * Q6KR_SUB_BYTES;
/// Offset of the scales in a block.
pub const Q6KR_SCALES: usize = 64;
/// Offset of sub-block 0's lines in a block.
pub const Q6KR_CODES: usize = Q6KR_SCALES + Q8K_SUMS * Q6KR_ROWS;
/// Bytes of one sub-block's three lines.
pub const Q6KR_SUB_BYTES: usize = 3 * 64;
/// Largest `rows * cols` accepted (keeps every index in range).
pub const Q6KR_MAX_ELEMENTS: usize = 1 << 40;

const _: () = assert!(Q6KR_BLOCK_BYTES == 3392 && Q6KR_BLOCK_BYTES.is_multiple_of(64));
const _: () = assert!(Q6KR_CODES == 320 && Q8K_SUB == 16);

// Offsets inside a Q6_K block (`crate::layout::rows`): codes' high bits, scales, d.
const Q6K_QH: usize = QK_K / 2;
const Q6K_SC: usize = Q6K_QH + QK_K / 4;
const Q6K_D: usize = Q6K_SC + QK_K / 16;

/// The 6-bit codes (0..63) of a Q6_K block's 256 elements, in element order (the inverse of
/// [`q6k_position`], a half-block at a time: one pass over its bytes, as a loader wants).
fn q6k_codes(blk: &[u8]) -> [u8; QK_K] {
    let mut codes = [0u8; QK_K];
    for n in 0..2 {
        let (ql, qh) = (
            &blk[64 * n..64 * n + 64],
            &blk[Q6K_QH + 32 * n..Q6K_QH + 32 * n + 32],
        );
        let out = &mut codes[128 * n..128 * n + 128];
        for l in 0..32 {
            let h = qh[l];
            out[l] = (ql[l] & 0x0f) | ((h & 3) << 4);
            out[32 + l] = (ql[32 + l] & 0x0f) | (((h >> 2) & 3) << 4);
            out[64 + l] = (ql[l] >> 4) | (((h >> 4) & 3) << 4);
            out[96 + l] = (ql[32 + l] >> 4) | (((h >> 6) & 3) << 4);
        }
    }
    codes
}

/// Where column `e < 256` of row `r` lies in a group's block: (offset of its low 4 bits'
/// byte, their shift (0 or 4), offset of its high 2 bits' byte, their shift).
fn position(r: usize, e: usize) -> (usize, u32, usize, u32) {
    let (j, col) = (e / Q8K_SUB, e % Q8K_SUB);
    let (i, c) = (col / 4, col % 4);
    let sub = Q6KR_CODES + j * Q6KR_SUB_BYTES + 4 * r + c;
    // Code line i comes from nibble line i % 2, its high nibble for i >= 2.
    (
        sub + 64 * (i % 2),
        4 * (i as u32 / 2),
        sub + 128,
        2 * i as u32,
    )
}

/// Q6_K weight rows in the grouped layout of the module docs.
#[derive(Clone, Debug)]
pub struct Q6KR {
    rows: usize,
    cols: usize,
    /// Blocks of a row.
    nb: usize,
    data: AlignedVec<u8>,
}

fn check_shape(rows: usize, cols: usize) -> Result<usize, KernelError> {
    let bad = |reason| KernelError::BadShape {
        format: "Q6KR",
        rows,
        cols,
        reason,
    };
    if !cols.is_multiple_of(QK_K) {
        return Err(bad("columns are not whole Q6_K blocks"));
    }
    let padded = rows
        .div_ceil(Q6KR_ROWS)
        .checked_mul(Q6KR_ROWS)
        .and_then(|r| r.checked_mul(cols));
    match padded {
        Some(n) if n <= Q6KR_MAX_ELEMENTS => Ok(cols / QK_K),
        _ => Err(bad("too many elements")),
    }
}

impl Q6KR {
    /// An all-zero matrix of `rows x cols` to be filled group by group ([`Q6KR::data_mut`],
    /// [`Q6KR::write_group`]); huge-page backed where the system allows.
    pub fn zeroed(rows: usize, cols: usize) -> Result<Q6KR, KernelError> {
        let nb = check_shape(rows, cols)?;
        let len = rows.div_ceil(Q6KR_ROWS) * nb * Q6KR_BLOCK_BYTES;
        Ok(Q6KR {
            rows,
            cols,
            nb,
            data: AlignedVec::zeroed_huge(len),
        })
    }

    /// The matrix of `rows` Q6_K rows of `cols` elements (`src`, ggml's `block_q6_K` rows).
    pub fn from_q6k_rows(src: &[u8], rows: usize, cols: usize) -> Result<Q6KR, KernelError> {
        let mut m = Q6KR::zeroed(rows, cols)?;
        let rb = m.nb * Q6K_BLOCK_BYTES;
        let expected = rows * rb;
        if src.len() != expected {
            return Err(KernelError::SourceLength {
                format: "Q6_K",
                rows,
                cols,
                expected,
                got: src.len(),
            });
        }
        let gb = m.group_bytes();
        if gb > 0 {
            for (g, dst) in m.data.chunks_exact_mut(gb).enumerate() {
                let first = g * Q6KR_ROWS;
                let last = (first + Q6KR_ROWS).min(rows);
                Q6KR::write_group(cols, &src[first * rb..last * rb], dst);
            }
        }
        Ok(m)
    }

    /// Writes one group (`dst`, [`Q6KR::group_bytes_for`]`(cols)` bytes) from at most
    /// [`Q6KR_ROWS`] Q6_K rows of `cols` elements (`src`); rows past them are zero.
    ///
    /// # Panics
    /// If `cols` is not whole Q6_K blocks, `src` is not whole rows of them (at most 16) or
    /// `dst` is not a group's size.
    pub fn write_group(cols: usize, src: &[u8], dst: &mut [u8]) {
        assert!(
            cols.is_multiple_of(QK_K),
            "Q6KR::write_group: columns are not whole Q6_K blocks"
        );
        let rb = cols / QK_K * Q6K_BLOCK_BYTES;
        let n = src.len().checked_div(rb).unwrap_or(0);
        assert!(
            n * rb == src.len() && n <= Q6KR_ROWS,
            "Q6KR::write_group: source is not whole rows"
        );
        assert_eq!(
            dst.len(),
            Q6KR::group_bytes_for(cols),
            "Q6KR::write_group: wrong group size"
        );
        dst.fill(0);
        for (r, row) in src.chunks_exact(rb.max(1)).take(n).enumerate() {
            for (b, blk) in row.chunks_exact(Q6K_BLOCK_BYTES).enumerate() {
                let out = &mut dst[b * Q6KR_BLOCK_BYTES..][..Q6KR_BLOCK_BYTES];
                out[2 * r..2 * r + 2].copy_from_slice(&blk[Q6K_D..Q6K_D + 2]);
                for j in 0..Q8K_SUMS {
                    out[Q6KR_SCALES + Q6KR_ROWS * j + r] = blk[Q6K_SC + j];
                }
                let codes = q6k_codes(blk);
                for (j, c16) in codes.chunks_exact(Q8K_SUB).enumerate() {
                    let sub = &mut out[Q6KR_CODES + j * Q6KR_SUB_BYTES..][..Q6KR_SUB_BYTES];
                    for c in 0..4 {
                        let at = 4 * r + c;
                        sub[at] = (c16[c] & 0x0f) | (c16[8 + c] << 4);
                        sub[64 + at] = (c16[4 + c] & 0x0f) | (c16[12 + c] << 4);
                        sub[128 + at] =
                            (0..4).fold(0, |h, i| h | ((c16[4 * i + c] >> 4) << (2 * i)));
                    }
                }
            }
        }
    }

    /// Bytes of one group of a matrix of `cols` columns (whole Q6_K blocks).
    pub fn group_bytes_for(cols: usize) -> usize {
        cols / QK_K * Q6KR_BLOCK_BYTES
    }

    /// Bytes of one group.
    pub fn group_bytes(&self) -> usize {
        self.nb * Q6KR_BLOCK_BYTES
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row groups (the last one padded).
    pub fn groups(&self) -> usize {
        self.rows.div_ceil(Q6KR_ROWS)
    }

    /// Blocks of a row (of a group: the walk's super-blocks).
    pub fn super_blocks(&self) -> usize {
        self.nb
    }

    /// The whole buffer: every group, padding included (what a product streams).
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The whole buffer, to be written group by group with [`Q6KR::write_group`].
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// Row `r` as Q6_K bytes (`out`: one row of `cols`), as the row layout holds it: the
    /// bytes it was made from.
    ///
    /// # Panics
    /// If `r >= rows` or `out` is not a Q6_K row of `cols`.
    pub fn q6k_row(&self, r: usize, out: &mut [u8]) {
        assert!(r < self.rows, "Q6KR::q6k_row: row {r} of {}", self.rows);
        assert_eq!(
            out.len(),
            self.nb * Q6K_BLOCK_BYTES,
            "Q6KR::q6k_row: wrong length"
        );
        let group = &self.data[(r / Q6KR_ROWS) * self.group_bytes()..][..self.group_bytes()];
        let rr = r % Q6KR_ROWS;
        for (b, blk) in out.chunks_exact_mut(Q6K_BLOCK_BYTES).enumerate() {
            let src = &group[b * Q6KR_BLOCK_BYTES..][..Q6KR_BLOCK_BYTES];
            blk.fill(0);
            blk[Q6K_D..Q6K_D + 2].copy_from_slice(&src[2 * rr..2 * rr + 2]);
            for j in 0..Q8K_SUMS {
                blk[Q6K_SC + j] = src[Q6KR_SCALES + Q6KR_ROWS * j + rr];
            }
            for e in 0..QK_K {
                let (lo, nib, hb, hi) = position(rr, e);
                let code = ((src[lo] >> nib) & 0x0f) | (((src[hb] >> hi) & 3) << 4);
                let (qli, high, qhi, shift) = q6k_position(e);
                blk[qli] |= (code & 0x0f) << if high { 4 } else { 0 };
                blk[Q6K_QH + qhi] |= (code >> 4) << shift;
            }
        }
    }

    /// Row `r` as f32, as [`dequantize_row`] decodes its Q6_K bytes (an embedding tied to
    /// this head is read from here).
    ///
    /// # Panics
    /// If `r >= rows` or `out.len() != cols`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        assert_eq!(out.len(), self.cols, "Q6KR::dequantize_row: wrong length");
        let mut row = vec![0u8; self.nb * Q6K_BLOCK_BYTES];
        self.q6k_row(r, &mut row);
        dequantize_row(RowFormat::Q6K, &row, out);
    }

    /// Row `r`'s `d` of block `b` as f32 (the scalar reference reads it).
    pub(crate) fn d(&self, r: usize, b: usize) -> f32 {
        let at = (r / Q6KR_ROWS) * self.group_bytes() + b * Q6KR_BLOCK_BYTES + 2 * (r % Q6KR_ROWS);
        f16_to_f32(u16::from_le_bytes([self.data[at], self.data[at + 1]]))
    }
}

/// The shape checks of a [`Q6KR`] product, made by the safe API and again by every SIMD
/// token method (their kernels index raw pointers from these): activations of the matrix's
/// width with room for `n_tok` rows, `rows` whole groups inside the matrix (the end may be
/// the last row), and `out` of `n_tok * rows.len()`.
///
/// # Panics
/// On any mismatch, with a message.
pub(crate) fn check_matmul(w: &Q6KR, x: &Q8KActs, n_tok: usize, rows: &Range<usize>, out: &[f32]) {
    assert_eq!(
        w.cols,
        x.cols(),
        "matmul_q6kr: weights and activations differ in width"
    );
    assert!(
        n_tok <= x.capacity(),
        "matmul_q6kr: {n_tok} token rows, room for {}",
        x.capacity()
    );
    assert!(
        rows.start <= rows.end && rows.end <= w.rows,
        "matmul_q6kr: bad row range {rows:?} of {}",
        w.rows
    );
    assert!(
        rows.start.is_multiple_of(Q6KR_ROWS)
            && (rows.end.is_multiple_of(Q6KR_ROWS) || rows.end == w.rows),
        "matmul_q6kr: row range {rows:?} is not whole groups of {Q6KR_ROWS}"
    );
    assert!(
        holds(out.len(), n_tok, rows.len()) && out.len() == n_tok * rows.len(),
        "matmul_q6kr: out must be n_tok x rows"
    );
    debug_assert!(holds(w.data.len(), w.groups(), w.group_bytes()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_codes_follow_the_element_order() {
        let blk: Vec<u8> = (0..Q6K_BLOCK_BYTES).map(|i| (i * 89 % 256) as u8).collect();
        let codes = q6k_codes(&blk);
        for (e, &code) in codes.iter().enumerate() {
            let (qli, high, qhi, shift) = q6k_position(e);
            let lo = if high { blk[qli] >> 4 } else { blk[qli] & 0x0f };
            assert_eq!(
                code,
                lo | (((blk[Q6K_QH + qhi] >> shift) & 3) << 4),
                "element {e}"
            );
        }
    }

    #[test]
    fn rows_round_trip_through_the_groups() {
        let (rows, cols) = (21, 512);
        let rb = cols / QK_K * Q6K_BLOCK_BYTES;
        let src: Vec<u8> = (0..rows * rb).map(|i| (i * 37 % 251) as u8).collect();
        let m = Q6KR::from_q6k_rows(&src, rows, cols).unwrap();
        assert_eq!(m.groups(), 2);
        assert_eq!(m.bytes().len(), 2 * 2 * Q6KR_BLOCK_BYTES);
        let mut row = vec![0u8; rb];
        for r in 0..rows {
            m.q6k_row(r, &mut row);
            assert_eq!(&row[..], &src[r * rb..(r + 1) * rb], "row {r}");
        }
        let (mut a, mut b) = (vec![0.0f32; cols], vec![0.0f32; cols]);
        m.dequantize_row(20, &mut a);
        dequantize_row(RowFormat::Q6K, &src[20 * rb..21 * rb], &mut b);
        assert_eq!(a, b);
        // Padding rows (5..16 of the second group) are zero, and so is every byte that is
        // no row's (the 32 after the d's).
        let second = &m.bytes()[m.group_bytes()..];
        for blk in second.chunks_exact(Q6KR_BLOCK_BYTES) {
            assert!(blk[32..64].iter().all(|&v| v == 0));
            for r in 5..Q6KR_ROWS {
                assert_eq!(&blk[2 * r..2 * r + 2], &[0, 0]);
                for e in 0..QK_K {
                    let (lo, nib, hb, hi) = position(r, e);
                    assert_eq!((blk[lo] >> nib) & 0x0f, 0);
                    assert_eq!((blk[hb] >> hi) & 3, 0);
                }
                assert!((0..Q8K_SUMS).all(|j| blk[Q6KR_SCALES + Q6KR_ROWS * j + r] == 0));
            }
        }
        assert!(Q6KR::from_q6k_rows(&src[1..], rows, cols).is_err());
        assert!(Q6KR::zeroed(3, 200).is_err());
    }
}
