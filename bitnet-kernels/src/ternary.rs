//! The safe dispatched products of ternary weights ([`TernaryMatrix`], laid out by
//! [`crate::layout::ternary`]) with int8 activations: matrix x vector, matrix x matrix, and
//! the exact integer dots under them.
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
use crate::dispatch::kernels;
use crate::isa::Isa;
use crate::ops::Kernels;

pub use crate::layout::ternary::{
    BLOCK, BLOCK_BYTES, MAX_COLS, MAX_ELEMENTS, ROW_GROUP, TernaryMatrix, TernarySource,
};

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
    kernels(isa).ternary_raw_dots(w, q, rows, blocks, out)
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
    kernels(isa).ternary_raw_dots_multi(w, q, n_tok, rows, blocks, out)
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
