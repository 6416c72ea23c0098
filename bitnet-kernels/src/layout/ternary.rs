//! The ternary weight matrix in memory: the repacked layout every kernel set reads (built
//! from the file layouts by [`crate::layout::repack`]), and the shapes its kernels check.
//!
//! ## Repacked layout
//! Columns are padded with zero weights to `padded_cols`, a multiple of [`BLOCK`] = 256; rows
//! are padded to a multiple of [`ROW_GROUP`] = 4. A weight is stored as the unsigned 2-bit
//! code `c = w + 1`. For row group `g`, 256-column block `b` and row `r` of the group, 64 bytes
//! sit at byte offset `((g * blocks + b) * 4 + r) * 64`; byte `i` of them holds in bits
//! `2l..2l+2` the code of column `256 b + 64 l + i` (l < 4). So one 64-byte load gives four
//! code vectors (`(x >> 2l) & 3`), each lined up with a contiguous run of 64 activations
//! (AVX2 uses the two 32-byte halves the same way), and the four rows of a group are one
//! sequential stream. The kernels compute `sum c * q` with `vpdpbusd` / `maddubs` and subtract
//! the activation sum: `sum w * q = sum c * q - sum q`.
//!
//! ## Scales
//! I2_S and `Trits` carry one scale per tensor. TQ1_0 / TQ2_0 carry an f16 `d` per 256-block;
//! if every block holding a non-zero weight has the same `d` (the normal case), the matrix gets
//! that per-tensor scale and the fast path; otherwise it keeps the per-block scales and the
//! products accumulate block by block in f32 (correct, slower).

use std::ops::Range;

use crate::aligned::AlignedVec;
use crate::extent::tokens_times;

/// Columns per repacked block (and the column padding granule).
pub const BLOCK: usize = 256;
/// Bytes per row per repacked block.
pub const BLOCK_BYTES: usize = 64;
/// Rows stored interleaved block by block.
pub const ROW_GROUP: usize = 4;
/// Largest `rows * cols` accepted (keeps every index in range).
pub const MAX_ELEMENTS: usize = 1 << 40;
/// Largest `cols` accepted: keeps every i32 dot (at most `2 * 128 * cols` per code sum) exact.
pub const MAX_COLS: usize = 1 << 22;

/// Where a ternary matrix comes from. Matrices are row-major, `rows x cols` (ggml `ne[1] x
/// ne[0]`).
#[derive(Copy, Clone, Debug)]
pub enum TernarySource<'a> {
    /// bitnet.cpp I2_S: `rows * cols / 4` bytes then an f32 scale (ggml gives it `n/4 + 32`).
    I2S(&'a [u8]),
    /// llama.cpp TQ2_0 blocks, `cols` a multiple of 256.
    Tq2_0(&'a [u8]),
    /// llama.cpp TQ1_0 blocks, `cols` a multiple of 256.
    Tq1_0(&'a [u8]),
    /// Plain trits in -1..=1, row-major, with a per-tensor scale.
    Trits { values: &'a [i8], scale: f32 },
}

/// A ternary matrix in the repacked layout described in the module docs.
#[derive(Clone, Debug)]
pub struct TernaryMatrix {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) blocks: usize,
    pub(crate) data: AlignedVec<u8>,
    pub(crate) scale: f32,
    /// `rows x blocks` scales, only when the blocks do not share one.
    pub(crate) block_scales: Option<Vec<f32>>,
}

impl TernaryMatrix {
    /// An all-zero matrix to be filled row by row.
    pub(super) fn empty(rows: usize, cols: usize) -> Self {
        let blocks = cols.div_ceil(BLOCK);
        let groups = rows.div_ceil(ROW_GROUP);
        let mut data = AlignedVec::<u8>::zeroed_huge(groups * blocks * ROW_GROUP * BLOCK_BYTES);
        // Code 1 is weight 0: fill everything (padding included) with 0b01010101.
        data.fill(0x55);
        TernaryMatrix {
            rows,
            cols,
            blocks,
            data,
            scale: 1.0,
            block_scales: None,
        }
    }

    /// Byte offset of row `r`'s 64 bytes of block `b`.
    #[inline]
    pub(crate) fn offset(&self, r: usize, b: usize) -> usize {
        ((r / ROW_GROUP * self.blocks + b) * ROW_GROUP + r % ROW_GROUP) * BLOCK_BYTES
    }

    /// Stores one row of trits (`trits.len() == cols`, values already checked).
    pub(super) fn set_row(&mut self, r: usize, trits: &[i8]) {
        for (b, chunk) in trits.chunks(BLOCK).enumerate() {
            let off = self.offset(r, b);
            let bytes = &mut self.data[off..off + BLOCK_BYTES];
            if let Ok(full) = <&[i8; BLOCK]>::try_from(chunk) {
                // Whole block: one pass, no bounds checks in the inner loop.
                for (i, o) in bytes.iter_mut().enumerate() {
                    let c = |l: usize| (full[64 * l + i] + 1) as u8;
                    *o = c(0) | c(1) << 2 | c(2) << 4 | c(3) << 6;
                }
            } else {
                bytes.fill(0);
                for i in 0..BLOCK {
                    let code = chunk.get(i).map_or(1, |&t| (t + 1) as u8);
                    bytes[i % 64] |= code << (2 * (i / 64));
                }
            }
        }
    }

    /// Code (`w + 1`) of row `r`, column `c` (padding included).
    #[inline]
    pub(crate) fn code(&self, r: usize, c: usize) -> u8 {
        let off = self.offset(r, c / BLOCK);
        let i = c % BLOCK;
        (self.data[off + i % 64] >> (2 * (i / 64))) & 3
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Length each int8 activation row must have (zero-padded past `cols`).
    pub fn padded_cols(&self) -> usize {
        self.blocks * BLOCK
    }

    /// Bytes of repacked weights (plus per-block scales if any).
    pub fn memory_bytes(&self) -> usize {
        self.data.len() + self.block_scales.as_ref().map_or(0, |s| s.len() * 4)
    }

    /// The repacked weight bytes a full product streams (the scales, a few KiB, apart).
    pub fn weight_bytes(&self) -> &[u8] {
        self.data.as_slice()
    }

    /// The per-tensor scale, or `None` when the matrix keeps per-256-block scales.
    pub fn tensor_scale(&self) -> Option<f32> {
        self.block_scales.is_none().then_some(self.scale)
    }

    /// Trit of row `r`, column `c`.
    pub fn trit(&self, r: usize, c: usize) -> i8 {
        self.code(r, c) as i8 - 1
    }

    /// Scale applying to row `r`, column `c`.
    fn scale_at(&self, r: usize, c: usize) -> f32 {
        match &self.block_scales {
            None => self.scale,
            Some(ds) => ds[r * self.blocks + c / BLOCK],
        }
    }

    /// Row `r` as f32 weights including the scale; `out.len() == cols`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        assert!(
            r < self.rows && out.len() == self.cols,
            "dequantize_row: bad row or length"
        );
        for (c, o) in out.iter_mut().enumerate() {
            *o = self.trit(r, c) as f32 * self.scale_at(r, c);
        }
    }

    /// Counts of weights equal to -1, 0 and +1 (padding excluded).
    pub fn value_histogram(&self) -> [u64; 3] {
        // Count codes over whole bytes, then remove the padding, which is all code 1 (zero).
        let mut per_byte = [0u64; 256];
        for &b in self.data.iter() {
            per_byte[b as usize] += 1;
        }
        let mut h = [0u64; 4];
        for (b, &n) in per_byte.iter().enumerate() {
            for l in 0..4 {
                h[(b >> (2 * l)) & 3] += n;
            }
        }
        let stored = (self.data.len() * 4) as u64;
        let padding = stored - (self.rows * self.cols) as u64;
        [h[0], h[1] - padding, h[2]]
    }

    /// The repacked weight bytes (for bandwidth probes and diagnostics).
    pub fn packed_bytes(&self) -> &[u8] {
        &self.data
    }
}

/// Shape checks of the raw-dot kernels, made again by every SIMD token method (those kernels
/// index raw pointers from these): rows within the padded row groups, blocks within the
/// matrix, `n_tok` activation rows of `padded_cols` and `out` of `n_tok * rows.len()`.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)] // used by the SIMD levels only
pub(crate) fn check_raw_dots(
    w: &TernaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: &Range<usize>,
    blocks: &Range<usize>,
    out: &[i32],
) {
    assert!(rows.start <= rows.end && rows.end <= w.rows.div_ceil(ROW_GROUP) * ROW_GROUP);
    assert!(blocks.start <= blocks.end && blocks.end <= w.blocks);
    assert!(q.len() >= tokens_times(n_tok, w.padded_cols()));
    assert_eq!(out.len(), tokens_times(n_tok, rows.len()));
}
