//! Sign-only (1-bit) weights and activations in memory: the bit layout every kernel set
//! reads, and the shapes its kernels check.
//!
//! ## In-memory layout
//! Row-major bit rows, `padded_cols / 64` little-endian `u64` words per row (`padded_cols` a
//! multiple of 256, matching [`TernaryMatrix::padded_cols`]): bit `j % 64` of word
//! `j / 64` is 1 for weight +1 and 0 for -1. Padding bits are 0; padded activations are 0
//! (int8) or 0 bits, so padding contributes nothing (the XNOR count only counts valid columns).
//! `sum w * q = 2 * sum_{bit=1} q - sum q`; `sum w * x = valid - 2 * popcount(w ^ x)`.
//!
//! Scales: one per tensor, or (from [`BinaryMatrix::from_q1_bits`] when the groups differ) one
//! per 128-column group, applied group by group in f32 (slow path).

use std::ops::Range;

use crate::aligned::AlignedVec;
use crate::error::KernelError;
use crate::extent::tokens_times;
use crate::layout::files::{Q1_GROUP, Q1_GROUP_BYTES};
use crate::layout::half::f16_to_f32;
#[cfg(doc)]
use crate::layout::ternary::TernaryMatrix;
use crate::layout::ternary::{BLOCK, MAX_COLS, MAX_ELEMENTS};

/// Words per scale group (128 columns).
pub(crate) const GROUP_WORDS: usize = Q1_GROUP / 64;

/// A 1-bit weight matrix in the layout described in the module docs.
#[derive(Clone, Debug)]
pub struct BinaryMatrix {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// `u64` words per row.
    pub(crate) words: usize,
    pub(crate) bits: AlignedVec<u64>,
    pub(crate) scale: f32,
    /// `rows x (padded_cols / 128)` scales, only when the groups do not share one.
    pub(crate) group_scales: Option<Vec<f32>>,
}

impl BinaryMatrix {
    fn empty(rows: usize, cols: usize, format: &'static str) -> Result<Self, KernelError> {
        rows.checked_mul(cols)
            .filter(|&n| n > 0 && n <= MAX_ELEMENTS && cols <= MAX_COLS)
            .ok_or(KernelError::BadShape {
                format,
                rows,
                cols,
                reason: "empty or too large",
            })?;
        let words = cols.div_ceil(BLOCK) * BLOCK / 64;
        Ok(BinaryMatrix {
            rows,
            cols,
            words,
            bits: AlignedVec::zeroed(rows * words),
            scale: 1.0,
            group_scales: None,
        })
    }

    /// From signs (row-major, each +1 or -1) and a per-tensor scale.
    pub fn from_signs(
        signs: &[i8],
        rows: usize,
        cols: usize,
        scale: f32,
    ) -> Result<Self, KernelError> {
        let mut m = Self::empty(rows, cols, "signs")?;
        if signs.len() != rows * cols {
            return Err(KernelError::SourceLength {
                format: "signs",
                rows,
                cols,
                expected: rows * cols,
                got: signs.len(),
            });
        }
        if !scale.is_finite() {
            return Err(KernelError::NonFinite {
                what: "binary scale",
                value: scale.to_string(),
            });
        }
        for (i, &s) in signs.iter().enumerate() {
            match s {
                1 => {
                    let (r, c) = (i / cols, i % cols);
                    m.bits[r * m.words + c / 64] |= 1 << (c % 64);
                }
                -1 => {}
                value => {
                    return Err(KernelError::BadWeight {
                        index: i,
                        value,
                        expected: "-1 or +1",
                    });
                }
            }
        }
        m.scale = scale;
        Ok(m)
    }

    /// From the plain Q1 group layout (see [`crate::formats`]): per row, groups of 128 weights
    /// as `[f16 scale][16 bytes of bits]`; `cols` a multiple of 128.
    pub fn from_q1_bits(bytes: &[u8], rows: usize, cols: usize) -> Result<Self, KernelError> {
        let mut m = Self::empty(rows, cols, "Q1")?;
        if !cols.is_multiple_of(Q1_GROUP) {
            return Err(KernelError::BadShape {
                format: "Q1",
                rows,
                cols,
                reason: "cols must be a multiple of 128",
            });
        }
        let groups = cols / Q1_GROUP;
        let expected = rows * groups * Q1_GROUP_BYTES;
        if bytes.len() < expected {
            return Err(KernelError::SourceLength {
                format: "Q1",
                rows,
                cols,
                expected,
                got: bytes.len(),
            });
        }
        let pgroups = m.words / GROUP_WORDS;
        let mut scales = vec![0f32; rows * pgroups];
        let mut uniform = true;
        let first = f16_to_f32(u16::from_le_bytes([bytes[0], bytes[1]]));
        for r in 0..rows {
            for g in 0..groups {
                let blk = &bytes[(r * groups + g) * Q1_GROUP_BYTES..][..Q1_GROUP_BYTES];
                let s = f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
                if !s.is_finite() {
                    return Err(KernelError::NonFinite {
                        what: "Q1 group scale",
                        value: s.to_string(),
                    });
                }
                uniform &= s.to_bits() == first.to_bits();
                scales[r * pgroups + g] = s;
                for w in 0..GROUP_WORDS {
                    let word =
                        u64::from_le_bytes(blk[2 + 8 * w..10 + 8 * w].try_into().expect("8"));
                    m.bits[r * m.words + g * GROUP_WORDS + w] = word;
                }
            }
        }
        if uniform {
            m.scale = first;
        } else {
            m.group_scales = Some(scales);
        }
        Ok(m)
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Length each int8 activation row must have (zero-padded past `cols`).
    pub fn padded_cols(&self) -> usize {
        self.words * 64
    }

    pub fn memory_bytes(&self) -> usize {
        self.bits.len() * 8 + self.group_scales.as_ref().map_or(0, |s| s.len() * 4)
    }

    /// The sign bits a full product streams, as bytes (the scales apart).
    pub fn weight_bytes(&self) -> &[u8] {
        let words = self.bits.as_slice();
        // SAFETY: u64 has no padding and any byte is a valid u8; the byte view covers exactly
        // the words' memory and borrows them for its lifetime.
        unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 8) }
    }

    /// The per-tensor scale, or `None` with per-group scales.
    pub fn tensor_scale(&self) -> Option<f32> {
        self.group_scales.is_none().then_some(self.scale)
    }

    /// Sign (+1 / -1) of row `r`, column `c`.
    pub fn sign(&self, r: usize, c: usize) -> i8 {
        if (self.bits[r * self.words + c / 64] >> (c % 64)) & 1 == 1 {
            1
        } else {
            -1
        }
    }

    fn scale_at(&self, r: usize, c: usize) -> f32 {
        match &self.group_scales {
            None => self.scale,
            Some(s) => s[r * (self.words / GROUP_WORDS) + c / Q1_GROUP],
        }
    }

    /// Row `r` as f32 weights including the scale; `out.len() == cols`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        assert!(
            r < self.rows && out.len() == self.cols,
            "dequantize_row: bad row or length"
        );
        for (c, o) in out.iter_mut().enumerate() {
            *o = self.sign(r, c) as f32 * self.scale_at(r, c);
        }
    }

    /// Bit words of row `r`.
    pub fn row_bits(&self, r: usize) -> &[u64] {
        &self.bits[r * self.words..(r + 1) * self.words]
    }
}

/// 1-bit activations of one row: sign bits and the `mean|x|` scale.
#[derive(Clone, Debug)]
pub struct BinaryActs {
    pub bits: Vec<u64>,
    pub scale: f32,
}

impl BinaryActs {
    /// Room for a row of `padded_cols` values.
    pub fn new(padded_cols: usize) -> Self {
        BinaryActs {
            bits: vec![0; binary_words(padded_cols)],
            scale: 0.0,
        }
    }
}

/// Shape checks of the 1-bit kernels, made again by every SIMD token method (those kernels
/// index raw pointers from these); `act_cols` is the activation length in columns.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)] // used by the SIMD levels only
pub(crate) fn check_raw_dots(
    w: &BinaryMatrix,
    act_cols: usize,
    n_tok: usize,
    rows: &Range<usize>,
    words: &Range<usize>,
    out: &[i32],
) {
    assert!(rows.start <= rows.end && rows.end <= w.rows);
    assert!(words.start <= words.end && words.end <= w.words);
    assert!(act_cols >= tokens_times(n_tok, w.padded_cols()));
    assert_eq!(out.len(), tokens_times(n_tok, rows.len()));
}

/// Number of `u64` words a sign-bit row of `cols` values needs (rounded up to whole words).
pub fn binary_words(cols: usize) -> usize {
    cols.div_ceil(64)
}
