//! Building a [`TernaryMatrix`] from the file layouts of [`crate::layout::files`] (I2_S,
//! TQ1_0, TQ2_0) or plain trits: shape, length and value checks, then the repacking into the
//! layout of [`crate::layout::ternary`] (whole blocks by bit moves alone where the source
//! allows).

use crate::aligned::AlignedVec;
use crate::error::KernelError;
use crate::layout::files::{self as formats, TQ_BLOCK, TQ1_0_BYTES, TQ2_0_BYTES};
use crate::layout::half::f16_to_f32;
use crate::layout::ternary::{
    BLOCK, BLOCK_BYTES, MAX_COLS, MAX_ELEMENTS, ROW_GROUP, TernaryMatrix, TernarySource,
};
use crate::prefetch::prefetch_lines;

/// How far ahead of the block being repacked the I2_S source is prefetched: the hardware
/// prefetchers stop at each 4 KiB page, and page-cache pages are read straight from DRAM.
const I2S_PREFETCH: usize = 2048;

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
}
