//! Sign-only (1-bit) weight matrices: +-1 weights with a scale, multiplied with int8
//! activations ([`binary_matvec`], [`binary_matmul`]) or with 1-bit activations by XNOR and
//! popcount ([`binary_binary_matvec`]).
//!
//! ## In-memory layout
//! Row-major bit rows, `padded_cols / 64` little-endian `u64` words per row (`padded_cols` a
//! multiple of 256, matching [`crate::TernaryMatrix::padded_cols`]): bit `j % 64` of word
//! `j / 64` is 1 for weight +1 and 0 for -1. Padding bits are 0; padded activations are 0
//! (int8) or 0 bits, so padding contributes nothing (the XNOR count only counts valid columns).
//! `sum w * q = 2 * sum_{bit=1} q - sum q`; `sum w * x = valid - 2 * popcount(w ^ x)`.
//!
//! Scales: one per tensor, or (from [`BinaryMatrix::from_q1_bits`] when the groups differ) one
//! per 128-column group, applied group by group in f32 (slow path).

use std::ops::Range;

use crate::float::f16_to_f32;

use crate::act::{ActScale, binary_words};
use crate::aligned::AlignedVec;
use crate::dispatch::token;
use crate::error::KernelError;
use crate::extent::tokens_times;
use crate::formats::{Q1_GROUP, Q1_GROUP_BYTES};
use crate::isa::Isa;
use crate::scalar;
use crate::ternary::{BLOCK, MAX_COLS, MAX_ELEMENTS, with_scratch};

/// Words per scale group (128 columns).
const GROUP_WORDS: usize = Q1_GROUP / 64;

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

    /// Quantizes `x` into `self` (see [`crate::quantize_act_binary`]).
    pub fn quantize(&mut self, isa: Isa, x: &[f32]) {
        self.scale = crate::act::quantize_act_binary(isa, x, &mut self.bits);
    }
}

/// Shape checks of the 1-bit kernels, made again by every SIMD token method (those kernels
/// index raw pointers from these); `act_cols` is the activation length in columns.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // used by the SIMD tokens
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

/// `out[t * rows.len() + i] = sum_{c: bit=1} q_t[c]` over `words` for rows `rows`.
pub(crate) fn raw_dots_multi(
    isa: Isa,
    w: &BinaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: Range<usize>,
    words: Range<usize>,
    out: &mut [i32],
) {
    if let Some(simd) = token(isa) {
        return simd.binary_raw_dots_multi(w, q, n_tok, rows, words, out);
    }
    scalar::binary::raw_dots_multi(w, q, n_tok, rows, words, out)
}

/// `out[i] = popcount(w_row ^ x)` over `words` for rows `rows`.
pub(crate) fn xor_popcounts(
    isa: Isa,
    w: &BinaryMatrix,
    x: &[u64],
    rows: Range<usize>,
    words: Range<usize>,
    out: &mut [i32],
) {
    if let Some(simd) = token(isa) {
        return simd.binary_xor_popcounts(w, x, rows, words, out);
    }
    scalar::binary::xor_popcounts(w, x, rows, words, out)
}

/// Rows a kernel call takes, as the ternary products (the engine cuts both alike).
const ROW_CHUNK: usize = crate::ternary::MATMUL_CALL_ROWS;

/// `out[i] = (sum_j w[rows.start + i][j] * q[j]) as f32 * w_scale / act.scale` (per-group
/// scales: summed group by group in f32, then divided by `act.scale`).
pub fn binary_matvec(
    isa: Isa,
    w: &BinaryMatrix,
    q: &[i8],
    act: ActScale,
    rows: Range<usize>,
    out: &mut [f32],
) {
    binary_matmul(isa, w, q, std::slice::from_ref(&act), rows, out)
}

/// Matrix x matrix against `acts.len()` int8 activation rows (row `t` at
/// `q[t * padded_cols..]`); `out[t * rows.len() + i]`.
pub fn binary_matmul(
    isa: Isa,
    w: &BinaryMatrix,
    q: &[i8],
    acts: &[ActScale],
    rows: Range<usize>,
    out: &mut [f32],
) {
    let n_tok = acts.len();
    let pc = w.padded_cols();
    assert!(
        rows.start <= rows.end && rows.end <= w.rows,
        "binary product: rows outside the matrix"
    );
    assert!(
        q.len() >= n_tok * pc,
        "binary product: activations shorter than padded_cols"
    );
    assert_eq!(
        out.len(),
        n_tok * rows.len(),
        "binary product: output length"
    );
    let n_rows = rows.len();
    if n_rows == 0 || n_tok == 0 {
        return;
    }
    let q = &q[..n_tok * pc];
    match &w.group_scales {
        None => with_scratch(n_tok * ROW_CHUNK, |scratch| {
            for r0 in rows.clone().step_by(ROW_CHUNK) {
                let r1 = (r0 + ROW_CHUNK).min(rows.end);
                let n = r1 - r0;
                let raw = &mut scratch[..n_tok * n];
                raw_dots_multi(isa, w, q, n_tok, r0..r1, 0..w.words, raw);
                for (t, act) in acts.iter().enumerate() {
                    let mul = w.scale / act.scale;
                    let dst = &mut out[t * n_rows + (r0 - rows.start)..][..n];
                    for (o, &d) in dst.iter_mut().zip(&raw[t * n..(t + 1) * n]) {
                        *o = (2 * d - act.sum) as f32 * mul;
                    }
                }
            }
        }),
        Some(gs) => {
            let pgroups = w.words / GROUP_WORDS;
            let mut sums = vec![0i32; n_tok * pgroups];
            for t in 0..n_tok {
                for g in 0..pgroups {
                    let run = &q[t * pc + g * Q1_GROUP..t * pc + (g + 1) * Q1_GROUP];
                    sums[t * pgroups + g] = run.iter().map(|&v| v as i32).sum();
                }
            }
            out.fill(0.0);
            with_scratch(n_tok * ROW_CHUNK, |scratch| {
                for r0 in rows.clone().step_by(ROW_CHUNK) {
                    let r1 = (r0 + ROW_CHUNK).min(rows.end);
                    let n = r1 - r0;
                    let raw = &mut scratch[..n_tok * n];
                    for g in 0..pgroups {
                        raw_dots_multi(
                            isa,
                            w,
                            q,
                            n_tok,
                            r0..r1,
                            g * GROUP_WORDS..(g + 1) * GROUP_WORDS,
                            raw,
                        );
                        for t in 0..n_tok {
                            let dst = &mut out[t * n_rows + (r0 - rows.start)..][..n];
                            for (i, o) in dst.iter_mut().enumerate() {
                                let s = gs[(r0 + i) * pgroups + g];
                                *o += (2 * raw[t * n + i] - sums[t * pgroups + g]) as f32 * s;
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

/// 1-bit x 1-bit: `out[i] = (sum_j sign(w[r][j]) * sign(x[j])) as f32 * w_scale * act_scale`
/// with the signed sum computed as `cols - 2 * popcount(w ^ x)`; `bits` from
/// [`crate::quantize_act_binary`] (at least `padded_cols / 64` words, zero past `cols`).
pub fn binary_binary_matvec(
    isa: Isa,
    w: &BinaryMatrix,
    bits: &[u64],
    act_scale: f32,
    rows: Range<usize>,
    out: &mut [f32],
) {
    assert!(
        rows.start <= rows.end && rows.end <= w.rows,
        "binary product: rows outside the matrix"
    );
    assert!(
        bits.len() >= w.words,
        "binary product: activation bits shorter than padded_cols / 64"
    );
    assert_eq!(out.len(), rows.len(), "binary product: output length");
    let bits = &bits[..w.words];
    with_scratch(ROW_CHUNK, |scratch| {
        for r0 in rows.clone().step_by(ROW_CHUNK) {
            let r1 = (r0 + ROW_CHUNK).min(rows.end);
            let n = r1 - r0;
            let pop = &mut scratch[..n];
            let dst = &mut out[r0 - rows.start..][..n];
            match &w.group_scales {
                None => {
                    xor_popcounts(isa, w, bits, r0..r1, 0..w.words, pop);
                    let mul = w.scale * act_scale;
                    for (o, &p) in dst.iter_mut().zip(pop.iter()) {
                        *o = (w.cols as i32 - 2 * p) as f32 * mul;
                    }
                }
                Some(gs) => {
                    let pgroups = w.words / GROUP_WORDS;
                    dst.fill(0.0);
                    for g in 0..pgroups {
                        let valid = w.cols.saturating_sub(g * Q1_GROUP).min(Q1_GROUP) as i32;
                        xor_popcounts(
                            isa,
                            w,
                            bits,
                            r0..r1,
                            g * GROUP_WORDS..(g + 1) * GROUP_WORDS,
                            pop,
                        );
                        for (i, o) in dst.iter_mut().enumerate() {
                            *o += (valid - 2 * pop[i]) as f32 * gs[(r0 + i) * pgroups + g];
                        }
                    }
                    for o in dst.iter_mut() {
                        *o *= act_scale;
                    }
                }
            }
        }
    })
}
