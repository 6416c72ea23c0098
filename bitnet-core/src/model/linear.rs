//! One layer projection in the layout it was loaded as: a repacked ternary matrix, a 1-bit
//! matrix, or float rows read in place. `compute` produces a row range of the output for all
//! tokens of a batch; it is what each pool thread runs for its share of the rows.

use std::ops::Range;

use bitnet_kernels::float::{self, RowFormat};
use bitnet_kernels::{
    ActScale, BinaryMatrix, Isa, TernaryMatrix, binary_binary_matvec, binary_matmul, binary_matvec,
    ternary_matmul, ternary_matvec,
};

use super::{Blob, Store};

/// Padding granule of quantized activation rows (both ternary and binary matrices pad their
/// columns to a multiple of this).
pub(crate) const ACT_PAD: usize = bitnet_kernels::ternary::BLOCK;

/// `cols` rounded up to [`ACT_PAD`]: the stride of a quantized activation row.
pub(crate) fn padded(cols: usize) -> usize {
    cols.div_ceil(ACT_PAD) * ACT_PAD
}

/// `u64` words of a sign-bit activation row of `cols` columns (padded).
pub(crate) fn bit_words(cols: usize) -> usize {
    padded(cols) / 64
}

#[derive(Debug)]
pub(crate) enum LinearKind {
    Ternary(TernaryMatrix),
    Binary(BinaryMatrix),
    Float { fmt: RowFormat, blob: Blob },
}

/// A projection `rows x cols` (`out = W x`), with the optional per-tensor `.scale` multiplier.
#[derive(Debug)]
pub(crate) struct Linear {
    pub(crate) kind: LinearKind,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) scale: Option<f32>,
}

/// What a projection reads: the batch's activations in every representation some projection
/// of the group needs (unused ones may be empty).
#[derive(Copy, Clone, Debug)]
pub(crate) struct LinInput<'a> {
    pub(crate) n_tok: usize,
    /// `[n_tok][cols]` f32 (float weights).
    pub(crate) x: &'a [f32],
    /// `[n_tok][padded(cols)]` int8 (ternary/binary weights with int8 activations).
    pub(crate) q: &'a [i8],
    pub(crate) acts: &'a [ActScale],
    /// `[n_tok][bit_words(cols)]` sign bits and their scales (1-bit activations).
    pub(crate) bits: &'a [u64],
    pub(crate) bit_scales: &'a [f32],
}

/// Which activation representations a projection consumes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Needs {
    pub(crate) f32: bool,
    pub(crate) int8: bool,
    pub(crate) bits: bool,
    /// The int8 lanes hold 4-bit values (-7..=7; a precision plan's `int4` layers).
    pub(crate) int4: bool,
}

impl Needs {
    pub(crate) fn union(self, o: Needs) -> Needs {
        Needs {
            f32: self.f32 || o.f32,
            int8: self.int8 || o.int8,
            bits: self.bits || o.bits,
            int4: self.int4 || o.int4,
        }
    }

    /// These needs, with the int8 activations at 4-bit precision where `int4`.
    pub(crate) fn with_int4(self, int4: bool) -> Needs {
        Needs {
            int4: int4 && self.int8,
            ..self
        }
    }
}

impl Linear {
    /// Row alignment of a thread's share (ternary rows are stored in groups of 4).
    pub(crate) fn align(&self) -> usize {
        match self.kind {
            LinearKind::Ternary(_) => bitnet_kernels::ternary::ROW_GROUP,
            _ => 4,
        }
    }

    /// The activations this projection reads, given the model's activation precision.
    pub(crate) fn needs(&self, binary_acts: bool) -> Needs {
        match self.kind {
            LinearKind::Ternary(_) => Needs {
                int8: true,
                ..Needs::default()
            },
            LinearKind::Binary(_) if binary_acts => Needs {
                bits: true,
                ..Needs::default()
            },
            LinearKind::Binary(_) => Needs {
                int8: true,
                ..Needs::default()
            },
            LinearKind::Float { .. } => Needs {
                f32: true,
                ..Needs::default()
            },
        }
    }

    /// Bytes this projection holds in memory (0 for float rows read from the map).
    pub(crate) fn memory_bytes(&self) -> usize {
        match &self.kind {
            LinearKind::Ternary(m) => m.memory_bytes(),
            LinearKind::Binary(m) => m.memory_bytes(),
            LinearKind::Float { .. } => 0,
        }
    }

    /// Bytes of weights a product over all rows streams (what a thread's chunk is sized by).
    pub(crate) fn stream_bytes(&self) -> usize {
        match &self.kind {
            LinearKind::Ternary(m) => m.memory_bytes(),
            LinearKind::Binary(m) => m.memory_bytes(),
            LinearKind::Float { fmt, .. } => fmt
                .row_bytes(self.cols)
                .map_or(0, |rb| rb.saturating_mul(self.rows)),
        }
    }

    /// The weight bytes a product over all rows reads, where they lie.
    pub(crate) fn streamed<'a>(&'a self, store: &'a Store) -> &'a [u8] {
        match &self.kind {
            LinearKind::Ternary(m) => m.weight_bytes(),
            LinearKind::Binary(m) => m.weight_bytes(),
            LinearKind::Float { blob, .. } => store.bytes(blob),
        }
    }

    /// The weight bytes of rows `rows` (`rows.start` a multiple of [`Linear::align`],
    /// `rows.end` too or the last row), where they lie: the rows are stored one after
    /// another (ternary ones four at a time, interleaved), so a range of them is one stretch.
    /// Per-block scales, a few KiB kept apart, are not part of it.
    pub(crate) fn row_bytes<'a>(&'a self, store: &'a Store, rows: Range<usize>) -> &'a [u8] {
        let all = self.streamed(store);
        let stored_rows = match &self.kind {
            LinearKind::Ternary(_) => self.rows.div_ceil(self.align()) * self.align(),
            _ => self.rows,
        };
        let stride = match &self.kind {
            LinearKind::Float { fmt, .. } => fmt.row_bytes(self.cols).unwrap_or(0),
            _ => all.len() / stored_rows.max(1),
        };
        let at = |r: usize| {
            if r >= self.rows {
                all.len()
            } else {
                (r * stride).min(all.len())
            }
        };
        &all[at(rows.start)..at(rows.end).max(at(rows.start))]
    }

    /// Rows `rows` of the product for every token: `out[t * rows.len() + i]`.
    pub(crate) fn compute(
        &self,
        isa: Isa,
        store: &Store,
        binary_acts: bool,
        inp: &LinInput<'_>,
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        let n = inp.n_tok;
        let nr = rows.len();
        if nr == 0 || n == 0 {
            return;
        }
        match &self.kind {
            LinearKind::Ternary(m) => {
                let pc = m.padded_cols();
                if n == 1 {
                    ternary_matvec(isa, m, &inp.q[..pc], inp.acts[0], rows, out);
                } else {
                    ternary_matmul(isa, m, &inp.q[..n * pc], &inp.acts[..n], rows, out);
                }
            }
            LinearKind::Binary(m) if binary_acts => {
                let w = bit_words(self.cols);
                for t in 0..n {
                    binary_binary_matvec(
                        isa,
                        m,
                        &inp.bits[t * w..(t + 1) * w],
                        inp.bit_scales[t],
                        rows.clone(),
                        &mut out[t * nr..(t + 1) * nr],
                    );
                }
            }
            LinearKind::Binary(m) => {
                let pc = m.padded_cols();
                if n == 1 {
                    binary_matvec(isa, m, &inp.q[..pc], inp.acts[0], rows, out);
                } else {
                    binary_matmul(isa, m, &inp.q[..n * pc], &inp.acts[..n], rows, out);
                }
            }
            LinearKind::Float { fmt, blob } => {
                let data = store.bytes(blob);
                let x = &inp.x[..n * self.cols];
                float::matmul_f32(isa, *fmt, data, self.cols, x, n, rows, out);
            }
        }
        if let Some(s) = self.scale {
            float::scale_inplace(isa, out, s);
        }
    }
}
