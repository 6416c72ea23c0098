//! The float side of the kernels, as a safe API: f16/bf16 conversions, weight-row formats
//! (dequantize, re-encode), the output-head and float mat-vecs, the Q8_0 x Q8_0 head fast
//! path, RMSNorm, softmax, RoPE, gated activations and attention over an f16, f32 or Q8_0
//! KV cache.
//!
//! Every function takes the kernel set to run as an [`Isa`]; a set this CPU cannot run is
//! lowered to the best one it can (detected once), so a wrong argument costs speed, never
//! soundness. Shapes are checked here, once per call, before any kernel touches memory; a
//! shape error is a bug in the caller (the loader checks tensor shapes) and panics with a
//! message. Scalar kernels (`crate::scalar::float`) are the specification; the SIMD kernels
//! match exact operations bit for bit and reductions within the budgets named below.

#[cfg(target_arch = "x86_64")]
mod attn_group_x86;
pub mod formats;
pub mod hadamard;
pub mod kv;
#[cfg(target_arch = "x86_64")]
pub(crate) mod qrows_x86;
pub(crate) mod requant;

use std::ops::Range;
use std::sync::OnceLock;

use crate::isa::Isa;
use crate::scalar::float as scalar;

pub use formats::{
    Q4_0_BLOCK_BYTES, Q6K_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK_K, QK4_0, QK8_0, RowFormat,
    dequantize_row, quantize_row_q4_0, quantize_row_q6_k, quantize_row_q8_0,
};
pub use hadamard::{hadamard_rows, hadamard_supported};
pub use kv::{
    KvQuant, QK_KV, attn_scores_b1_xnor, attn_scores_kv, attn_scores_kv_int8_query,
    attn_weighted_sum_kv, b1_sign_query, int8_query, kv_dequantize, kv_quantize,
};
pub use requant::requantize_row_q8_0;
pub use scalar::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};

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

/// The best kernel set at most as capable as `isa` that this CPU runs.
#[inline]
pub(crate) fn runnable(isa: Isa) -> Isa {
    static AVAIL: OnceLock<(bool, bool)> = OnceLock::new();
    let (avx2, avx512) =
        *AVAIL.get_or_init(|| (Isa::Avx2.is_available(), Isa::Avx512.is_available()));
    match isa {
        Isa::Avx512 if avx512 => Isa::Avx512,
        Isa::Avx512 | Isa::Avx2 if avx2 => Isa::Avx2,
        _ => Isa::Scalar,
    }
}

/// Calls kernel `$f` of the set `runnable($isa)` picks.
macro_rules! dispatch {
    ($isa:expr, $f:ident($($arg:expr),* $(,)?)) => {{
        match runnable($isa) {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                // SAFETY: runnable() returns Avx512 only once every feature the avx512 kernels
                // enable was detected on this CPU; the shapes were checked by the caller.
                unsafe { crate::x86_64::avx512::float::$f($($arg),*) }
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                // SAFETY: runnable() returns Avx2 only once avx2, fma and f16c were detected.
                unsafe { crate::x86_64::avx2::float::$f($($arg),*) }
            }
            _ => scalar::$f($($arg),*),
        }
    }};
}

/// f16 -> f32 for a whole slice (F16C where available; bit-exact with [`f16_to_f32`]).
///
/// # Panics
/// If the lengths differ.
pub fn f16_to_f32_slice(isa: Isa, src: &[u16], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "f16_to_f32_slice: length mismatch");
    dispatch!(isa, f16_to_f32_slice(src, dst))
}

/// f32 -> f16 for a whole slice (bit-exact with [`f32_to_f16`]).
///
/// # Panics
/// If the lengths differ.
pub fn f32_to_f16_slice(isa: Isa, src: &[f32], dst: &mut [u16]) {
    assert_eq!(src.len(), dst.len(), "f32_to_f16_slice: length mismatch");
    dispatch!(isa, f32_to_f16_slice(src, dst))
}

/// `Σ a_i b_i` (within the dot budget).
///
/// # Panics
/// If the lengths differ.
pub fn dot_f32(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot_f32: length mismatch");
    dispatch!(isa, dot_f32(a, b))
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
    dispatch!(isa, matmul_f32(fmt, data, row_len, x, n_tok, rows, out))
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
    dispatch!(isa, matmul_q8_0_q8_0(w, row_len, xq, n_tok, rows, out))
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
    dispatch!(isa, rmsnorm(x, weight, eps, out))
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
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
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
    dispatch!(isa, softmax_inplace(x))
}

macro_rules! binary_op {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        ///
        /// # Panics
        /// If the lengths differ.
        pub fn $name(isa: Isa, dst: &mut [f32], src: &[f32]) {
            assert_eq!(dst.len(), src.len(), concat!(stringify!($name), ": length mismatch"));
            dispatch!(isa, $name(dst, src))
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
    /// `dst += src`.
    add_inplace
);
binary_op!(
    /// `dst *= src`.
    mul_inplace
);

/// `x = silu(x)`.
pub fn silu(isa: Isa, x: &mut [f32]) {
    dispatch!(isa, silu(x))
}

/// `x = max(x, 0)²`.
pub fn relu2(isa: Isa, x: &mut [f32]) {
    dispatch!(isa, relu2(x))
}

/// `x *= s`.
pub fn scale_inplace(isa: Isa, x: &mut [f32], s: f32) {
    dispatch!(isa, scale_inplace(x, s))
}

fn check_attn(what: &str, d: usize, cache_len: usize, kv_stride: usize, n_pos: usize) {
    assert!(
        kv_stride >= d,
        "{what}: kv_stride {kv_stride} < head dim {d}"
    );
    if n_pos > 0 {
        let need = (n_pos - 1)
            .checked_mul(kv_stride)
            .and_then(|v| v.checked_add(d))
            .expect("cache size overflows");
        assert!(
            cache_len >= need,
            "{what}: {n_pos} positions of stride {kv_stride} need {need} elements, cache has {cache_len}"
        );
    }
}

/// `out[p] = scale * dot(q, k[p * kv_stride..][..q.len()])` for `p < n_pos`: one head's
/// attention scores over an f16 cache.
///
/// # Panics
/// If `out.len() != n_pos`, `kv_stride < q.len()` or `k` is too short.
pub fn attn_scores_f16(
    isa: Isa,
    q: &[f32],
    k: &[u16],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    assert_eq!(
        out.len(),
        n_pos,
        "attn_scores_f16: out must have n_pos scores"
    );
    check_attn("attn_scores_f16", q.len(), k.len(), kv_stride, n_pos);
    dispatch!(isa, attn_scores_f16(q, k, kv_stride, n_pos, scale, out))
}

/// `out += Σ_{p < n_pos} w[p] * v[p * kv_stride..][..out.len()]` over an f16 cache: it
/// accumulates onto `out` (zero it first for a plain sum), so attention over a paged cache
/// walks the blocks one call each and gets the bits one call over all positions would give.
///
/// # Panics
/// If `w.len() != n_pos`, `kv_stride < out.len()` or `v` is too short.
pub fn attn_weighted_sum_f16(
    isa: Isa,
    w: &[f32],
    v: &[u16],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    assert_eq!(
        w.len(),
        n_pos,
        "attn_weighted_sum_f16: w must have n_pos weights"
    );
    check_attn(
        "attn_weighted_sum_f16",
        out.len(),
        v.len(),
        kv_stride,
        n_pos,
    );
    dispatch!(isa, attn_weighted_sum_f16(w, v, kv_stride, n_pos, out))
}

/// [`attn_scores_f16`] over an f32 cache.
pub fn attn_scores_f32(
    isa: Isa,
    q: &[f32],
    k: &[f32],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    assert_eq!(
        out.len(),
        n_pos,
        "attn_scores_f32: out must have n_pos scores"
    );
    check_attn("attn_scores_f32", q.len(), k.len(), kv_stride, n_pos);
    dispatch!(isa, attn_scores_f32(q, k, kv_stride, n_pos, scale, out))
}

/// [`attn_weighted_sum_f16`] over an f32 cache.
pub fn attn_weighted_sum_f32(
    isa: Isa,
    w: &[f32],
    v: &[f32],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    assert_eq!(
        w.len(),
        n_pos,
        "attn_weighted_sum_f32: w must have n_pos weights"
    );
    check_attn(
        "attn_weighted_sum_f32",
        out.len(),
        v.len(),
        kv_stride,
        n_pos,
    );
    dispatch!(isa, attn_weighted_sum_f32(w, v, kv_stride, n_pos, out))
}

/// Grouped-query attention scores over an f16 cache: the `n_q` query heads in `q`
/// (`[n_q][d]`) share one KV head, and `out[h * n_pos + p] = scale * dot(q_h, k_p)`. Each K
/// row is loaded once for the whole group (group sizes 2, 4 and 8; others run head by
/// head). Within the dot budget of [`attn_scores_f16`], not bit-identical to it.
///
/// # Panics
/// If `n_q` is 0 or does not divide `q.len()`, `out.len() != n_q * n_pos`, or the cache is
/// too short (as [`attn_scores_f16`]).
#[allow(clippy::too_many_arguments)]
pub fn attn_scores_f16_group(
    isa: Isa,
    q: &[f32],
    n_q: usize,
    k: &[u16],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    assert!(
        n_q > 0 && q.len().is_multiple_of(n_q),
        "attn_scores_f16_group: q is not n_q heads"
    );
    let d = q.len() / n_q;
    assert_eq!(
        Some(out.len()),
        n_q.checked_mul(n_pos),
        "attn_scores_f16_group: out must be n_q x n_pos"
    );
    check_attn("attn_scores_f16_group", d, k.len(), kv_stride, n_pos);
    let isa = runnable(isa);
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        // SAFETY: runnable() returned a SIMD set only after detecting its features (Avx512
        // includes everything the AVX-512 group kernels enable, Avx2 what the AVX2 ones do);
        // the shapes were checked above.
        let done = unsafe {
            attn_group_x86::scores_group(
                isa == Isa::Avx512,
                q,
                n_q,
                k,
                kv_stride,
                n_pos,
                scale,
                out,
            )
        };
        if done {
            return;
        }
    }
    for (qh, oh) in q
        .chunks_exact(d.max(1))
        .zip(out.chunks_exact_mut(n_pos.max(1)))
    {
        attn_scores_f16(isa, qh, k, kv_stride, n_pos, scale, &mut oh[..n_pos]);
    }
}

/// Grouped-query weighted sums over an f16 cache: `w` is `[n_q][n_pos]`, `out` is
/// `[n_q][d]`, `out_h += Σ_p w[h][p] v_p` (accumulates, as [`attn_weighted_sum_f16`]); each V row is loaded once for the whole group.
///
/// # Panics
/// If `n_q` is 0 or does not divide `out.len()`, `w.len() != n_q * n_pos`, or the cache is
/// too short (as [`attn_weighted_sum_f16`]).
pub fn attn_weighted_sum_f16_group(
    isa: Isa,
    w: &[f32],
    n_q: usize,
    v: &[u16],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    assert!(
        n_q > 0 && out.len().is_multiple_of(n_q),
        "attn_weighted_sum_f16_group: out is not n_q heads"
    );
    let d = out.len() / n_q;
    assert_eq!(
        Some(w.len()),
        n_q.checked_mul(n_pos),
        "attn_weighted_sum_f16_group: w must be n_q x n_pos"
    );
    check_attn("attn_weighted_sum_f16_group", d, v.len(), kv_stride, n_pos);
    let isa = runnable(isa);
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        // SAFETY: as in attn_scores_f16_group.
        let done = unsafe {
            attn_group_x86::wsum_group(isa == Isa::Avx512, w, n_q, v, kv_stride, n_pos, out)
        };
        if done {
            return;
        }
    }
    for h in 0..n_q {
        let wh = &w[h * n_pos..(h + 1) * n_pos];
        attn_weighted_sum_f16(isa, wh, v, kv_stride, n_pos, &mut out[h * d..(h + 1) * d]);
    }
}

fn check_attn_q8(what: &str, d: usize, cache_len: usize, kv_stride: usize, n_pos: usize) {
    assert!(
        d.is_multiple_of(QK8_0),
        "{what}: head dim {d} is not a whole number of Q8_0 blocks"
    );
    let rb = d / QK8_0 * Q8_0_BLOCK_BYTES;
    assert!(
        kv_stride >= rb,
        "{what}: kv_stride {kv_stride} bytes < head row {rb} bytes"
    );
    if n_pos > 0 {
        let need = (n_pos - 1)
            .checked_mul(kv_stride)
            .and_then(|v| v.checked_add(rb))
            .expect("cache size overflows");
        assert!(
            cache_len >= need,
            "{what}: {n_pos} positions of stride {kv_stride} need {need} bytes, cache has {cache_len}"
        );
    }
}

/// [`attn_scores_f16`] over an 8-bit cache: position `p`'s head row is `q.len() / 32` Q8_0
/// blocks (as [`quantize_row_q8_0`] writes them) at byte `p * kv_stride`.
///
/// # Panics
/// If `q.len()` is not a multiple of 32, `out.len() != n_pos`, the stride is shorter than a
/// head row or `k` is too short.
pub fn attn_scores_q8_0(
    isa: Isa,
    q: &[f32],
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    assert_eq!(
        out.len(),
        n_pos,
        "attn_scores_q8_0: out must have n_pos scores"
    );
    check_attn_q8("attn_scores_q8_0", q.len(), k.len(), kv_stride, n_pos);
    dispatch!(isa, attn_scores_q8_0(q, k, kv_stride, n_pos, scale, out))
}

/// [`attn_weighted_sum_f16`] over an 8-bit cache laid out as in [`attn_scores_q8_0`]
/// (`kv_stride` in bytes, `out.len()` a multiple of 32).
pub fn attn_weighted_sum_q8_0(
    isa: Isa,
    w: &[f32],
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    assert_eq!(
        w.len(),
        n_pos,
        "attn_weighted_sum_q8_0: w must have n_pos weights"
    );
    check_attn_q8(
        "attn_weighted_sum_q8_0",
        out.len(),
        v.len(),
        kv_stride,
        n_pos,
    );
    dispatch!(isa, attn_weighted_sum_q8_0(w, v, kv_stride, n_pos, out))
}

/// Rotary position embedding tables: `cos`/`sin` of `pos * theta^(-2i/rope_dim)` for every
/// position below `max_pos` and `i < rope_dim/2`, angles computed in f64, stored in f32.
#[derive(Clone, Debug)]
pub struct RopeTable {
    rope_dim: usize,
    max_pos: usize,
    theta: f32,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeTable {
    /// # Panics
    /// If `rope_dim` is odd or zero.
    pub fn new(rope_dim: usize, theta: f32, max_pos: usize) -> Self {
        assert!(
            rope_dim > 0 && rope_dim.is_multiple_of(2),
            "rope_dim must be even, got {rope_dim}"
        );
        let half = rope_dim / 2;
        let freqs: Vec<f64> = (0..half)
            .map(|i| f64::from(theta).powf(-((2 * i) as f64) / rope_dim as f64))
            .collect();
        let mut cos = Vec::with_capacity(max_pos * half);
        let mut sin = Vec::with_capacity(max_pos * half);
        for pos in 0..max_pos {
            for &f in &freqs {
                let a = pos as f64 * f;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        RopeTable {
            rope_dim,
            max_pos,
            theta,
            cos,
            sin,
        }
    }

    pub fn rope_dim(&self) -> usize {
        self.rope_dim
    }

    pub fn max_pos(&self) -> usize {
        self.max_pos
    }

    /// `(cos, sin)` of position `pos`, `rope_dim/2` each.
    pub fn row(&self, pos: usize) -> (&[f32], &[f32]) {
        let half = self.rope_dim / 2;
        (
            &self.cos[pos * half..(pos + 1) * half],
            &self.sin[pos * half..(pos + 1) * half],
        )
    }

    fn check(&self, x: &[f32], head_dim: usize, n_heads: usize, pos: usize) {
        assert!(
            pos < self.max_pos,
            "rope: position {pos} >= table size {}",
            self.max_pos
        );
        assert!(
            self.rope_dim <= head_dim,
            "rope: rope_dim {} > head_dim {head_dim}",
            self.rope_dim
        );
        assert_eq!(
            Some(x.len()),
            head_dim.checked_mul(n_heads),
            "rope: x must be n_heads x head_dim"
        );
    }

    /// NeoX / rotate-half RoPE on `n_heads` heads of `head_dim` at position `pos`: pairs
    /// `(i, i + rope_dim/2)`; dimensions past `rope_dim` are left alone.
    pub fn apply_neox(&self, isa: Isa, x: &mut [f32], head_dim: usize, n_heads: usize, pos: usize) {
        self.check(x, head_dim, n_heads, pos);
        let (c, s) = self.row(pos);
        dispatch!(isa, rope_neox(x, head_dim, n_heads, self.rope_dim, c, s))
    }

    /// `(cos, sin)` of a rotation by `delta` positions (negative: back), angles in f64:
    /// RoPE rotations compose, so a key rotated for position `p` and then by `delta` is the
    /// key rotated for `p + delta` (what moving cached keys needs).
    pub fn shift_row(&self, delta: i64) -> (Vec<f32>, Vec<f32>) {
        let half = self.rope_dim / 2;
        (0..half)
            .map(|i| {
                let f = f64::from(self.theta).powf(-((2 * i) as f64) / self.rope_dim as f64);
                let a = delta as f64 * f;
                (a.cos() as f32, a.sin() as f32)
            })
            .unzip()
    }

    /// [`RopeTable::apply_neox`] with a given `(cos, sin)` row (from [`RopeTable::shift_row`]).
    pub fn apply_neox_row(
        &self,
        isa: Isa,
        x: &mut [f32],
        head_dim: usize,
        n_heads: usize,
        (c, s): (&[f32], &[f32]),
    ) {
        self.check(x, head_dim, n_heads, 0);
        assert!(
            c.len() == self.rope_dim / 2 && s.len() == c.len(),
            "rope: row size"
        );
        dispatch!(isa, rope_neox(x, head_dim, n_heads, self.rope_dim, c, s))
    }

    /// [`RopeTable::apply_normal`] with a given `(cos, sin)` row.
    pub fn apply_normal_row(
        &self,
        isa: Isa,
        x: &mut [f32],
        head_dim: usize,
        n_heads: usize,
        (c, s): (&[f32], &[f32]),
    ) {
        self.check(x, head_dim, n_heads, 0);
        assert!(
            c.len() == self.rope_dim / 2 && s.len() == c.len(),
            "rope: row size"
        );
        dispatch!(isa, rope_normal(x, head_dim, n_heads, self.rope_dim, c, s))
    }

    /// GPT-J / "normal" RoPE: adjacent pairs `(2i, 2i + 1)`.
    pub fn apply_normal(
        &self,
        isa: Isa,
        x: &mut [f32],
        head_dim: usize,
        n_heads: usize,
        pos: usize,
    ) {
        self.check(x, head_dim, n_heads, pos);
        let (c, s) = self.row(pos);
        dispatch!(isa, rope_normal(x, head_dim, n_heads, self.rope_dim, c, s))
    }
}
