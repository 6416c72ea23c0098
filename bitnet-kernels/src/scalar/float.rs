//! Reference dense float kernels: the specification the AVX2 and AVX-512 versions in
//! `x86_64/*/float.rs` are tested against, and the portable fallback. The other float
//! families have their own files, as in the SIMD trees: `qrows.rs` (the Q8_0 block reader;
//! [`matmul_f32`] walks quantized rows itself), `q8q8.rs`, `rope.rs`, `attn.rs`, `attn_group.rs`.
//!
//! The slice conversions here use the exact f16 conversions of `crate::float` (which match
//! the hardware, F16C, bit for bit), through a table of every f16 value. Reductions
//! (dots, norms, softmax sums) are written plainly; SIMD versions may sum in another order
//! and are held to the error budgets named in [`crate::float`]. Shapes are checked by the
//! safe API in `crate::float` before any kernel runs; these functions index with bounds
//! checks, so a shape error here is a panic, never a bad read.

use std::ops::Range;
use std::sync::OnceLock;

use crate::layout::half::{bf16_to_f32, f16_to_f32, f32_to_f16};
use crate::layout::rows::RowFormat;
use crate::shared::rows::matmul_by_chunks;

// ---------------------------------------------------------------------------------------
// Conversions
// ---------------------------------------------------------------------------------------

/// Every f16 value as f32, built once: the scalar kernels' fast path for f16 rows.
pub(super) fn f16_table() -> &'static [f32] {
    static TABLE: OnceLock<Box<[f32]>> = OnceLock::new();
    TABLE.get_or_init(|| (0..=u16::MAX).map(f16_to_f32).collect())
}

pub fn f16_to_f32_slice(src: &[u16], dst: &mut [f32]) {
    let t = f16_table();
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = t[usize::from(s)];
    }
}

pub fn f32_to_f16_slice(src: &[f32], dst: &mut [u16]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f32_to_f16(s);
    }
}

// ---------------------------------------------------------------------------------------
// Dots and matrix-vector products
// ---------------------------------------------------------------------------------------

/// Lanes of the scalar reductions: eight independent partial sums, added at the end.
const LANES: usize = 8;

#[inline]
pub(super) fn dot_by<F: Fn(usize) -> f32>(n: usize, b: &[f32], a: F) -> f32 {
    let mut acc = [0.0f32; LANES];
    let whole = n - n % LANES;
    for i in (0..whole).step_by(LANES) {
        for (l, s) in acc.iter_mut().enumerate() {
            *s += a(i + l) * b[i + l];
        }
    }
    for i in whole..n {
        acc[i % LANES] += a(i) * b[i];
    }
    acc.iter().sum()
}

pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    dot_by(n, b, |i| a[i])
}

/// Dot of one stored row (plain float formats only) with `x`.
fn dot_row(fmt: RowFormat, row: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    match fmt {
        RowFormat::F32 => dot_by(n, x, |i| {
            f32::from_le_bytes([row[4 * i], row[4 * i + 1], row[4 * i + 2], row[4 * i + 3]])
        }),
        RowFormat::F16 => {
            let t = f16_table();
            dot_by(n, x, |i| {
                t[usize::from(u16::from_le_bytes([row[2 * i], row[2 * i + 1]]))]
            })
        }
        RowFormat::BF16 => dot_by(n, x, |i| {
            bf16_to_f32(u16::from_le_bytes([row[2 * i], row[2 * i + 1]]))
        }),
        _ => unreachable!("dot_row is for plain float rows"),
    }
}

/// `out[t * rows.len() + i] = dot(row rows.start + i, x[t])` for rows stored in `fmt`.
pub fn matmul_f32(
    fmt: RowFormat,
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    match fmt {
        RowFormat::F32 | RowFormat::F16 | RowFormat::BF16 => {
            let rb = fmt.row_bytes(row_len).expect("checked by the caller");
            let nr = rows.len();
            for (i, r) in rows.enumerate() {
                let row = &data[r * rb..(r + 1) * rb];
                for t in 0..n_tok {
                    out[t * nr + i] = dot_row(fmt, row, &x[t * row_len..(t + 1) * row_len]);
                }
            }
        }
        // Block-quantized rows: the reference decoders a chunk at a time, dotted with
        // [`dot_f32`] (the walk the SIMD sets also take for Q4_0).
        _ => matmul_by_chunks(fmt, data, row_len, x, n_tok, rows, out, &dot_f32),
    }
}

// ---------------------------------------------------------------------------------------
// Norms, softmax, activations, element-wise
// ---------------------------------------------------------------------------------------

/// `out = x / sqrt(mean(x²) + eps) * weight`; the sum of squares is taken in f64.
pub fn rmsnorm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let ss: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let mean = (ss / x.len().max(1) as f64) as f32;
    let inv = 1.0 / (mean + eps).sqrt();
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(weight) {
        *o = v * inv * g;
    }
}

/// `x = exp(x - max) / sum`, returning `(max, sum)`. The caller guarantees at least one
/// finite element.
pub fn softmax_inplace(x: &mut [f32]) -> (f32, f32) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sum = 0.0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += f64::from(*v);
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
    (max, sum as f32)
}

#[inline]
pub fn silu_one(v: f32) -> f32 {
    v / (1.0 + (-v).exp())
}

#[inline]
pub fn relu2_one(v: f32) -> f32 {
    let r = v.max(0.0);
    r * r
}

pub fn silu(x: &mut [f32]) {
    for v in x {
        *v = silu_one(*v);
    }
}

pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = silu_one(*g) * u;
    }
}

/// `0.5 v (1 + tanh(z))`, `z = sqrt(2/pi) (v + 0.044715 v^3)` (ggml's `gelu`, through an f16
/// table on its CPU path), computed as the equal `v / (1 + exp(-2z))`: `1 + tanh(z)` loses
/// every digit to cancellation for negative `v`, the exponential none.
#[inline]
pub fn gelu_tanh_one(v: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let minus_2z = -2.0 * SQRT_2_OVER_PI * v * (1.0 + 0.044_715 * v * v);
    v / (1.0 + minus_2z.exp())
}

pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = gelu_tanh_one(*g) * u;
    }
}

pub fn relu2(x: &mut [f32]) {
    for v in x {
        *v = relu2_one(*v);
    }
}

pub fn relu2_mul(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = relu2_one(*g) * u;
    }
}

pub fn add_inplace(dst: &mut [f32], src: &[f32]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}

pub fn mul_inplace(dst: &mut [f32], src: &[f32]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d *= s;
    }
}

pub fn scale_inplace(x: &mut [f32], s: f32) {
    for v in x {
        *v *= s;
    }
}
