//! Reference dense float kernels: the specification the AVX2 and AVX-512 versions in
//! `x86_64/*/float.rs` (and `qrows.rs` for quantized rows) are tested against, and the
//! portable fallback. The other float families have their own files, as in the SIMD trees:
//! `q8q8.rs`, `rope.rs`, `attn.rs`.
//!
//! Conversions here are exact and must match the hardware (F16C) bit for bit. Reductions
//! (dots, norms, softmax sums) are written plainly; SIMD versions may sum in another order
//! and are held to the error budgets named in [`crate::float`]. Shapes are checked by the
//! safe API in `crate::float` before any kernel runs; these functions index with bounds
//! checks, so a shape error here is a panic, never a bad read.

use std::ops::Range;
use std::sync::OnceLock;

use crate::float::formats::{Q8_0_BLOCK_BYTES, QK_K, RowFormat, dequantize_row};

// ---------------------------------------------------------------------------------------
// Conversions
// ---------------------------------------------------------------------------------------

/// IEEE binary16 -> binary32, exact. A NaN keeps its sign and payload and comes out quiet
/// (as `vcvtph2ps` does).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x03ff);
    let bits = match exp {
        0 if man == 0 => sign,
        0 => {
            // Subnormal: value = man * 2^-24; normalise the leading one into the implicit bit.
            let shift = man.leading_zeros() - 21; // 1..=10
            let e = 127 - 15 + 1 - shift;
            sign | (e << 23) | ((man << shift) & 0x03ff) << 13
        }
        0x1f if man == 0 => sign | 0x7f80_0000,
        0x1f => sign | 0x7fc0_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// IEEE binary32 -> binary16, round to nearest, ties to even; overflow gives infinity,
/// tiny values give signed zero or a subnormal; a NaN keeps its sign and top payload bits
/// and comes out quiet (as `vcvtps2ph` does).
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let abs = bits & 0x7fff_ffff;
    if abs >= 0x7f80_0000 {
        return if abs > 0x7f80_0000 {
            sign | 0x7e00 | ((abs >> 13) & 0x03ff) as u16
        } else {
            sign | 0x7c00
        };
    }
    if abs >= 0x477f_f000 {
        // >= 65520, halfway between 65504 (odd mantissa) and 2^16: rounds to infinity.
        return sign | 0x7c00;
    }
    if abs >= 0x3880_0000 {
        // Normal in f16 (>= 2^-14).
        let h = ((abs >> 13) - ((127 - 15) << 10)) as u16;
        let rest = abs & 0x1fff;
        let up = rest > 0x1000 || (rest == 0x1000 && h & 1 == 1);
        return sign | (h + u16::from(up)); // a carry rolls into the exponent, as it should
    }
    if abs <= 0x3300_0000 {
        // <= 2^-25, at most half the smallest subnormal: ties to even give zero.
        return sign;
    }
    // Subnormal in f16: units of 2^-24.
    let e = abs >> 23; // 102..=112
    let man = (abs & 0x007f_ffff) | 0x0080_0000;
    let shift = 126 - e; // 14..=24
    let h = man >> shift;
    let rest = man & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    let up = rest > half || (rest == half && h & 1 == 1);
    sign | (h + u32::from(up)) as u16
}

/// bfloat16 -> f32, exact.
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// f32 -> bfloat16, round to nearest, ties to even; a NaN stays a (quiet) NaN.
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x0040) as u16;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

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
        _ => matmul_by_chunks(fmt, data, row_len, x, n_tok, rows, out, &dot_f32),
    }
}

/// Elements dequantized at a time by [`matmul_by_chunks`]: a whole number of blocks of
/// every format, small enough for the stack and L1.
pub const DEQUANT_CHUNK: usize = QK_K;

/// The block-quantized path of `matmul_f32`, shared by every ISA: each row is dequantized
/// 256 elements at a time into a stack buffer and dotted with every token (`dot` is the
/// ISA's own f32 dot), so the row is decoded once per call, whatever `n_tok` is.
#[allow(clippy::too_many_arguments)]
pub fn matmul_by_chunks(
    fmt: RowFormat,
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
    dot: &dyn Fn(&[f32], &[f32]) -> f32,
) {
    let rb = fmt.row_bytes(row_len).expect("checked by the caller");
    let nr = rows.len();
    let mut buf = [0.0f32; DEQUANT_CHUNK];
    for (i, r) in rows.enumerate() {
        let row = &data[r * rb..(r + 1) * rb];
        for t in 0..n_tok {
            out[t * nr + i] = 0.0;
        }
        let mut start = 0;
        while start < row_len {
            let len = DEQUANT_CHUNK.min(row_len - start);
            let b0 = fmt.row_bytes(start).expect("whole blocks");
            let b1 = fmt.row_bytes(start + len).expect("whole blocks");
            dequantize_row(fmt, &row[b0..b1], &mut buf[..len]);
            for t in 0..n_tok {
                let xt = &x[t * row_len + start..t * row_len + start + len];
                out[t * nr + i] += dot(&buf[..len], xt);
            }
            start += len;
        }
    }
}

/// The f16 scale of a Q8_0 block and its 32 quants.
#[inline]
pub fn q8_0_block(b: &[u8]) -> (f32, &[u8]) {
    (
        f16_to_f32(u16::from_le_bytes([b[0], b[1]])),
        &b[2..Q8_0_BLOCK_BYTES],
    )
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
