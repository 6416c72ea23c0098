//! Reference 1-bit kernels over the bit-row layout of [`crate::layout::binary`].

use std::ops::Range;

use crate::layout::binary::BinaryMatrix;

/// `out[t * rows.len() + i] = sum of q_t[c]` over the columns `c` in `words` whose weight bit
/// is 1, for row `rows.start + i`.
pub fn raw_dots_multi(
    w: &BinaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: Range<usize>,
    words: Range<usize>,
    out: &mut [i32],
) {
    let pc = w.padded_cols();
    let n = rows.len();
    for t in 0..n_tok {
        let qt = &q[t * pc..(t + 1) * pc];
        for (i, r) in rows.clone().enumerate() {
            let bits = w.row_bits(r);
            let mut acc = 0i32;
            for wi in words.clone() {
                let word = bits[wi];
                for j in 0..64 {
                    if (word >> j) & 1 == 1 {
                        acc += qt[wi * 64 + j] as i32;
                    }
                }
            }
            out[t * n + i] = acc;
        }
    }
}

/// `out[i] = sum over words of popcount(row_bits ^ x)` for row `rows.start + i`.
pub fn xor_popcounts(
    w: &BinaryMatrix,
    x: &[u64],
    rows: Range<usize>,
    words: Range<usize>,
    out: &mut [i32],
) {
    for (o, r) in out.iter_mut().zip(rows) {
        let bits = w.row_bits(r);
        *o = words
            .clone()
            .map(|wi| (bits[wi] ^ x[wi]).count_ones() as i32)
            .sum();
    }
}
