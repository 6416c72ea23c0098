//! Ternary weight matrices: the repacked in-memory layout, its construction from every file
//! layout we load (see [`crate::formats`]), and the safe dispatched matrix x vector / matrix x
//! matrix products against int8 activations.
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
//!
//! ## Kernel family: multiply-add, not table lookup (measured)
//! Both families were prototyped for both instruction sets: multiply-add on this layout
//! against T-MAC / bitnet.cpp-style table lookup (`benches/tl_proto`; AVX-512: three trits
//! per 5-bit index, three indices per u16, per-triple i16 tables looked up 32 rows at a time
//! by `vpermw`; AVX2, `benches/tl_proto/avx2.rs`: two trits per 4-bit index, i16 tables split
//! into low/high byte planes for `pshufb`; exact integer results in all). A `vpermw` lookup
//! covers 96 weights per instruction against 256 for `vpdpbusd`, and the tables fall out of
//! L1; the bytes the lookup layout saves do not pay for that even when streaming from DRAM.
//! Multiply-add won on both instruction sets (the figures:
//! `bench/2026-11-26-kernels-figures.md`); the prototypes stay in the benches
//! (`cargo bench -p bitnet-kernels --bench ternary -- tl_proto`).

use std::cell::RefCell;
use std::ops::Range;

use crate::act::ActScale;
use crate::aligned::AlignedVec;
use crate::dispatch::{prefetch_lines, token};
use crate::error::KernelError;
use crate::extent::tokens_times;
use crate::float::f16_to_f32;
use crate::formats::{self, TQ_BLOCK, TQ1_0_BYTES, TQ2_0_BYTES};
use crate::isa::Isa;
use crate::scalar;

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

fn bad_shape(format: &'static str, rows: usize, cols: usize, reason: &'static str) -> KernelError {
    KernelError::BadShape {
        format,
        rows,
        cols,
        reason,
    }
}

fn check_len(
    format: &'static str,
    rows: usize,
    cols: usize,
    expected: usize,
    got: usize,
) -> Result<(), KernelError> {
    if got < expected {
        Err(KernelError::SourceLength {
            format,
            rows,
            cols,
            expected,
            got,
        })
    } else {
        Ok(())
    }
}

impl TernaryMatrix {
    /// An all-zero matrix to be filled row by row.
    fn empty(rows: usize, cols: usize) -> Self {
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
    fn set_row(&mut self, r: usize, trits: &[i8]) {
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

    /// Repacks a matrix from one of the file layouts; checks shapes, byte lengths and values.
    pub fn from_source(
        src: TernarySource<'_>,
        rows: usize,
        cols: usize,
    ) -> Result<Self, KernelError> {
        let name = match src {
            TernarySource::I2S(_) => "I2_S",
            TernarySource::Tq2_0(_) => "TQ2_0",
            TernarySource::Tq1_0(_) => "TQ1_0",
            TernarySource::Trits { .. } => "trits",
        };
        let n = rows
            .checked_mul(cols)
            .filter(|&n| n > 0 && n <= MAX_ELEMENTS && cols <= MAX_COLS)
            .ok_or_else(|| bad_shape(name, rows, cols, "empty or too large"))?;
        // Each layout allocates the matrix once its checks passed (I2_S's fast path writes
        // every byte itself; the others start from an all-zero-weight matrix).
        let m = match src {
            TernarySource::Trits { values, scale } => {
                if values.len() != n {
                    return Err(KernelError::SourceLength {
                        format: name,
                        rows,
                        cols,
                        expected: n,
                        got: values.len(),
                    });
                }
                if !scale.is_finite() {
                    return Err(KernelError::NonFinite {
                        what: "ternary scale",
                        value: scale.to_string(),
                    });
                }
                if let Some(index) = values.iter().position(|t| !(-1..=1).contains(t)) {
                    return Err(KernelError::BadWeight {
                        index,
                        value: values[index],
                        expected: "-1, 0 or +1",
                    });
                }
                let mut m = TernaryMatrix::empty(rows, cols);
                for (r, chunk) in values.chunks_exact(cols).enumerate() {
                    m.set_row(r, chunk);
                }
                m.scale = scale;
                m
            }
            TernarySource::I2S(bytes) => {
                if n % formats::I2S_BLOCK != 0 {
                    return Err(bad_shape(
                        name,
                        rows,
                        cols,
                        "rows * cols must be a multiple of 128",
                    ));
                }
                check_len(name, rows, cols, n / 4 + 4, bytes.len())?;
                // Decode in I2_S blocks; a block may straddle two rows when cols % 128 != 0.
                let mut all = vec![0i8; cols];
                let mut blk = [0i8; formats::I2S_BLOCK];
                let scale = f32::from_le_bytes(bytes[n / 4..n / 4 + 4].try_into().expect("4"));
                if !scale.is_finite() {
                    return Err(KernelError::NonFinite {
                        what: "I2_S scale",
                        value: scale.to_string(),
                    });
                }
                if cols.is_multiple_of(BLOCK)
                    && let Some(m) = Self::from_i2s_whole_blocks(bytes, rows, cols, scale)
                {
                    return Ok(m);
                }
                let mut m = TernaryMatrix::empty(rows, cols);
                let mut filled = 0;
                let mut r = 0;
                for (bi, chunk) in bytes[..n / 4].chunks_exact(32).enumerate() {
                    // Value j of the block: byte j % 32, bits 6 - 2 (j / 32).
                    for (g, vals) in blk.chunks_exact_mut(32).enumerate() {
                        for (v, &byte) in vals.iter_mut().zip(chunk) {
                            *v = ((byte >> (6 - 2 * g)) & 3) as i8 - 1;
                        }
                    }
                    if let Some(k) = blk.iter().position(|&t| t == 2) {
                        return Err(KernelError::BadWeight {
                            index: bi * formats::I2S_BLOCK + k,
                            value: 2,
                            expected: "an I2_S code 0, 1 or 2",
                        });
                    }
                    for &t in &blk {
                        all[filled] = t;
                        filled += 1;
                        if filled == cols {
                            m.set_row(r, &all);
                            r += 1;
                            filled = 0;
                        }
                    }
                }
                m.scale = scale;
                m
            }
            TernarySource::Tq2_0(bytes) | TernarySource::Tq1_0(bytes) => {
                let tq2 = matches!(src, TernarySource::Tq2_0(_));
                if !cols.is_multiple_of(TQ_BLOCK) {
                    return Err(bad_shape(
                        name,
                        rows,
                        cols,
                        "cols must be a multiple of 256",
                    ));
                }
                let bpb = if tq2 { TQ2_0_BYTES } else { TQ1_0_BYTES };
                let nb = cols / TQ_BLOCK;
                check_len(name, rows, cols, rows * nb * bpb, bytes.len())?;
                if tq2 && let Some(m) = Self::from_tq2_0_blocks(bytes, rows, cols) {
                    return Ok(m);
                }
                let mut m = TernaryMatrix::empty(rows, cols);
                let mut row = vec![0i8; cols];
                let mut ds = vec![0f32; rows * nb];
                let mut common: Option<f32> = None;
                let mut uniform = true;
                for r in 0..rows {
                    for b in 0..nb {
                        let blk = &bytes[(r * nb + b) * bpb..(r * nb + b + 1) * bpb];
                        let out = &mut row[b * TQ_BLOCK..(b + 1) * TQ_BLOCK];
                        let d = if tq2 {
                            formats::unpack_tq2_0_block(blk, out).map_err(|e| match e {
                                KernelError::BadWeight {
                                    index,
                                    value,
                                    expected,
                                } => KernelError::BadWeight {
                                    index: r * cols + b * TQ_BLOCK + index,
                                    value,
                                    expected,
                                },
                                e => e,
                            })?
                        } else {
                            formats::unpack_tq1_0_block(blk, out)
                        };
                        if !d.is_finite() {
                            return Err(KernelError::NonFinite {
                                what: "TQ block scale d",
                                value: d.to_string(),
                            });
                        }
                        ds[r * nb + b] = d;
                        if out.iter().any(|&t| t != 0) {
                            match common {
                                None => common = Some(d),
                                Some(c) if c.to_bits() == d.to_bits() => {}
                                Some(_) => uniform = false,
                            }
                        }
                    }
                    m.set_row(r, &row);
                }
                if uniform {
                    m.scale = common.unwrap_or(0.0);
                } else {
                    m.block_scales = Some(ds);
                }
                m
            }
        };
        Ok(m)
    }

    /// I2_S rows of whole 256-blocks (every real model's shapes): each row's pair of I2_S
    /// blocks becomes one repacked block by bit moves alone, written once in the order the
    /// kernels read it (no trits in between, no fill pass over the buffer first). `None`
    /// if some code is 3 (invalid): the caller's general path then says where.
    /// `bytes` holds at least `rows * cols / 4` bytes (checked by the caller).
    fn from_i2s_whole_blocks(bytes: &[u8], rows: usize, cols: usize, scale: f32) -> Option<Self> {
        let blocks = cols / BLOCK;
        let groups = rows.div_ceil(ROW_GROUP);
        let group_bytes = blocks * ROW_GROUP * BLOCK_BYTES;
        let row_bytes = cols / 4;
        let mut data = AlignedVec::<u8>::zeroed_huge(groups * group_bytes);
        let mut bad = 0u8;
        for (g, group) in data.chunks_exact_mut(group_bytes).enumerate() {
            // A group's rows are one contiguous run of the source, read as four streams.
            let run = g * ROW_GROUP * row_bytes;
            for (b, quad) in group.chunks_exact_mut(ROW_GROUP * BLOCK_BYTES).enumerate() {
                // Four lines of source per block, so the run ahead is fetched at the pace
                // it is read (what it saved: `bench/2026-11-26-kernels-figures.md`).
                prefetch_lines(bytes, run + b * ROW_GROUP * BLOCK_BYTES + I2S_PREFETCH, 4);
                for (i, dst) in quad.chunks_exact_mut(BLOCK_BYTES).enumerate() {
                    let dst: &mut [u8; BLOCK_BYTES] = dst.try_into().expect("64 bytes");
                    let r = g * ROW_GROUP + i;
                    if r < rows {
                        let at = r * row_bytes + b * BLOCK_BYTES;
                        let src = bytes[at..at + BLOCK_BYTES].try_into().expect("64 bytes");
                        bad |= formats::i2s_pair_to_repacked(src, dst);
                    } else {
                        // Padding rows: code 1, weight 0.
                        dst.fill(0x55);
                    }
                }
            }
        }
        (bad == 0).then_some(TernaryMatrix {
            rows,
            cols,
            blocks,
            data,
            scale,
            block_scales: None,
        })
    }

    /// TQ2_0 rows (whole 256-blocks, `bytes` checked by the caller): each 64-byte block of
    /// 2-bit codes becomes one repacked block by bit moves alone, written once, and the
    /// scales are gathered as the general path does (one per tensor when every block that
    /// holds a nonzero weight has the same `d`). `None` if some code is 3 (invalid) or some
    /// `d` is not finite: the caller's general path then says which and where.
    fn from_tq2_0_blocks(bytes: &[u8], rows: usize, cols: usize) -> Option<Self> {
        let blocks = cols / BLOCK;
        let groups = rows.div_ceil(ROW_GROUP);
        let group_bytes = blocks * ROW_GROUP * BLOCK_BYTES;
        let mut data = AlignedVec::<u8>::zeroed_huge(groups * group_bytes);
        let mut ds = vec![0f32; rows * blocks];
        let mut common: Option<u16> = None;
        let mut uniform = true;
        let mut bad = 0u8;
        for (g, group) in data.chunks_exact_mut(group_bytes).enumerate() {
            for (b, quad) in group.chunks_exact_mut(ROW_GROUP * BLOCK_BYTES).enumerate() {
                for (i, dst) in quad.chunks_exact_mut(BLOCK_BYTES).enumerate() {
                    let dst: &mut [u8; BLOCK_BYTES] = dst.try_into().expect("64 bytes");
                    let r = g * ROW_GROUP + i;
                    if r >= rows {
                        // Padding rows: code 1, weight 0.
                        dst.fill(0x55);
                        continue;
                    }
                    let at = (r * blocks + b) * TQ2_0_BYTES;
                    let blk: &[u8; TQ2_0_BYTES] =
                        bytes[at..at + TQ2_0_BYTES].try_into().expect("66 bytes");
                    let (codes, d) = blk.split_at(BLOCK_BYTES);
                    bad |= formats::tq2_0_to_repacked(codes.try_into().expect("64"), dst);
                    let d_bits = u16::from_le_bytes([d[0], d[1]]);
                    let d = f16_to_f32(d_bits);
                    if !d.is_finite() {
                        return None;
                    }
                    ds[r * blocks + b] = d;
                    // A block of zero weights (all code 1) takes no part in the common scale.
                    if dst.iter().any(|&c| c != 0x55) {
                        match common {
                            None => common = Some(d_bits),
                            Some(c) if c == d_bits => {}
                            Some(_) => uniform = false,
                        }
                    }
                }
            }
        }
        if bad != 0 {
            return None;
        }
        let (scale, block_scales) = if uniform {
            (common.map_or(0.0, f16_to_f32), None)
        } else {
            (1.0, Some(ds))
        };
        Some(TernaryMatrix {
            rows,
            cols,
            blocks,
            data,
            scale,
            block_scales,
        })
    }

    /// Repacks plain trits (row-major, `-1..=1`) with a per-tensor scale.
    pub fn from_trits(
        values: &[i8],
        rows: usize,
        cols: usize,
        scale: f32,
    ) -> Result<Self, KernelError> {
        Self::from_source(TernarySource::Trits { values, scale }, rows, cols)
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
}

/// How far ahead of the block being repacked the I2_S source is prefetched: the hardware
/// prefetchers stop at each 4 KiB page, and page-cache pages are read straight from DRAM.
const I2S_PREFETCH: usize = 2048;

/// Shape checks of the raw-dot kernels, made again by every SIMD token method (those kernels
/// index raw pointers from these): rows within the padded row groups, blocks within the
/// matrix, `n_tok` activation rows of `padded_cols` and `out` of `n_tok * rows.len()`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // used by the SIMD tokens
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

/// Raw dots `out[i] = sum_c code(rows.start + i, c) * q[c]` over 256-blocks `blocks`.
pub(crate) fn raw_dots(
    isa: Isa,
    w: &TernaryMatrix,
    q: &[i8],
    rows: Range<usize>,
    blocks: Range<usize>,
    out: &mut [i32],
) {
    debug_assert!(rows.end <= w.rows.div_ceil(ROW_GROUP) * ROW_GROUP && blocks.end <= w.blocks);
    debug_assert!(q.len() >= w.padded_cols() && out.len() == rows.len());
    if let Some(simd) = token(isa) {
        return simd.ternary_raw_dots(w, q, rows, blocks, out);
    }
    scalar::ternary::raw_dots(w, q, rows, blocks, out)
}

/// Raw dots for `n_tok` activation rows (row `t` at `q[t * padded_cols..]`);
/// `out[t * rows.len() + i]`.
pub(crate) fn raw_dots_multi(
    isa: Isa,
    w: &TernaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: Range<usize>,
    blocks: Range<usize>,
    out: &mut [i32],
) {
    debug_assert!(q.len() >= n_tok * w.padded_cols() && out.len() == n_tok * rows.len());
    if let Some(simd) = token(isa) {
        return simd.ternary_raw_dots_multi(w, q, n_tok, rows, blocks, out);
    }
    scalar::ternary::raw_dots_multi(w, q, n_tok, rows, blocks, out)
}

/// Rows handed to a kernel call at once, about (see [`call_ranges`]). A multi-token call
/// reads every token's activations once per call (the register tiles pack them per pass):
/// 256 rows measured 1.5-2% faster than 128 at 512 tokens (AVX2, 2B-4T shapes), and 384 or
/// 512 no faster than 256. Callers that cut a product into row ranges for threads gain
/// from ranges of at least this many rows.
pub const MATMUL_CALL_ROWS: usize = 256;
/// The most rows [`call_ranges`] gives one call (bounds the scratch buffers).
const MAX_CALL_ROWS: usize = MATMUL_CALL_ROWS + MATMUL_CALL_ROWS / 2;

/// From this many tokens [`call_ranges`] cuts a range into calls of one size. Below it the
/// activations are a few KiB and calls go by whole [`MATMUL_CALL_ROWS`] (8 sequences of
/// batched decode, AVX2: calls of one size (320 rows, not 256 and 64) ran 0.973x, 1 of 6
/// interleaved rounds).
const EVEN_CALLS_FROM_TOKENS: usize = 16;

/// The kernel calls `rows` is cut into for `n_tok` tokens. From [`EVEN_CALLS_FROM_TOKENS`]:
/// about [`MATMUL_CALL_ROWS`] rows each, all of one size (within two [`ROW_GROUP`]s,
/// boundaries on groups from `rows.start`) and under [`MAX_CALL_ROWS`], so a range of 266
/// rows is one call, not 256 and 10 (every call reads all the tokens' activations). Fewer
/// tokens: [`MATMUL_CALL_ROWS`] at a time.
fn call_ranges(rows: Range<usize>, n_tok: usize) -> impl Iterator<Item = Range<usize>> {
    let n = rows.len();
    let even = n_tok >= EVEN_CALLS_FROM_TOKENS;
    let calls = if even {
        ((n + MATMUL_CALL_ROWS / 2) / MATMUL_CALL_ROWS).max(1)
    } else {
        n.div_ceil(MATMUL_CALL_ROWS).max(1)
    };
    let cut = move |c: usize| {
        if c == calls {
            rows.end
        } else if even {
            rows.start + n * c / calls / ROW_GROUP * ROW_GROUP
        } else {
            rows.start + c * MATMUL_CALL_ROWS
        }
    };
    (0..calls).map(move |c| cut(c)..cut(c + 1))
}

thread_local! {
    static SCRATCH: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with a thread-local i32 scratch buffer of `len` (grown once, then reused).
pub(crate) fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [i32]) -> R) -> R {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < len {
            s.resize(len, 0);
        }
        f(&mut s[..len])
    })
}

/// Sums of each 256-block of each of `n_tok` activation rows: `[t][b]`.
fn block_sums(q: &[i8], n_tok: usize, stride: usize, blocks: usize) -> Vec<i32> {
    let mut s = vec![0i32; n_tok * blocks];
    for t in 0..n_tok {
        for b in 0..blocks {
            let run = &q[t * stride + b * BLOCK..t * stride + (b + 1) * BLOCK];
            s[t * blocks + b] = run.iter().map(|&v| v as i32).sum();
        }
    }
    s
}

fn check_args(w: &TernaryMatrix, q: &[i8], n_tok: usize, rows: &Range<usize>, out: &[f32]) {
    assert!(
        rows.start <= rows.end && rows.end <= w.rows,
        "ternary product: rows {rows:?} outside 0..{}",
        w.rows
    );
    assert!(
        q.len() >= n_tok * w.padded_cols(),
        "ternary product: activations shorter than padded_cols"
    );
    assert_eq!(
        out.len(),
        n_tok * rows.len(),
        "ternary product: output length"
    );
}

/// `out[i] = (sum_j w[rows.start + i][j] * q[j]) as f32 * w_scale / act.scale`; with per-block
/// scales, `out[i] = (sum_b (dot_b as f32 * d_b)) / act.scale`. `q` holds `padded_cols` int8,
/// zero past `cols`.
pub fn ternary_matvec(
    isa: Isa,
    w: &TernaryMatrix,
    q: &[i8],
    act: ActScale,
    rows: Range<usize>,
    out: &mut [f32],
) {
    ternary_matmul(isa, w, q, std::slice::from_ref(&act), rows, out)
}

/// Matrix x matrix: `acts.len()` activation rows, row `t` at `q[t * padded_cols..]`, each with
/// its own [`ActScale`]; `out[t * rows.len() + i]` as in [`ternary_matvec`].
pub fn ternary_matmul(
    isa: Isa,
    w: &TernaryMatrix,
    q: &[i8],
    acts: &[ActScale],
    rows: Range<usize>,
    out: &mut [f32],
) {
    let n_tok = acts.len();
    check_args(w, q, n_tok, &rows, out);
    let n_rows = rows.len();
    if n_rows == 0 || n_tok == 0 {
        return;
    }
    let pc = w.padded_cols();
    match &w.block_scales {
        None => with_scratch(n_tok * MAX_CALL_ROWS, |scratch| {
            for Range { start: r0, end: r1 } in call_ranges(rows.clone(), n_tok) {
                let n = r1 - r0;
                let raw = &mut scratch[..n_tok * n];
                if n_tok == 1 {
                    raw_dots(isa, w, q, r0..r1, 0..w.blocks, raw);
                } else {
                    raw_dots_multi(isa, w, &q[..n_tok * pc], n_tok, r0..r1, 0..w.blocks, raw);
                }
                for (t, act) in acts.iter().enumerate() {
                    let mul = w.scale / act.scale;
                    let dst = &mut out[t * n_rows + (r0 - rows.start)..][..n];
                    for (o, &d) in dst.iter_mut().zip(&raw[t * n..(t + 1) * n]) {
                        *o = (d - act.sum) as f32 * mul;
                    }
                }
            }
        }),
        Some(ds) => {
            // Slow path: per-block integer dots, combined in f32 with each block's scale.
            let sums = block_sums(q, n_tok, pc, w.blocks);
            out.fill(0.0);
            with_scratch(n_tok * MAX_CALL_ROWS, |scratch| {
                for Range { start: r0, end: r1 } in call_ranges(rows.clone(), n_tok) {
                    let n = r1 - r0;
                    let raw = &mut scratch[..n_tok * n];
                    for b in 0..w.blocks {
                        raw_dots_multi(isa, w, &q[..n_tok * pc], n_tok, r0..r1, b..b + 1, raw);
                        for t in 0..n_tok {
                            let dst = &mut out[t * n_rows + (r0 - rows.start)..][..n];
                            for (i, o) in dst.iter_mut().enumerate() {
                                let d = ds[(r0 + i) * w.blocks + b];
                                *o += (raw[t * n + i] - sums[t * w.blocks + b]) as f32 * d;
                            }
                        }
                    }
                }
            });
            for (t, act) in acts.iter().enumerate() {
                for o in &mut out[t * n_rows..(t + 1) * n_rows] {
                    *o /= act.scale;
                }
            }
        }
    }
}

/// Exact integer products `sum_j w[r][j] * q[j]` (scales not applied) for rows `rows`; the
/// integer core of [`ternary_matvec`], exposed for tests and diagnostics.
pub fn ternary_int_dots(
    isa: Isa,
    w: &TernaryMatrix,
    q: &[i8],
    rows: Range<usize>,
    out: &mut [i32],
) {
    assert!(rows.start <= rows.end && rows.end <= w.rows && q.len() >= w.padded_cols());
    assert_eq!(out.len(), rows.len());
    let sum: i32 = q[..w.padded_cols()].iter().map(|&v| v as i32).sum();
    raw_dots(isa, w, q, rows, 0..w.blocks, out);
    for o in out {
        *o -= sum;
    }
}

/// Exact integer products for `n_tok` activation rows: `out[t * rows.len() + i]`.
pub fn ternary_int_dots_multi(
    isa: Isa,
    w: &TernaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [i32],
) {
    let pc = w.padded_cols();
    let q_len = n_tok
        .checked_mul(pc)
        .expect("token rows x padded columns overflow usize");
    assert!(rows.start <= rows.end && rows.end <= w.rows && q.len() >= q_len);
    assert_eq!(
        Some(out.len()),
        n_tok.checked_mul(rows.len()),
        "out must hold n_tok x rows"
    );
    raw_dots_multi(isa, w, &q[..q_len], n_tok, rows.clone(), 0..w.blocks, out);
    for t in 0..n_tok {
        let sum: i32 = q[t * pc..(t + 1) * pc].iter().map(|&v| v as i32).sum();
        for o in &mut out[t * rows.len()..(t + 1) * rows.len()] {
            *o -= sum;
        }
    }
}

impl TernaryMatrix {
    /// The repacked weight bytes (for bandwidth probes and diagnostics).
    pub fn packed_bytes(&self) -> &[u8] {
        &self.data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ranges_cover_the_rows_in_calls_of_about_one_size() {
        for n_tok in [1, EVEN_CALLS_FROM_TOKENS - 1, EVEN_CALLS_FROM_TOKENS, 512] {
            let even = n_tok >= EVEN_CALLS_FROM_TOKENS;
            for start in [0, 3, 256] {
                for n in 0..2000 {
                    let at = format!("{n_tok} tokens, {start}..+{n}");
                    let calls: Vec<_> = call_ranges(start..start + n, n_tok).collect();
                    assert_eq!(calls.first().map(|r| r.start), Some(start), "{at}");
                    assert_eq!(calls.last().map(|r| r.end), Some(start + n), "{at}");
                    for pair in calls.windows(2) {
                        assert_eq!(pair[0].end, pair[1].start, "{at}: contiguous");
                        assert_eq!((pair[0].end - start) % ROW_GROUP, 0, "{at}: on groups");
                    }
                    let (lo, hi) = calls.iter().fold((usize::MAX, 0), |(lo, hi), r| {
                        (lo.min(r.len()), hi.max(r.len()))
                    });
                    if even {
                        assert!(hi < MAX_CALL_ROWS, "{at}: a call of {hi} rows");
                        assert!(hi - lo < 2 * ROW_GROUP, "{at}: calls of {lo} and {hi} rows");
                        if n >= MATMUL_CALL_ROWS {
                            assert!(lo > MATMUL_CALL_ROWS / 2, "{at}: a call of {lo} rows");
                        }
                    } else {
                        assert_eq!(hi, n.min(MATMUL_CALL_ROWS), "{at}: the longest call");
                        assert_eq!(calls.len(), n.div_ceil(MATMUL_CALL_ROWS).max(1), "{at}");
                    }
                }
            }
        }
    }
}
