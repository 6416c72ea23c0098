//! Q8_K activations ([`Q8KActs`]), what the integer product of a Q6_K head
//! (`matmul_q6k_q8k`) reads: the head's input quantized in blocks of [`QK_K`] = 256 values, one
//! f32 scale a block, and the sums of each 16 codes, so the kernels can multiply the unsigned
//! Q6_K codes (0..63) and take `32 * sum` off afterwards instead of re-centering every code.
//!
//! ## Layout
//! For each of `capacity` token rows:
//! - `quants`: `cols` i8 codes in column order (64-byte aligned rows), never -128;
//! - `scales`: one f32 `d` a block, `x ≈ d * q`;
//! - `bsums`: 16 i16 a block, `bsums[16 b + j]` = the sum of codes `256 b + 16 j ..+ 16`
//!   (at most 16 * 127 in magnitude), in the order of the Q6_K block's 16 sub-block scales.

use std::ops::Range;

use crate::aligned::AlignedVec;
use crate::extent::holds;
use crate::layout::rows::{QK_K, RowFormat};

/// Codes summed in one entry of `bsums` (one Q6_K sub-block).
pub const Q8K_SUB: usize = 16;
/// Sub-block sums of one block.
pub const Q8K_SUMS: usize = QK_K / Q8K_SUB;

/// Q8_K activation rows; see the module docs.
#[derive(Clone, Debug)]
pub struct Q8KActs {
    cols: usize,
    capacity: usize,
    quants: AlignedVec<i8>,
    scales: AlignedVec<f32>,
    bsums: AlignedVec<i16>,
}

impl Q8KActs {
    /// Room for `capacity` rows of `cols` activations.
    ///
    /// # Panics
    /// If `cols` is not whole blocks of 256 or the sizes overflow.
    pub fn new(cols: usize, capacity: usize) -> Q8KActs {
        assert!(
            cols.is_multiple_of(QK_K),
            "Q8KActs: {cols} columns are not whole blocks of {QK_K}"
        );
        let blocks = cols / QK_K;
        let q_len = capacity.checked_mul(cols).expect("Q8KActs size overflows");
        Q8KActs {
            cols,
            capacity,
            quants: AlignedVec::zeroed(q_len),
            scales: AlignedVec::zeroed(capacity * blocks),
            bsums: AlignedVec::zeroed(capacity * blocks * Q8K_SUMS),
        }
    }

    /// Quantizes `x` (`cols` values) into token row `t`: per block `d = absmax / 127` and
    /// `q = round(x * 127 / absmax)` (ties away from zero), clamped to ±127; an all-zero
    /// block is `d = 0`, codes 0. Non-finite inputs give some codes and scale, never a panic.
    ///
    /// # Panics
    /// If `t >= capacity` or `x.len() != cols`.
    pub fn quantize_row(&mut self, t: usize, x: &[f32]) {
        assert!(
            t < self.capacity,
            "Q8KActs::quantize_row: row {t} past capacity"
        );
        assert_eq!(x.len(), self.cols, "Q8KActs::quantize_row: wrong length");
        let nb = self.blocks();
        let quants = &mut self.quants[t * self.cols..(t + 1) * self.cols];
        let scales = &mut self.scales[t * nb..(t + 1) * nb];
        let bsums = &mut self.bsums[t * nb * Q8K_SUMS..(t + 1) * nb * Q8K_SUMS];
        for (b, xb) in x.chunks_exact(QK_K).enumerate() {
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let (d, id) = if amax > 0.0 {
                (amax / 127.0, 127.0 / amax)
            } else {
                (0.0, 0.0)
            };
            scales[b] = d;
            let qb = &mut quants[b * QK_K..(b + 1) * QK_K];
            for (q, &v) in qb.iter_mut().zip(xb) {
                // `as` saturates and maps NaN to 0; the clamp keeps -128 out.
                *q = ((v * id).round() as i32).clamp(-127, 127) as i8;
            }
            for (s, sub) in bsums[b * Q8K_SUMS..(b + 1) * Q8K_SUMS]
                .iter_mut()
                .zip(qb.chunks_exact(Q8K_SUB))
            {
                *s = sub.iter().map(|&q| i16::from(q)).sum();
            }
        }
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Token rows it holds room for.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Blocks of 256 in a row.
    pub fn blocks(&self) -> usize {
        self.cols / QK_K
    }

    /// Row `t`'s codes.
    pub fn quants(&self, t: usize) -> &[i8] {
        &self.quants[t * self.cols..(t + 1) * self.cols]
    }

    /// Row `t`'s block scales.
    pub fn scales(&self, t: usize) -> &[f32] {
        let nb = self.blocks();
        &self.scales[t * nb..(t + 1) * nb]
    }

    /// Row `t`'s sub-block sums, 16 a block.
    pub fn bsums(&self, t: usize) -> &[i16] {
        let n = self.blocks() * Q8K_SUMS;
        &self.bsums[t * n..(t + 1) * n]
    }

    /// The three buffers whole (for the kernels' raw pointers).
    #[cfg_attr(
        not(any(target_arch = "x86_64", target_arch = "aarch64")),
        allow(dead_code)
    )]
    pub(crate) fn raw(&self) -> (&[i8], &[f32], &[i16]) {
        (&self.quants, &self.scales, &self.bsums)
    }
}

/// The shape checks of a Q6_K x Q8_K product, made by the safe API and again by every SIMD
/// token method (their kernels index raw pointers from these): Q6_K rows `row_len` long in
/// `w` up to `rows.end`, activations of that width with room for `n_tok` rows, and `out` of
/// `n_tok * rows.len()`.
///
/// # Panics
/// On any mismatch, with a message.
pub(crate) fn check_matmul_q6k(
    w: &[u8],
    row_len: usize,
    x: &Q8KActs,
    n_tok: usize,
    rows: &Range<usize>,
    out: &[f32],
) {
    let rb = RowFormat::Q6K
        .row_bytes(row_len)
        .unwrap_or_else(|| panic!("matmul_q6k_q8k: rows of {row_len} are not whole Q6_K blocks"));
    assert_eq!(
        row_len, x.cols,
        "matmul_q6k_q8k: weights and activations differ in width"
    );
    assert!(
        n_tok <= x.capacity,
        "matmul_q6k_q8k: {n_tok} token rows, room for {}",
        x.capacity
    );
    assert!(
        rows.start <= rows.end && holds(w.len(), rows.end, rb),
        "matmul_q6k_q8k: row range {rows:?} outside {} bytes of rows of {rb}",
        w.len()
    );
    assert!(
        holds(out.len(), n_tok, rows.len()) && out.len() == n_tok * rows.len(),
        "matmul_q6k_q8k: out must be n_tok x rows"
    );
    // What the kernels' pointers rely on, implied by the construction of `Q8KActs`.
    debug_assert!(holds(x.quants.len(), x.capacity, x.cols));
    debug_assert!(holds(x.bsums.len(), x.capacity, x.blocks() * Q8K_SUMS));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_scales_and_sums_agree() {
        let x: Vec<f32> = (0..512)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.1)
            .collect();
        let mut a = Q8KActs::new(512, 2);
        a.quantize_row(1, &x);
        a.quantize_row(0, &[0.0; 512]);
        assert!(a.quants(0).iter().all(|&q| q == 0) && a.scales(0) == [0.0, 0.0]);
        for b in 0..2 {
            let d = a.scales(1)[b];
            let q = &a.quants(1)[b * QK_K..(b + 1) * QK_K];
            assert!(q.iter().any(|&v| v.abs() == 127) && q.iter().all(|&v| v != -128));
            for (v, &c) in x[b * QK_K..].iter().zip(q) {
                assert!((v - d * f32::from(c)).abs() <= 0.5001 * d);
            }
            for j in 0..Q8K_SUMS {
                let s: i16 = q[16 * j..16 * j + 16].iter().map(|&v| i16::from(v)).sum();
                assert_eq!(a.bsums(1)[16 * b + j], s);
            }
        }
    }
}
