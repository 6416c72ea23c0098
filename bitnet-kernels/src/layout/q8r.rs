//! The Q8_0 output head in the layout its kernels stream ([`Q8R`]), and the Q8_0 activations
//! those kernels read ([`Q8Acts`]).
//!
//! ## Why a layout of its own
//! A head in Q8_0 rows (`crate::layout::rows`) is read four or eight rows side by side: as many
//! concurrent streams per thread, each crossing 4 KiB pages at its own point (where the
//! hardware prefetchers stop), 34-byte blocks whose 32-byte quant loads cross a cache line
//! half the time, and f16 scales gathered one at a time. [`Q8R`] holds the same bytes so that
//! a thread reads one sequential stream of aligned 64-byte lines.
//!
//! ## Layout
//! Rows come in groups of [`Q8R_ROWS`] = 16, the last group padded with zero rows (scale 0,
//! quants 0). Columns are padded with zero blocks to a multiple of [`Q8R_SB_COLS`] = 128, a
//! super-block of four Q8_0 blocks. A group is its super-blocks in column order, each
//! [`Q8R_SB_BYTES`] = 2,176 bytes (34 lines; every super-block starts on a 64-byte line):
//!
//! - bytes `0..128`: the f16 scales, `[block b < 4][row r < 16]`: byte `2 (16 b + r)`;
//! - bytes `128..2176`: the quants, `[block b < 4][k < 8][row r < 16][j < 4]`: byte
//!   `128 + 64 (8 b + k) + 4 r + j` holds row `r`, column `32 b + 4 k + j` of the super-block.
//!
//! So a 64-byte line holds four consecutive quants of each of the 16 rows: one AVX-512
//! register, two AVX2 registers (rows 0-7, 8-15), four NEON registers (four rows each), which
//! a product multiplies by the same four activation bytes broadcast to every row. Group `g`
//! starts at byte `g * n_sb * 2176`; a range of whole groups is one contiguous stretch.

use std::ops::Range;

use crate::aligned::AlignedVec;
use crate::error::KernelError;
use crate::extent::holds;
use crate::layout::half::f16_to_f32;
use crate::layout::rows::{Q8_0_BLOCK_BYTES, QK8_0, RowFormat};

/// Rows of a group.
pub const Q8R_ROWS: usize = 16;
/// Q8_0 blocks of a super-block.
pub const Q8R_SB_BLOCKS: usize = 4;
/// Columns of a super-block (and the column padding granule).
pub const Q8R_SB_COLS: usize = Q8R_SB_BLOCKS * QK8_0;
/// Bytes of a super-block's scales: `[block][row]` f16.
pub const Q8R_SCALE_BYTES: usize = Q8R_SB_BLOCKS * Q8R_ROWS * 2;
/// Bytes of a super-block of one group: its scales, then its quants.
pub const Q8R_SB_BYTES: usize = Q8R_SCALE_BYTES + Q8R_SB_COLS * Q8R_ROWS;
/// Bytes of one line of quants: four columns of every row of the group.
pub const Q8R_LINE: usize = 4 * Q8R_ROWS;
/// Largest `rows * cols` accepted (keeps every index in range).
pub const Q8R_MAX_ELEMENTS: usize = 1 << 40;

const _: () = assert!(Q8R_SB_BYTES == 2176 && Q8R_SB_BYTES.is_multiple_of(64));
const _: () = assert!(Q8R_SCALE_BYTES == 2 * Q8R_LINE && Q8R_LINE == 64);

/// Q8_0 weight rows in the grouped layout of the module docs.
#[derive(Clone, Debug)]
pub struct Q8R {
    rows: usize,
    cols: usize,
    /// Super-blocks per group (`cols` rounded up to [`Q8R_SB_COLS`]).
    n_sb: usize,
    data: AlignedVec<u8>,
}

/// `(rows, cols)` checked for a Q8R matrix: `cols` whole Q8_0 blocks and the sizes in range.
fn check_shape(rows: usize, cols: usize) -> Result<usize, KernelError> {
    let bad = |reason| KernelError::BadShape {
        format: "Q8R",
        rows,
        cols,
        reason,
    };
    if !cols.is_multiple_of(QK8_0) {
        return Err(bad("columns are not whole Q8_0 blocks"));
    }
    let n_sb = cols.div_ceil(Q8R_SB_COLS);
    let padded = rows
        .div_ceil(Q8R_ROWS)
        .checked_mul(Q8R_ROWS)
        .and_then(|r| r.checked_mul(n_sb * Q8R_SB_COLS));
    match padded {
        Some(n) if n <= Q8R_MAX_ELEMENTS => Ok(n_sb),
        _ => Err(bad("too many elements")),
    }
}

impl Q8R {
    /// An all-zero matrix of `rows x cols` to be filled group by group ([`Q8R::data_mut`],
    /// [`Q8R::write_group`]). The buffer is huge-page backed where the system allows (it is
    /// written once, whole, right away).
    pub fn zeroed(rows: usize, cols: usize) -> Result<Q8R, KernelError> {
        let n_sb = check_shape(rows, cols)?;
        let len = rows.div_ceil(Q8R_ROWS) * n_sb * Q8R_SB_BYTES;
        Ok(Q8R {
            rows,
            cols,
            n_sb,
            data: AlignedVec::zeroed_huge(len),
        })
    }

    /// The matrix of `rows` Q8_0 rows of `cols` elements (`src`, ggml's `block_q8_0` rows).
    pub fn from_q8_0_rows(src: &[u8], rows: usize, cols: usize) -> Result<Q8R, KernelError> {
        let mut m = Q8R::zeroed(rows, cols)?;
        let rb = RowFormat::Q8_0.row_bytes(cols).unwrap_or(0);
        let expected = rows * rb;
        if src.len() != expected {
            return Err(KernelError::SourceLength {
                format: "Q8_0",
                rows,
                cols,
                expected,
                got: src.len(),
            });
        }
        let gb = m.group_bytes();
        if gb > 0 {
            for (g, dst) in m.data.chunks_exact_mut(gb).enumerate() {
                let first = g * Q8R_ROWS;
                let last = (first + Q8R_ROWS).min(rows);
                Q8R::write_group(cols, &src[first * rb..last * rb], dst);
            }
        }
        Ok(m)
    }

    /// Writes one group (`dst`, [`Q8R::group_bytes_for`]`(cols)` bytes) from at most
    /// [`Q8R_ROWS`] Q8_0 rows of `cols` elements (`src`); rows past them are zero.
    ///
    /// # Panics
    /// If `cols` is not whole Q8_0 blocks, `src` is not whole rows of them (at most 16) or
    /// `dst` is not a group's size.
    pub fn write_group(cols: usize, src: &[u8], dst: &mut [u8]) {
        let rb = RowFormat::Q8_0
            .row_bytes(cols)
            .expect("Q8R::write_group: columns are whole Q8_0 blocks");
        let n = src.len().checked_div(rb).unwrap_or(0);
        assert!(
            n * rb == src.len() && n <= Q8R_ROWS,
            "Q8R::write_group: source is not whole rows"
        );
        assert_eq!(
            dst.len(),
            Q8R::group_bytes_for(cols),
            "Q8R::write_group: wrong group size"
        );
        dst.fill(0);
        for (r, row) in src.chunks_exact(rb.max(1)).take(n).enumerate() {
            for (b, blk) in row.chunks_exact(Q8_0_BLOCK_BYTES).enumerate() {
                let sb = &mut dst[(b / Q8R_SB_BLOCKS) * Q8R_SB_BYTES..][..Q8R_SB_BYTES];
                let bb = b % Q8R_SB_BLOCKS;
                sb[2 * (bb * Q8R_ROWS + r)..][..2].copy_from_slice(&blk[..2]);
                for (k, quad) in blk[2..].chunks_exact(4).enumerate() {
                    let at = Q8R_SCALE_BYTES + Q8R_LINE * (8 * bb + k) + 4 * r;
                    sb[at..at + 4].copy_from_slice(quad);
                }
            }
        }
    }

    /// Bytes of one group of a matrix of `cols` columns (whole Q8_0 blocks).
    pub fn group_bytes_for(cols: usize) -> usize {
        cols.div_ceil(Q8R_SB_COLS) * Q8R_SB_BYTES
    }

    /// Bytes of one group.
    pub fn group_bytes(&self) -> usize {
        self.n_sb * Q8R_SB_BYTES
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row groups (the last one padded).
    pub fn groups(&self) -> usize {
        self.rows.div_ceil(Q8R_ROWS)
    }

    /// Q8_0 blocks of a row (padding excluded).
    pub fn blocks(&self) -> usize {
        self.cols / QK8_0
    }

    /// Super-blocks of a group.
    pub fn super_blocks(&self) -> usize {
        self.n_sb
    }

    /// The whole buffer: every group, padding included (what a product streams).
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The whole buffer, to be written group by group with [`Q8R::write_group`] (the
    /// chunks of [`Q8R::group_bytes`]).
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// Row `r`'s Q8_0 block `b`: its f16 scale bits and its 32 quants.
    ///
    /// # Panics
    /// If `r >= rows` or `b >= blocks`.
    pub fn row_block(&self, r: usize, b: usize) -> (u16, [i8; QK8_0]) {
        assert!(
            r < self.rows && b < self.blocks(),
            "Q8R::row_block: out of range"
        );
        let sb = &self.data[((r / Q8R_ROWS) * self.n_sb + b / Q8R_SB_BLOCKS) * Q8R_SB_BYTES..]
            [..Q8R_SB_BYTES];
        let (bb, rr) = (b % Q8R_SB_BLOCKS, r % Q8R_ROWS);
        let at = 2 * (bb * Q8R_ROWS + rr);
        let d = u16::from_le_bytes([sb[at], sb[at + 1]]);
        let q = std::array::from_fn(|c| {
            sb[Q8R_SCALE_BYTES + Q8R_LINE * (8 * bb + c / 4) + 4 * rr + c % 4] as i8
        });
        (d, q)
    }

    /// Row `r` as f32, `d * q` per element as [`crate::layout::rows::dequantize_row`] decodes
    /// a Q8_0 row (the same values: an embedding tied to this head is read from here).
    ///
    /// # Panics
    /// If `r >= rows` or `out.len() != cols`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        assert_eq!(out.len(), self.cols, "Q8R::dequantize_row: wrong length");
        for (b, y) in out.chunks_exact_mut(QK8_0).enumerate() {
            let (d, q) = self.row_block(r, b);
            let d = f16_to_f32(d);
            for (o, &v) in y.iter_mut().zip(&q) {
                *o = d * f32::from(v);
            }
        }
    }

    /// Row `r` as Q8_0 bytes (`out`: one row of `cols`), as the row layout holds it.
    ///
    /// # Panics
    /// If `r >= rows` or `out` is not a Q8_0 row of `cols`.
    pub fn q8_0_row(&self, r: usize, out: &mut [u8]) {
        assert_eq!(
            Some(out.len()),
            RowFormat::Q8_0.row_bytes(self.cols),
            "Q8R::q8_0_row: wrong length"
        );
        for (b, blk) in out.chunks_exact_mut(Q8_0_BLOCK_BYTES).enumerate() {
            let (d, q) = self.row_block(r, b);
            blk[..2].copy_from_slice(&d.to_le_bytes());
            for (o, v) in blk[2..].iter_mut().zip(q) {
                *o = v as u8;
            }
        }
    }
}

/// Q8_0 activation rows as the [`Q8R`] products read them: for up to `capacity` token rows,
/// the quants (64-byte aligned rows, zero past `cols` up to the padded width), the block scales
/// as f32, and per block `-128 * sum(q)`, which turns the products of `vpdpbusd` over
/// unsigned weights (`w + 128`) back into signed ones. Filled from Q8_0 rows
/// ([`Q8Acts::set_row`]), so the values are exactly the row encoder's.
#[derive(Clone, Debug)]
pub struct Q8Acts {
    cols: usize,
    n_sb: usize,
    capacity: usize,
    quants: AlignedVec<i8>,
    scales: AlignedVec<f32>,
    bias: AlignedVec<i32>,
}

impl Q8Acts {
    /// Room for `capacity` rows of `cols` activations.
    ///
    /// # Panics
    /// If `cols` is not whole Q8_0 blocks or the sizes overflow.
    pub fn new(cols: usize, capacity: usize) -> Q8Acts {
        assert!(
            cols.is_multiple_of(QK8_0),
            "Q8Acts: {cols} columns are not whole Q8_0 blocks"
        );
        let n_sb = cols.div_ceil(Q8R_SB_COLS);
        let blocks = n_sb * Q8R_SB_BLOCKS;
        let q_len = capacity
            .checked_mul(n_sb * Q8R_SB_COLS)
            .expect("Q8Acts size overflows");
        Q8Acts {
            cols,
            n_sb,
            capacity,
            quants: AlignedVec::zeroed(q_len),
            scales: AlignedVec::zeroed(capacity * blocks),
            bias: AlignedVec::zeroed(capacity * blocks),
        }
    }

    /// Token row `t` from one Q8_0 row of `cols` (`xq`, from
    /// [`crate::layout::rows::quantize_row_q8_0`]).
    ///
    /// # Panics
    /// If `t >= capacity`, `xq` is not one Q8_0 row of `cols`, or a quant is -128 (the row
    /// encoder never writes it; the AVX2 products need `|x| <= 127`).
    pub fn set_row(&mut self, t: usize, xq: &[u8]) {
        assert!(t < self.capacity, "Q8Acts::set_row: row {t} past capacity");
        assert_eq!(
            Some(xq.len()),
            RowFormat::Q8_0.row_bytes(self.cols),
            "Q8Acts::set_row: not one Q8_0 row of {}",
            self.cols
        );
        let (pc, pb) = (self.padded_cols(), self.padded_blocks());
        let quants = &mut self.quants[t * pc..(t + 1) * pc];
        let scales = &mut self.scales[t * pb..(t + 1) * pb];
        let bias = &mut self.bias[t * pb..(t + 1) * pb];
        for (b, blk) in xq.chunks_exact(Q8_0_BLOCK_BYTES).enumerate() {
            scales[b] = f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
            let mut sum = 0i32;
            for (o, &q) in quants[QK8_0 * b..QK8_0 * (b + 1)].iter_mut().zip(&blk[2..]) {
                assert!(q != 0x80, "Q8Acts::set_row: an activation quant is -128");
                *o = q as i8;
                sum += i32::from(q as i8);
            }
            bias[b] = -128 * sum;
        }
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Token rows it holds room for.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Length of a quant row (`cols` rounded up to [`Q8R_SB_COLS`]).
    pub fn padded_cols(&self) -> usize {
        self.n_sb * Q8R_SB_COLS
    }

    /// Blocks of a scale row (padding included).
    pub fn padded_blocks(&self) -> usize {
        self.n_sb * Q8R_SB_BLOCKS
    }

    /// Row `t`'s quants, padding included.
    pub fn quants(&self, t: usize) -> &[i8] {
        let pc = self.padded_cols();
        &self.quants[t * pc..(t + 1) * pc]
    }

    /// Row `t`'s block scales as f32, padding included.
    pub fn scales(&self, t: usize) -> &[f32] {
        let pb = self.padded_blocks();
        &self.scales[t * pb..(t + 1) * pb]
    }

    /// Row `t`'s per-block `-128 * sum(q)`, padding included.
    pub fn bias(&self, t: usize) -> &[i32] {
        let pb = self.padded_blocks();
        &self.bias[t * pb..(t + 1) * pb]
    }

    /// The three buffers whole (for the kernels' raw pointers).
    pub(crate) fn raw(&self) -> (&[i8], &[f32], &[i32]) {
        (&self.quants, &self.scales, &self.bias)
    }
}

/// The shape checks of a [`Q8R`] product, made by the safe API and again by every SIMD token
/// method (their kernels index raw pointers from these): activations of the matrix's width
/// with room for `n_tok` rows, `rows` whole groups inside the matrix (the end may be the last
/// row), and `out` of `n_tok * rows.len()`.
///
/// # Panics
/// On any mismatch, with a message.
pub(crate) fn check_matmul(w: &Q8R, x: &Q8Acts, n_tok: usize, rows: &Range<usize>, out: &[f32]) {
    assert_eq!(
        w.cols, x.cols,
        "matmul_q8r: weights and activations differ in width"
    );
    assert!(
        n_tok <= x.capacity,
        "matmul_q8r: {n_tok} token rows, room for {}",
        x.capacity
    );
    assert!(
        rows.start <= rows.end && rows.end <= w.rows,
        "matmul_q8r: bad row range {rows:?} of {}",
        w.rows
    );
    assert!(
        rows.start.is_multiple_of(Q8R_ROWS)
            && (rows.end.is_multiple_of(Q8R_ROWS) || rows.end == w.rows),
        "matmul_q8r: row range {rows:?} is not whole groups of {Q8R_ROWS}"
    );
    assert!(
        holds(out.len(), n_tok, rows.len()) && out.len() == n_tok * rows.len(),
        "matmul_q8r: out must be n_tok x rows"
    );
    // What the kernels' pointers rely on, implied by the construction of both types.
    debug_assert!(holds(w.data.len(), w.groups(), w.group_bytes()));
    debug_assert!(holds(x.quants.len(), x.capacity, x.padded_cols()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_through_the_groups() {
        let (rows, cols) = (21, 160);
        let rb = RowFormat::Q8_0.row_bytes(cols).unwrap();
        let src: Vec<u8> = (0..rows * rb).map(|i| (i * 37 % 256) as u8).collect();
        let m = Q8R::from_q8_0_rows(&src, rows, cols).unwrap();
        assert_eq!(m.groups(), 2);
        assert_eq!(m.super_blocks(), 2);
        assert_eq!(m.bytes().len(), 2 * 2 * Q8R_SB_BYTES);
        let mut row = vec![0u8; rb];
        for r in 0..rows {
            m.q8_0_row(r, &mut row);
            assert_eq!(&row[..], &src[r * rb..(r + 1) * rb], "row {r}");
        }
        // Padding rows and columns are zero: every non-zero byte is a real row's.
        let real: usize = src.iter().filter(|&&b| b != 0).count();
        assert_eq!(m.bytes().iter().filter(|&&b| b != 0).count(), real);
        assert!(Q8R::from_q8_0_rows(&src[1..], rows, cols).is_err());
        assert!(Q8R::zeroed(3, 33).is_err());
    }
}
