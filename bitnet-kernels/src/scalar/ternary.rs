//! Reference ternary kernels over the repacked layout of [`crate::layout::ternary`]: the raw dot
//! `sum_c code(r, c) * q[c]` with `code = w + 1` (callers subtract the activation sum).

use std::ops::Range;

use crate::layout::ternary::{BLOCK, BLOCK_BYTES, TernaryMatrix};

/// Raw dot of row `r` over `blocks` with one activation row `q` (full padded row).
#[inline]
fn row_raw(w: &TernaryMatrix, r: usize, q: &[i8], blocks: Range<usize>) -> i32 {
    let mut acc = 0i32;
    for b in blocks {
        let off = w.offset(r, b);
        let bytes = &w.data[off..off + BLOCK_BYTES];
        let act = &q[b * BLOCK..(b + 1) * BLOCK];
        for l in 0..4 {
            let run = &act[l * 64..(l + 1) * 64];
            for (&byte, &a) in bytes.iter().zip(run) {
                acc += ((byte >> (2 * l)) & 3) as i32 * a as i32;
            }
        }
    }
    acc
}

/// `out[i] = raw dot of row rows.start + i`.
pub fn raw_dots(
    w: &TernaryMatrix,
    q: &[i8],
    rows: Range<usize>,
    blocks: Range<usize>,
    out: &mut [i32],
) {
    for (o, r) in out.iter_mut().zip(rows) {
        *o = row_raw(w, r, q, blocks.clone());
    }
}

/// `out[t * rows.len() + i] = raw dot of row rows.start + i with activation row t`.
pub fn raw_dots_multi(
    w: &TernaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: Range<usize>,
    blocks: Range<usize>,
    out: &mut [i32],
) {
    let pc = w.padded_cols();
    let n = rows.len();
    out[..n_tok * n].fill(0);
    // Each block's codes are unpacked once, in column order, for all the tokens.
    let mut codes = [0i8; BLOCK];
    for (i, r) in rows.clone().enumerate() {
        for b in blocks.clone() {
            unpack_block(w, r, b, &mut codes);
            for t in 0..n_tok {
                let act = &q[t * pc + b * BLOCK..t * pc + (b + 1) * BLOCK];
                let dot: i32 = codes
                    .iter()
                    .zip(act)
                    .map(|(&c, &a)| i32::from(c) * i32::from(a))
                    .sum();
                out[t * n + i] += dot;
            }
        }
    }
}

/// The codes `w + 1` of row `r`'s block `b`, by column.
fn unpack_block(w: &TernaryMatrix, r: usize, b: usize, codes: &mut [i8; BLOCK]) {
    let off = w.offset(r, b);
    let bytes = &w.data[off..off + BLOCK_BYTES];
    for (l, run) in codes.chunks_exact_mut(64).enumerate() {
        for (c, &byte) in run.iter_mut().zip(bytes) {
            *c = ((byte >> (2 * l)) & 3) as i8;
        }
    }
}
