//! Sign-only (1-bit) weight matrices: +-1 weights with a scale, multiplied with int8
//! activations ([`binary_matvec`], [`binary_matmul`]) or with 1-bit activations by XNOR and
//! popcount ([`binary_binary_matvec`]).
//!
//! The bit layout and the scales are described in [`crate::layout::binary`].

use std::ops::Range;

use crate::act::ActScale;
use crate::dispatch::kernels;
use crate::isa::Isa;
use crate::layout::binary::GROUP_WORDS;
use crate::layout::files::Q1_GROUP;
use crate::ops::Kernels;
use crate::ternary::with_scratch;

pub use crate::layout::binary::{BinaryActs, BinaryMatrix};

impl BinaryActs {
    /// Quantizes `x` into `self` (see [`crate::quantize_act_binary`]).
    pub fn quantize(&mut self, isa: Isa, x: &[f32]) {
        self.scale = crate::act::quantize_act_binary(isa, x, &mut self.bits);
    }
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
    kernels(isa).binary_raw_dots_multi(w, q, n_tok, rows, words, out)
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
    kernels(isa).binary_xor_popcounts(w, x, rows, words, out)
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
