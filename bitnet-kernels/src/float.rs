//! The float side of the kernels, as a safe API: f16/bf16 conversions, weight-row formats
//! (dequantize, re-encode), the output-head and float mat-vecs, the Q8_0 x Q8_0 head fast
//! path, RMSNorm, softmax and gated activations here; RoPE ([`RopeTable`]), attention over an
//! f16, f32 or Q8_0 KV cache (`attn`), the low-bit KV formats ([`kv`]) and the Hadamard
//! rotation ([`hadamard`]) in the submodules, re-exported here.
//!
//! Every function takes the kernel set to run as an [`Isa`]; `crate::dispatch::kernels`
//! lowers a set this CPU cannot run to the best one it can (detected once), so a wrong
//! argument costs speed, never soundness. Shapes are checked here, once per call, before any kernel
//! touches memory; a shape error is a bug in the caller (the loader checks tensor shapes) and
//! panics with a message. Scalar kernels (`crate::scalar`) are the specification; the SIMD
//! kernels match exact operations bit for bit and reductions within the budgets named below.
//! What every kernel set shares, the reference included, is defined below all of them and
//! re-exported here where public: the exact f16/bf16 conversions and the weight-row formats
//! in [`crate::layout`], the dequantize-a-chunk path of quantized rows, the Hadamard scale
//! and the F16 -> Q8_0 path of a block holding an infinity or NaN in `crate::shared`.

pub(crate) mod attn;
pub mod hadamard;
pub mod kv;
pub(crate) mod requant;
pub(crate) mod rope;

use std::ops::Range;

use crate::dispatch::kernels;
use crate::isa::Isa;
use crate::ops::Kernels;
use crate::scalar::float as scalar;

/// The weight-row formats ([`crate::layout::rows`]), at their historical path.
pub use crate::layout::rows as formats;

pub use crate::layout::half::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
pub use crate::layout::q4r::{Q4R, Q4R_ROWS};
pub use crate::layout::q6kr::{Q6KR, Q6KR_ROWS};
pub use crate::layout::q8k::Q8KActs;
pub use crate::layout::q8r::{Q8Acts, Q8R, Q8R_ROWS};
pub use crate::layout::rows::{
    Q4_0_BLOCK_BYTES, Q6K_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK_K, QK4_0, QK8_0, RowFormat,
    dequantize_row, quantize_row_q4_0, quantize_row_q6_k, quantize_row_q8_0,
};
pub use attn::{
    attn_scores_f16, attn_scores_f16_group, attn_scores_f32, attn_scores_q8_0,
    attn_weighted_sum_f16, attn_weighted_sum_f16_group, attn_weighted_sum_f32,
    attn_weighted_sum_q8_0,
};
pub use hadamard::{hadamard_rows, hadamard_supported};
pub use kv::{
    KvQuant, QK_KV, attn_scores_b1_xnor, attn_scores_kv, attn_scores_kv_int8_query,
    attn_weighted_sum_kv, b1_sign_query, int8_query, kv_dequantize, kv_quantize,
};
pub use requant::requantize_row_q8_0;
pub use rope::RopeTable;

/// Error budget of an f32 dot product of `n` terms, against the exact (f64) value:
/// `|got - exact| <= (n + DOT_SLACK_TERMS) * DOT_EPS_PER_TERM * Σ|a_i b_i|`. This is the
/// classic worst-case bound of any summation order, with or without FMA.
pub const DOT_EPS_PER_TERM: f32 = f32::EPSILON;
/// Extra terms in the dot budget (the final horizontal sums and the scale multiply).
pub const DOT_SLACK_TERMS: usize = 8;
/// Relative error of a softmax output across ISAs (the SIMD `exp` is Cephes' degree-6
/// polynomial after Cody-Waite reduction, a few ulp from `f32::exp`; plus the sum's and the
/// scaling's rounding).
pub const SOFTMAX_REL_TOL: f32 = 1e-5;
/// Relative error of an RMSNorm output (different sum of squares, rsqrt rounding).
pub const RMSNORM_REL_TOL: f32 = 1e-5;
/// Relative error of SiLU outputs (exp error, division) across ISAs.
pub const SILU_REL_TOL: f32 = 1e-5;

/// f16 -> f32 for a whole slice (F16C where available; bit-exact with [`f16_to_f32`]).
///
/// # Panics
/// If the lengths differ.
pub fn f16_to_f32_slice(isa: Isa, src: &[u16], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "f16_to_f32_slice: length mismatch");
    kernels(isa).f16_to_f32_slice(src, dst)
}

/// f32 -> f16 for a whole slice (bit-exact with [`f32_to_f16`]).
///
/// # Panics
/// If the lengths differ.
pub fn f32_to_f16_slice(isa: Isa, src: &[f32], dst: &mut [u16]) {
    assert_eq!(src.len(), dst.len(), "f32_to_f16_slice: length mismatch");
    kernels(isa).f32_to_f16_slice(src, dst)
}

/// `Σ a_i b_i` (within the dot budget).
///
/// # Panics
/// If the lengths differ.
pub fn dot_f32(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot_f32: length mismatch");
    kernels(isa).dot_f32(a, b)
}

#[allow(clippy::too_many_arguments)]
fn check_matmul(
    what: &str,
    fmt: RowFormat,
    data_len: usize,
    row_len: usize,
    x_len: usize,
    n_tok: usize,
    rows: &Range<usize>,
    out_len: usize,
) {
    let rb = fmt.row_bytes(row_len).unwrap_or_else(|| {
        panic!(
            "{what}: rows of {row_len} are not whole {} blocks",
            fmt.name()
        )
    });
    assert!(rows.start <= rows.end, "{what}: bad row range {rows:?}");
    let need = rows.end.checked_mul(rb).expect("row range overflows");
    assert!(
        data_len >= need,
        "{what}: rows {rows:?} of {rb} bytes need {need} bytes, data has {data_len}"
    );
    // Checked products: a wrapped size must not pass for a matching one.
    let x_need = n_tok.checked_mul(row_len);
    assert_eq!(Some(x_len), x_need, "{what}: x must be n_tok x row_len");
    let out_need = n_tok.checked_mul(rows.len());
    assert_eq!(Some(out_len), out_need, "{what}: out must be n_tok x rows");
}

/// `out[i] = dot(row rows.start + i of data, x)`: the output head / float mat-vec.
/// `data` holds rows of `row_len` elements in `fmt` (at least `rows.end` of them).
///
/// # Panics
/// If `row_len` is not a whole number of blocks, `data` is too short, `x.len() != row_len`
/// or `out.len() != rows.len()`.
pub fn matvec_f32(
    isa: Isa,
    fmt: RowFormat,
    data: &[u8],
    row_len: usize,
    x: &[f32],
    rows: Range<usize>,
    out: &mut [f32],
) {
    matmul_f32(isa, fmt, data, row_len, x, 1, rows, out)
}

/// [`matvec_f32`] for `n_tok` activation rows: `x` is `[n_tok][row_len]`, `out` is
/// `[n_tok][rows.len()]`; each weight row is read once for all tokens.
///
/// # Panics
/// As [`matvec_f32`], with `x.len() == n_tok * row_len`, `out.len() == n_tok * rows.len()`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_f32(
    isa: Isa,
    fmt: RowFormat,
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let (dl, xl, ol) = (data.len(), x.len(), out.len());
    check_matmul("matmul_f32", fmt, dl, row_len, xl, n_tok, &rows, ol);
    if rows.is_empty() || n_tok == 0 {
        return;
    }
    kernels(isa).matmul_f32(fmt, data, row_len, x, n_tok, rows, out)
}

/// Q8_0 weight rows times one Q8_0 activation row (`xq` from [`quantize_row_q8_0`]): the
/// `--head q8` fast path. Block dots are exact integers; the f32 sum over blocks is within
/// the dot budget. Activation quants must not be -128 ([`quantize_row_q8_0`] never writes
/// it); weight quants may be anything.
///
/// # Panics
/// As [`matvec_f32`] with `fmt = Q8_0`, and `xq.len()` the Q8_0 size of `row_len`.
pub fn matvec_q8_0_q8_0(
    isa: Isa,
    w: &[u8],
    row_len: usize,
    xq: &[u8],
    rows: Range<usize>,
    out: &mut [f32],
) {
    matmul_q8_0_q8_0(isa, w, row_len, xq, 1, rows, out)
}

/// [`matvec_q8_0_q8_0`] for `n_tok` activation rows (`xq` is `n_tok` Q8_0 rows, `out` is
/// `[n_tok][rows.len()]`).
pub fn matmul_q8_0_q8_0(
    isa: Isa,
    w: &[u8],
    row_len: usize,
    xq: &[u8],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let fmt = RowFormat::Q8_0;
    let rb = fmt
        .row_bytes(row_len)
        .unwrap_or_else(|| panic!("matmul_q8_0_q8_0: rows of {row_len} are not whole Q8_0 blocks"));
    assert_eq!(
        Some(xq.len()),
        n_tok.checked_mul(rb),
        "matmul_q8_0_q8_0: xq must be n_tok Q8_0 rows"
    );
    let (wl, ol) = (w.len(), out.len());
    check_matmul(
        "matmul_q8_0_q8_0",
        fmt,
        wl,
        row_len,
        n_tok * row_len, // cannot wrap: n_tok * rb did not, and rb >= row_len
        n_tok,
        &rows,
        ol,
    );
    if rows.is_empty() || n_tok == 0 {
        return;
    }
    kernels(isa).matmul_q8_0_q8_0(w, row_len, xq, n_tok, rows, out)
}

/// Q4_0 weight rows times `n_tok` Q8_0 activation rows (`xq` from [`quantize_row_q8_0`]):
/// the `--head q4_0` head. `out[t * rows.len() + i]` is row `rows.start + i` dotted with
/// token row `t`. Block dots are exact integers; every kernel set gives the bits of the
/// scalar reference, whose float order (eight lane accumulators per dot) `scalar/q4q8.rs`
/// defines, so a token's result does not depend on its batch or on the set.
///
/// # Panics
/// As [`matmul_f32`] with `fmt = Q4_0`, and `xq.len()` the Q8_0 size of `n_tok` rows.
pub fn matmul_q4_0_q8_0(
    isa: Isa,
    w: &[u8],
    row_len: usize,
    xq: &[u8],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let what = "matmul_q4_0_q8_0";
    let xrb = RowFormat::Q8_0
        .row_bytes(row_len)
        .unwrap_or_else(|| panic!("{what}: rows of {row_len} are not whole Q8_0 blocks"));
    assert_eq!(
        Some(xq.len()),
        n_tok.checked_mul(xrb),
        "{what}: xq must be n_tok Q8_0 rows"
    );
    let (wl, ol) = (w.len(), out.len());
    // n_tok * row_len cannot wrap: n_tok * xrb did not, and xrb >= row_len.
    check_matmul(
        what,
        RowFormat::Q4_0,
        wl,
        row_len,
        n_tok * row_len,
        n_tok,
        &rows,
        ol,
    );
    if rows.is_empty() || n_tok == 0 {
        return;
    }
    kernels(isa).matmul_q4_0_q8_0(w, row_len, xq, n_tok, rows, out)
}

/// The Q8_0 head in its grouped layout ([`Q8R`]) times `n_tok` Q8_0 activation rows
/// ([`Q8Acts`]): `out[t * rows.len() + i]` is row `rows.start + i` dotted with token row `t`.
/// Every kernel set gives the scalar reference's bits, which are the scalar
/// [`matmul_q8_0_q8_0`]'s on the same rows; a token's result does not depend on its batch.
/// `rows` is whole groups of [`Q8R_ROWS`] (it may end at the last row), so a thread's share
/// is one contiguous stretch of the matrix.
///
/// # Panics
/// If the widths differ, `n_tok` exceeds the activations' capacity, `rows` is not a range
/// of whole groups inside the matrix, or `out.len() != n_tok * rows.len()`.
pub fn matmul_q8r(
    isa: Isa,
    w: &Q8R,
    x: &Q8Acts,
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    crate::layout::q8r::check_matmul(w, x, n_tok, &rows, out);
    if rows.is_empty() || n_tok == 0 {
        return;
    }
    kernels(isa).matmul_q8r(w, x, n_tok, rows, out)
}

/// The Q4_0 head in its grouped layout ([`Q4R`]) times `n_tok` Q8_0 activation rows
/// ([`Q8Acts`]): `out[t * rows.len() + i]` is row `rows.start + i` dotted with token row `t`.
/// Each block's dot is an exact integer, combined in f32 in block order as the Q8_0 head's
/// (`(d_w * d_x) * dot`, no FMA); every kernel set gives the scalar reference's bits, and a
/// token's result does not depend on its batch. `rows` is whole groups of [`Q4R_ROWS`] (it
/// may end at the last row).
///
/// # Panics
/// If the widths differ, `n_tok` exceeds the activations' capacity, `rows` is not a range
/// of whole groups inside the matrix, or `out.len() != n_tok * rows.len()`.
pub fn matmul_q4r(
    isa: Isa,
    w: &Q4R,
    x: &Q8Acts,
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    crate::layout::q4r::check_matmul(w, x, n_tok, &rows, out);
    if rows.is_empty() || n_tok == 0 {
        return;
    }
    kernels(isa).matmul_q4r(w, x, n_tok, rows, out)
}

/// Q6_K weight rows (a file's Q6_K output head, rows of `row_len`) times `n_tok` Q8_K
/// activation rows ([`Q8KActs`]): `out[t * rows.len() + i]` is row `rows.start + i` dotted
/// with token row `t`. Each block's dot is an exact integer, combined in f32 in block order
/// (`crate::scalar::q6k_q8k` defines the steps). The reference: the engine runs a Q6_K head
/// in the grouped layout ([`matmul_q6kr`]), whose kernels give these bits, so this op has no
/// SIMD kernels of its own. Against the f32 product of the dequantized rows it differs by the
/// Q8_K rounding of the activations.
///
/// # Panics
/// If `row_len` is not whole Q6_K blocks or differs from the activations' width, `n_tok`
/// exceeds their capacity, `w` does not hold the rows up to `rows.end`, or
/// `out.len() != n_tok * rows.len()`.
pub fn matmul_q6k_q8k(
    isa: Isa,
    w: &[u8],
    row_len: usize,
    x: &Q8KActs,
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    crate::layout::q8k::check_matmul_q6k(w, row_len, x, n_tok, &rows, out);
    if rows.is_empty() || n_tok == 0 {
        return;
    }
    kernels(isa).matmul_q6k_q8k(w, row_len, x, n_tok, rows, out)
}

/// The Q6_K head in its grouped layout ([`Q6KR`]) times `n_tok` Q8_K activation rows
/// ([`Q8KActs`]): `out[t * rows.len() + i]` is row `rows.start + i` dotted with token row `t`.
/// Every kernel set gives the scalar reference's bits, which are [`matmul_q6k_q8k`]'s on the
/// Q6_K rows the groups were made from; a token's result does not depend on its batch.
/// `rows` is whole groups of [`Q6KR_ROWS`] (it may end at the last row).
///
/// # Panics
/// If the widths differ, `n_tok` exceeds the activations' capacity, `rows` is not a range
/// of whole groups inside the matrix, or `out.len() != n_tok * rows.len()`.
pub fn matmul_q6kr(
    isa: Isa,
    w: &Q6KR,
    x: &Q8KActs,
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    crate::layout::q6kr::check_matmul(w, x, n_tok, &rows, out);
    if rows.is_empty() || n_tok == 0 {
        return;
    }
    kernels(isa).matmul_q6kr(w, x, n_tok, rows, out)
}

/// `out = x / sqrt(mean(x²) + eps) * weight`.
///
/// # Panics
/// If `weight` or `out` differ in length from `x`.
pub fn rmsnorm(isa: Isa, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    assert_eq!(x.len(), weight.len(), "rmsnorm: weight length");
    assert_eq!(x.len(), out.len(), "rmsnorm: out length");
    if x.is_empty() {
        return;
    }
    kernels(isa).rmsnorm(x, weight, eps, out)
}

/// The largest value of `x` that is not NaN (`-inf` if there is none). Eight running maxima,
/// so the compiler vectorizes it: a plain `fold` of `f32::max` runs one value at a time, and
/// at pp512 it was a third of the softmax's time.
fn max_skipping_nan(x: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            // A NaN compares false: skipped, as `f32::max` skips it.
            if v > *m {
                *m = v;
            }
        }
    }
    let rest = chunks.remainder().iter().chain(&lanes);
    rest.fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// In-place softmax, max-subtracted. A row with no finite maximum (all `-inf`, as a fully
/// masked row would be) becomes all zeros rather than NaN; a NaN anywhere makes the row NaN.
///
/// Returns the row's statistics before normalizing, `(max, sum of exp(x - max))`, so that
/// a row softmaxed in pieces can be put back together (an empty or fully masked row gives
/// `(-inf, 0)`: it carries no weight).
pub fn softmax_inplace(isa: Isa, x: &mut [f32]) -> (f32, f32) {
    if x.is_empty() {
        return (f32::NEG_INFINITY, 0.0);
    }
    let max = max_skipping_nan(x);
    if !max.is_finite() {
        if max == f32::NEG_INFINITY {
            // The maximum skips NaNs: a row with no finite value but a NaN is NaN, and its
            // sum says so to whoever merges it.
            if x.iter().any(|v| v.is_nan()) {
                x.fill(f32::NAN);
                return (f32::NEG_INFINITY, f32::NAN);
            }
            x.fill(0.0);
            return (f32::NEG_INFINITY, 0.0);
        }
        // +inf or NaN present: the plain formula's NaNs are the honest answer.
        return scalar::softmax_inplace(x);
    }
    kernels(isa).softmax_inplace(x)
}

macro_rules! binary_op {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        ///
        /// # Panics
        /// If the lengths differ.
        pub fn $name(isa: Isa, dst: &mut [f32], src: &[f32]) {
            assert_eq!(dst.len(), src.len(), concat!(stringify!($name), ": length mismatch"));
            kernels(isa).$name(dst, src)
        }
    };
}

binary_op!(
    /// `gate = silu(gate) * up`, `silu(v) = v / (1 + exp(-v))`.
    silu_mul
);
binary_op!(
    /// `gate = max(gate, 0)² * up` (BitNet b1.58 2B-4T's FFN).
    relu2_mul
);
binary_op!(
    /// `gate = gelu_tanh(gate) * up` (Gemma3's FFN: ggml's `gelu`, HF `gelu_pytorch_tanh`).
    gelu_tanh_mul
);
binary_op!(
    /// `dst += src`.
    add_inplace
);
binary_op!(
    /// `dst *= src`.
    mul_inplace
);

/// `x = silu(x)`.
pub fn silu(isa: Isa, x: &mut [f32]) {
    kernels(isa).silu(x)
}

/// `x = max(x, 0)²`.
pub fn relu2(isa: Isa, x: &mut [f32]) {
    kernels(isa).relu2(x)
}

/// `x *= s`.
pub fn scale_inplace(isa: Isa, x: &mut [f32], s: f32) {
    kernels(isa).scale_inplace(x, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_skipping_nan_is_the_fold_of_f32_max() {
        // Lengths around the eight lanes, NaNs and infinities anywhere, the maximum in every
        // lane and in the remainder.
        let mut seed = 7u32;
        let mut next = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            seed
        };
        for len in 0..40 {
            for _ in 0..50 {
                let x: Vec<f32> = (0..len)
                    .map(|_| match next() % 10 {
                        0 => f32::NAN,
                        1 => f32::NEG_INFINITY,
                        2 if next() % 4 == 0 => f32::INFINITY,
                        _ => (next() % 2001) as f32 / 100.0 - 10.0,
                    })
                    .collect();
                let want = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                let got = max_skipping_nan(&x);
                assert_eq!(got.to_bits(), want.to_bits(), "{x:?}");
            }
        }
    }
}
