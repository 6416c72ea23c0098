//! The Q4_0 output head in the layout its kernels stream ([`Q4R`]); its activations are the
//! Q8_0 head's ([`crate::layout::q8r::Q8Acts`]).
//!
//! ## Why a layout of its own
//! In ggml's rows a Q4_0 block is 18 bytes: four rows side by side are four streams of
//! unaligned 16-byte nibble loads, each unpacked twice and multiplied by its own activations,
//! and a core spends more instructions on a byte than it reads (`--head q4_0` ran at half a
//! plain read on every x86 set). [`Q4R`] holds the same nibbles so that a thread reads one
//! sequential stream of aligned 64-byte lines, each multiplied into 16 rows at once, as
//! [`crate::layout::q8r::Q8R`] does for Q8_0.
//!
//! ## Layout
//! Rows come in groups of [`Q4R_ROWS`] = 16, the last group padded with zero rows (scale 0,
//! nibbles 8, that is weight 0). Columns are padded with zero blocks to a multiple of
//! [`Q4R_SB_COLS`] = 128, a super-block of four Q4_0 blocks (the Q8_0 activations' super-block).
//! A group is its super-blocks in column order, each [`Q4R_SB_BYTES`] = 1,152 bytes (18 lines;
//! every super-block starts on a 64-byte line):
//!
//! - bytes `0..128`: the f16 scales, `[block b < 4][row r < 16]`: byte `2 (16 b + r)`;
//! - bytes `128..1152`: the nibbles, `[block b < 4][k < 4][row r < 16][j < 4]`: byte
//!   `128 + 64 (4 b + k) + 4 r + j` is byte `4 k + j` of row `r`'s block `b` as ggml stores
//!   it: its low nibble is column `32 b + 4 k + j` of the super-block, its high nibble column
//!   `32 b + 16 + 4 k + j`.
//!
//! So a line's low nibbles are four consecutive columns of each of the 16 rows, and its high
//! nibbles the four columns 16 further: a product multiplies each by the same four activation
//! bytes broadcast to every row. A weight is `d * (nibble - 8)`.

use std::ops::Range;

use crate::aligned::AlignedVec;
use crate::error::KernelError;
use crate::extent::holds;
use crate::layout::half::f16_to_f32;
use crate::layout::q8r::Q8Acts;
use crate::layout::rows::{Q4_0_BLOCK_BYTES, QK4_0, RowFormat};

/// Rows of a group.
pub const Q4R_ROWS: usize = 16;
/// Q4_0 blocks of a super-block.
pub const Q4R_SB_BLOCKS: usize = 4;
/// Columns of a super-block (and the column padding granule).
pub const Q4R_SB_COLS: usize = Q4R_SB_BLOCKS * QK4_0;
/// Bytes of a super-block's scales: `[block][row]` f16.
pub const Q4R_SCALE_BYTES: usize = Q4R_SB_BLOCKS * Q4R_ROWS * 2;
/// Bytes of one line of nibbles: eight columns of every row of the group.
pub const Q4R_LINE: usize = 4 * Q4R_ROWS;
/// Lines of nibbles of one block.
pub const Q4R_BLOCK_LINES: usize = QK4_0 / 2 / 4;
/// Bytes of a super-block of one group: its scales, then its nibbles.
pub const Q4R_SB_BYTES: usize = Q4R_SCALE_BYTES + Q4R_SB_COLS * Q4R_ROWS / 2;
/// Largest `rows * cols` accepted (keeps every index in range).
pub const Q4R_MAX_ELEMENTS: usize = 1 << 40;

const _: () = assert!(Q4R_SB_BYTES == 1152 && Q4R_SB_BYTES.is_multiple_of(64));
const _: () = assert!(Q4R_LINE == 64 && Q4R_BLOCK_LINES == 4);

/// The nibble byte of a padding row or block: both nibbles 8, weight 0.
const ZERO_NIBBLES: u8 = 0x88;

/// Q4_0 weight rows in the grouped layout of the module docs.
#[derive(Clone, Debug)]
pub struct Q4R {
    rows: usize,
    cols: usize,
    /// Super-blocks per group (`cols` rounded up to [`Q4R_SB_COLS`]).
    n_sb: usize,
    data: AlignedVec<u8>,
}

/// `(rows, cols)` checked for a Q4R matrix: `cols` whole Q4_0 blocks and the sizes in range.
fn check_shape(rows: usize, cols: usize) -> Result<usize, KernelError> {
    let bad = |reason| KernelError::BadShape {
        format: "Q4R",
        rows,
        cols,
        reason,
    };
    if !cols.is_multiple_of(QK4_0) {
        return Err(bad("columns are not whole Q4_0 blocks"));
    }
    let n_sb = cols.div_ceil(Q4R_SB_COLS);
    let padded = rows
        .div_ceil(Q4R_ROWS)
        .checked_mul(Q4R_ROWS)
        .and_then(|r| r.checked_mul(n_sb * Q4R_SB_COLS));
    match padded {
        Some(n) if n <= Q4R_MAX_ELEMENTS => Ok(n_sb),
        _ => Err(bad("too many elements")),
    }
}

impl Q4R {
    /// A matrix of `rows x cols` zero weights to be filled group by group ([`Q4R::data_mut`],
    /// [`Q4R::write_group`]). The buffer is huge-page backed where the system allows.
    pub fn zeroed(rows: usize, cols: usize) -> Result<Q4R, KernelError> {
        let n_sb = check_shape(rows, cols)?;
        let len = rows.div_ceil(Q4R_ROWS) * n_sb * Q4R_SB_BYTES;
        let mut data = AlignedVec::zeroed_huge(len);
        for sb in data.chunks_exact_mut(Q4R_SB_BYTES) {
            sb[Q4R_SCALE_BYTES..].fill(ZERO_NIBBLES);
        }
        Ok(Q4R {
            rows,
            cols,
            n_sb,
            data,
        })
    }

    /// The matrix of `rows` Q4_0 rows of `cols` elements (`src`, ggml's `block_q4_0` rows).
    pub fn from_q4_0_rows(src: &[u8], rows: usize, cols: usize) -> Result<Q4R, KernelError> {
        let mut m = Q4R::zeroed(rows, cols)?;
        let rb = RowFormat::Q4_0.row_bytes(cols).unwrap_or(0);
        let expected = rows * rb;
        if src.len() != expected {
            return Err(KernelError::SourceLength {
                format: "Q4_0",
                rows,
                cols,
                expected,
                got: src.len(),
            });
        }
        let gb = m.group_bytes();
        if gb > 0 {
            for (g, dst) in m.data.chunks_exact_mut(gb).enumerate() {
                let first = g * Q4R_ROWS;
                let last = (first + Q4R_ROWS).min(rows);
                Q4R::write_group(cols, &src[first * rb..last * rb], dst);
            }
        }
        Ok(m)
    }

    /// Writes one group (`dst`, [`Q4R::group_bytes_for`] bytes) from its Q4_0 rows (`src`,
    /// at most [`Q4R_ROWS`] rows of `cols`); rows and blocks past the source are zero weights.
    ///
    /// # Panics
    /// If `cols` is not whole blocks, `src` is not whole rows (or more than a group), or `dst`
    /// is not one group.
    pub fn write_group(cols: usize, src: &[u8], dst: &mut [u8]) {
        let rb = RowFormat::Q4_0
            .row_bytes(cols)
            .expect("Q4R::write_group: columns are whole Q4_0 blocks");
        let n = src.len().checked_div(rb).unwrap_or(0);
        assert!(
            n * rb == src.len() && n <= Q4R_ROWS,
            "Q4R::write_group: source is not whole rows"
        );
        assert_eq!(
            dst.len(),
            Q4R::group_bytes_for(cols),
            "Q4R::write_group: wrong group size"
        );
        for sb in dst.chunks_exact_mut(Q4R_SB_BYTES) {
            sb[..Q4R_SCALE_BYTES].fill(0);
            sb[Q4R_SCALE_BYTES..].fill(ZERO_NIBBLES);
        }
        for (r, row) in src.chunks_exact(rb.max(1)).take(n).enumerate() {
            for (b, blk) in row.chunks_exact(Q4_0_BLOCK_BYTES).enumerate() {
                let sb = &mut dst[(b / Q4R_SB_BLOCKS) * Q4R_SB_BYTES..][..Q4R_SB_BYTES];
                let bb = b % Q4R_SB_BLOCKS;
                sb[2 * (bb * Q4R_ROWS + r)..][..2].copy_from_slice(&blk[..2]);
                for (k, quad) in blk[2..].chunks_exact(4).enumerate() {
                    let at = Q4R_SCALE_BYTES + Q4R_LINE * (Q4R_BLOCK_LINES * bb + k) + 4 * r;
                    sb[at..at + 4].copy_from_slice(quad);
                }
            }
        }
    }

    /// Bytes of one group of a matrix `cols` wide.
    pub fn group_bytes_for(cols: usize) -> usize {
        cols.div_ceil(Q4R_SB_COLS) * Q4R_SB_BYTES
    }

    /// Bytes of one group.
    pub fn group_bytes(&self) -> usize {
        self.n_sb * Q4R_SB_BYTES
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row groups (the last may be padded).
    pub fn groups(&self) -> usize {
        self.rows.div_ceil(Q4R_ROWS)
    }

    /// Q4_0 blocks of a row.
    pub fn blocks(&self) -> usize {
        self.cols / QK4_0
    }

    /// Super-blocks of a group.
    pub fn super_blocks(&self) -> usize {
        self.n_sb
    }

    /// The whole buffer, group after group.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The whole buffer, to be filled with [`Q4R::write_group`], one group per
    /// [`Q4R::group_bytes`].
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// Row `r`'s block `b` as ggml stores it: the f16 scale's bits and the 16 nibble bytes.
    ///
    /// # Panics
    /// If `r` or `b` is out of range.
    pub fn row_block(&self, r: usize, b: usize) -> (u16, [u8; QK4_0 / 2]) {
        assert!(
            r < self.rows && b < self.blocks(),
            "Q4R::row_block: out of range"
        );
        let sb = &self.data[((r / Q4R_ROWS) * self.n_sb + b / Q4R_SB_BLOCKS) * Q4R_SB_BYTES..]
            [..Q4R_SB_BYTES];
        let (bb, rr) = (b % Q4R_SB_BLOCKS, r % Q4R_ROWS);
        let at = 2 * (bb * Q4R_ROWS + rr);
        let d = u16::from_le_bytes([sb[at], sb[at + 1]]);
        let q = std::array::from_fn(|i| {
            sb[Q4R_SCALE_BYTES + Q4R_LINE * (Q4R_BLOCK_LINES * bb + i / 4) + 4 * rr + i % 4]
        });
        (d, q)
    }

    /// Row `r`'s weights as f32 (`out.len() == cols`).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        assert_eq!(out.len(), self.cols, "Q4R::dequantize_row: wrong length");
        for (b, y) in out.chunks_exact_mut(QK4_0).enumerate() {
            let (d, q) = self.row_block(r, b);
            let d = f16_to_f32(d);
            for (j, &byte) in q.iter().enumerate() {
                y[j] = d * f32::from(i16::from(byte & 0x0F) - 8);
                y[j + QK4_0 / 2] = d * f32::from(i16::from(byte >> 4) - 8);
            }
        }
    }

    /// Row `r` as a ggml Q4_0 row (`out.len()` its row bytes).
    pub fn q4_0_row(&self, r: usize, out: &mut [u8]) {
        assert_eq!(
            Some(out.len()),
            RowFormat::Q4_0.row_bytes(self.cols),
            "Q4R::q4_0_row: wrong length"
        );
        for (b, blk) in out.chunks_exact_mut(Q4_0_BLOCK_BYTES).enumerate() {
            let (d, q) = self.row_block(r, b);
            blk[..2].copy_from_slice(&d.to_le_bytes());
            blk[2..].copy_from_slice(&q);
        }
    }
}

/// Checks a `matmul_q4r` call: as the Q8_0 head's, with [`Q4R_ROWS`]-row groups.
///
/// # Panics
/// On any mismatch, with a message.
pub(crate) fn check_matmul(w: &Q4R, x: &Q8Acts, n_tok: usize, rows: &Range<usize>, out: &[f32]) {
    assert_eq!(
        w.cols,
        x.cols(),
        "matmul_q4r: weights and activations differ in width"
    );
    assert!(
        n_tok <= x.capacity(),
        "matmul_q4r: {n_tok} token rows, room for {}",
        x.capacity()
    );
    assert!(
        rows.start <= rows.end && rows.end <= w.rows,
        "matmul_q4r: bad row range {rows:?} of {}",
        w.rows
    );
    assert!(
        rows.start.is_multiple_of(Q4R_ROWS)
            && (rows.end.is_multiple_of(Q4R_ROWS) || rows.end == w.rows),
        "matmul_q4r: row range {rows:?} is not whole groups of {Q4R_ROWS}"
    );
    assert!(
        holds(out.len(), n_tok, rows.len()) && out.len() == n_tok * rows.len(),
        "matmul_q4r: out must be n_tok x rows"
    );
    // What the kernels' pointers rely on: the activations' super-blocks are the weights'.
    debug_assert_eq!(x.padded_cols(), w.n_sb * Q4R_SB_COLS);
    debug_assert!(holds(w.data.len(), w.groups(), w.group_bytes()));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows_of(rows: usize, cols: usize, seed: u8) -> Vec<u8> {
        let rb = RowFormat::Q4_0.row_bytes(cols).unwrap();
        let mut v = vec![0u8; rows * rb];
        for (i, b) in v.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37).wrapping_add(seed);
        }
        v
    }

    #[test]
    fn rows_round_trip_through_the_groups() {
        for &(rows, cols) in &[(1, 32), (16, 128), (17, 96), (40, 320), (33, 2560)] {
            let src = rows_of(rows, cols, 5);
            let m = Q4R::from_q4_0_rows(&src, rows, cols).unwrap();
            let rb = RowFormat::Q4_0.row_bytes(cols).unwrap();
            let mut row = vec![0u8; rb];
            for r in 0..rows {
                m.q4_0_row(r, &mut row);
                assert_eq!(row, src[r * rb..(r + 1) * rb], "{rows}x{cols} row {r}");
            }
            assert_eq!(
                m.bytes().len(),
                rows.div_ceil(16) * cols.div_ceil(128) * Q4R_SB_BYTES
            );
        }
    }

    #[test]
    fn padding_is_zero_weights() {
        // 17 rows of 96 columns: group 1 holds one real row, every super-block one padding
        // block; their scales are 0 and their nibbles 8.
        let (rows, cols) = (17, 96);
        let m = Q4R::from_q4_0_rows(&rows_of(rows, cols, 1), rows, cols).unwrap();
        let sb = &m.bytes()[m.group_bytes()..][..Q4R_SB_BYTES];
        for r in 1..Q4R_ROWS {
            for b in 0..Q4R_SB_BLOCKS {
                assert_eq!(&sb[2 * (b * Q4R_ROWS + r)..][..2], &[0, 0]);
            }
        }
        let at = Q4R_SCALE_BYTES + Q4R_LINE * (Q4R_BLOCK_LINES * 3) + 4 * 5;
        assert_eq!(&sb[at..at + 4], &[0x88; 4], "block 3 pads the 96 columns");
    }

    #[test]
    fn dequantized_rows_are_the_q4_0_weights() {
        let (rows, cols) = (3, 64);
        let src = rows_of(rows, cols, 9);
        let m = Q4R::from_q4_0_rows(&src, rows, cols).unwrap();
        let mut got = vec![0.0; cols];
        let mut want = vec![0.0; cols];
        let rb = RowFormat::Q4_0.row_bytes(cols).unwrap();
        for r in 0..rows {
            m.dequantize_row(r, &mut got);
            crate::float::dequantize_row(RowFormat::Q4_0, &src[r * rb..(r + 1) * rb], &mut want);
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn bad_shapes_and_sources_are_typed_errors() {
        assert!(matches!(
            Q4R::zeroed(4, 33),
            Err(KernelError::BadShape { .. })
        ));
        assert!(matches!(
            Q4R::from_q4_0_rows(&[0; 17], 1, 32),
            Err(KernelError::SourceLength { .. })
        ));
        assert!(matches!(
            Q4R::zeroed(1 << 30, 1 << 20),
            Err(KernelError::BadShape { .. })
        ));
    }
}
