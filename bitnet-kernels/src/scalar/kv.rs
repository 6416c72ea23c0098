//! Reference kernels of the low-bit KV formats (`crate::layout::kv` has the layouts): the
//! encoders, the decoders, and attention scores and weighted sums written plainly. This is
//! the specification the AVX2 kernels are tested against.
//!
//! Every format reads as blocks of 32 values: a scale `s_b` (the block's f16; Q8R's row f32
//! for every block of the row) times 32 small exact values (`i8`, E4M3, nibble - 8, ±1). The
//! decoded value is the one product `s_b * vals_b[j]`, and the kernels work on decoded
//! values: a score is `scale * dot(q, decoded row)`, a weighted sum adds `w * decoded[j]` to
//! `out[j]`, position after position. (Scaling the values once, rather than each head's
//! partial sums, lets the SIMD kernels share that work across a GQA group.)
//!
//! The other KV kernels have their own files, as in the SIMD trees: `kv_int8.rs` (integer
//! keys against an int8 query), `kv_q4_wsum.rs` (Q4_0's integer-weighted sum) and
//! `kv_b1_xnor.rs` (B1 keys against a sign query); their items are re-exported here.

use crate::layout::half::{f16_at, f16_to_f32, f32_to_f16};
use crate::layout::kv::{
    B1_BLOCK_BYTES, E4M3_MAX, FP8_BLOCK_BYTES, KvQuant, Q8R_SCALE_BYTES, QK_KV,
};
use crate::layout::rows::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES};

pub use super::kv_b1_xnor::{attn_scores_b1_xnor, b1_sign_query};
use super::kv_int8::absmax;
pub use super::kv_int8::{attn_scores_int8_query, block_ints, int8_query, int8_query_row};
pub use super::kv_q4_wsum::{attn_weighted_sum_q4_0, q4_0_wsum_weights};
// The tile and weight bound of Q4_0's integer-weighted sum are format definitions, kept in
// `crate::layout::kv` (the SIMD kernels use them too); re-exported here, beside the reference.
pub use crate::layout::kv::{Q4_0_WSUM_TILE, Q4_0_WSUM_WEIGHT_MAX};

/// f16's largest finite value: the block scales saturate here.
const F16_MAX: f32 = 65504.0;

/// `x` as the nearest OCP E4M3 code, ties to even, saturating at ±448 (never a NaN code);
/// NaN gives 0. Subnormals are the multiples of 2^-9 below 2^-6.
pub fn f32_to_e4m3(x: f32) -> u8 {
    if x.is_nan() {
        return 0;
    }
    let sign = ((x.to_bits() >> 24) & 0x80) as u8;
    let a = x.abs();
    if a >= E4M3_MAX {
        return sign | 0x7e;
    }
    if a < 1.0 / 64.0 {
        // Exact: a scaling by a power of two. 8 becomes the smallest normal's code.
        return sign | (a * 512.0).round_ties_even() as u8;
    }
    let e = ((a.to_bits() >> 23) as i32) - 127; // -6..=8
    let pow = f32::from_bits(((e + 127) as u32) << 23);
    // (a / 2^e - 1) * 8 is exact; a mantissa that rounds up to 8 carries into the exponent.
    let m = ((a / pow - 1.0) * 8.0).round_ties_even() as u32;
    let code = (((e + 7) as u32) << 3) + m;
    sign | code.min(0x7e) as u8
}

/// The value of an E4M3 code: its bits placed in an f32's sign, exponent and top mantissa
/// bits, scaled by 2^(127 - 7) (exact; subnormal codes come out right through f32
/// subnormals). The NaN codes are not special-cased (the encoder never writes them).
pub fn e4m3_to_f32(c: u8) -> f32 {
    let c = u32::from(c);
    f32::from_bits(((c & 0x80) << 24) | ((c & 0x7f) << 20)) * f32::from_bits((127 + 120) << 23)
}

/// An f16 scale for `v >= 0`, saturating at f16's largest value.
fn f16_scale(v: f32) -> u16 {
    f32_to_f16(v.min(F16_MAX))
}

/// Largest magnitude a Q8R row scale covers: past it the codes saturate, so that `127 * s`
/// (the largest decoded value) stays finite.
const Q8R_AMAX_LIMIT: f32 = f32::MAX / 2.0;

/// Encodes one row of `x.len()` values (a multiple of 32) into `row`.
pub fn quantize_row(fmt: KvQuant, x: &[f32], row: &mut [u8]) {
    match fmt {
        KvQuant::Q8_0 => {
            // ggml's quantize_row_q8_0 (round half away from zero), with the scale
            // saturating at f16's largest value instead of becoming infinite.
            for (xb, b) in x
                .chunks_exact(QK_KV)
                .zip(row.chunks_exact_mut(Q8_0_BLOCK_BYTES))
            {
                let d = absmax(xb).min(F16_MAX * 127.0) / 127.0;
                let id = if d > 0.0 { 1.0 / d } else { 0.0 };
                b[..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
                for (q, &v) in b[2..].iter_mut().zip(xb) {
                    *q = ((v * id).round() as i32).clamp(-127, 127) as i8 as u8;
                }
            }
        }
        KvQuant::Q4_0 => {
            // ggml's quantize_row_q4_0 (the value of largest magnitude, sign kept, maps to
            // nibble 0), with the scale saturating at f16's largest value and NaN stored as 0.
            for (xb, b) in x
                .chunks_exact(QK_KV)
                .zip(row.chunks_exact_mut(Q4_0_BLOCK_BYTES))
            {
                let m = xb
                    .iter()
                    .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
                let d = m.clamp(-F16_MAX * 8.0, F16_MAX * 8.0) / -8.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                b[..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
                let q = |v: f32| {
                    if v.is_nan() {
                        8
                    } else {
                        ((v * id + 8.5) as i32).clamp(0, 15) as u8
                    }
                };
                for j in 0..QK_KV / 2 {
                    b[2 + j] = q(xb[j]) | (q(xb[j + QK_KV / 2]) << 4);
                }
            }
        }
        KvQuant::Q8R => {
            let s = absmax(x).min(Q8R_AMAX_LIMIT) / 127.0;
            let id = if s > 0.0 { 1.0 / s } else { 0.0 };
            row[..Q8R_SCALE_BYTES].copy_from_slice(&s.to_le_bytes());
            for (q, &v) in row[Q8R_SCALE_BYTES..].iter_mut().zip(x) {
                // `as` maps NaN to 0 and saturates; the clamp keeps -128 out.
                *q = ((v * id).round() as i32).clamp(-127, 127) as i8 as u8;
            }
        }
        KvQuant::Fp8 => {
            for (xb, b) in x
                .chunks_exact(QK_KV)
                .zip(row.chunks_exact_mut(FP8_BLOCK_BYTES))
            {
                let h = f16_scale(absmax(xb) / E4M3_MAX);
                let d = f16_to_f32(h);
                b[..2].copy_from_slice(&h.to_le_bytes());
                for (c, &v) in b[2..].iter_mut().zip(xb) {
                    *c = if d > 0.0 { f32_to_e4m3(v / d) } else { 0 };
                }
            }
        }
        KvQuant::B1 => {
            for (xb, b) in x
                .chunks_exact(QK_KV)
                .zip(row.chunks_exact_mut(B1_BLOCK_BYTES))
            {
                let sum: f32 = xb.iter().filter(|v| !v.is_nan()).map(|v| v.abs()).sum();
                let h = f16_scale(sum / QK_KV as f32);
                let bits = xb
                    .iter()
                    .enumerate()
                    .fold(0u32, |acc, (j, &v)| acc | (u32::from(v >= 0.0) << j));
                b[..2].copy_from_slice(&h.to_le_bytes());
                b[2..].copy_from_slice(&bits.to_le_bytes());
            }
        }
    }
}

/// Block `b` of `row`: its scale `s_b` (Q8R: the row's) and its 32 exact values.
#[inline]
pub fn block_values(fmt: KvQuant, row: &[u8], b: usize) -> (f32, [f32; QK_KV]) {
    let mut v = [0.0f32; QK_KV];
    match fmt {
        KvQuant::Q8_0 | KvQuant::Q8R | KvQuant::Q4_0 => {
            let (s, ints) = block_ints(fmt, row, b);
            (s, ints.map(f32::from))
        }
        KvQuant::Fp8 => {
            let blk = &row[FP8_BLOCK_BYTES * b..][..FP8_BLOCK_BYTES];
            for (o, &c) in v.iter_mut().zip(&blk[2..]) {
                *o = e4m3_to_f32(c);
            }
            (f16_at(blk, 0), v)
        }
        KvQuant::B1 => {
            let blk = &row[B1_BLOCK_BYTES * b..][..B1_BLOCK_BYTES];
            let bits = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
            for (j, o) in v.iter_mut().enumerate() {
                *o = if (bits >> j) & 1 == 1 { 1.0 } else { -1.0 };
            }
            (f16_at(blk, 0), v)
        }
    }
}

/// Block `b` of `row` decoded: `s_b * vals_b[j]`.
#[inline]
pub fn decoded_block(fmt: KvQuant, row: &[u8], b: usize) -> [f32; QK_KV] {
    let (s, v) = block_values(fmt, row, b);
    v.map(|x| s * x)
}

/// Decodes one row into `dst` (`dst.len()` values).
pub fn dequantize_row(fmt: KvQuant, row: &[u8], dst: &mut [f32]) {
    for (b, ob) in dst.chunks_exact_mut(QK_KV).enumerate() {
        ob.copy_from_slice(&decoded_block(fmt, row, b));
    }
}

/// Eight partial sums, as the float reference dots keep them.
fn dot32(q: &[f32], v: &[f32; QK_KV]) -> f32 {
    let mut acc = [0.0f32; 8];
    for (i, (&a, &b)) in q.iter().zip(v).enumerate() {
        acc[i % 8] += a * b;
    }
    acc.iter().sum()
}

/// `out[h * n_pos + p] = scale * dot(q_h, decoded row p)`.
#[allow(clippy::too_many_arguments)]
pub fn attn_scores(
    fmt: KvQuant,
    q: &[f32],
    n_q: usize,
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let d = q.len() / n_q;
    let rb = fmt.row_bytes(d).expect("checked by the safe API");
    for h in 0..n_q {
        let qh = &q[h * d..][..d];
        for p in 0..n_pos {
            let row = &k[p * kv_stride..][..rb];
            let sum: f32 = qh
                .chunks_exact(QK_KV)
                .enumerate()
                .map(|(b, qb)| dot32(qb, &decoded_block(fmt, row, b)))
                .sum();
            out[h * n_pos + p] = scale * sum;
        }
    }
}

/// `out[h][j] += w[h][p] * (decoded row p)[j]`, position after position; Q4_0 values
/// through [`attn_weighted_sum_q4_0`]. Always `true`: the reference takes every input (the
/// SIMD kernels of this op may decline one, see `crate::ops::Kernels`).
pub fn attn_weighted_sum(
    fmt: KvQuant,
    w: &[f32],
    n_q: usize,
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) -> bool {
    if fmt == KvQuant::Q4_0 {
        attn_weighted_sum_q4_0(w, n_q, v, kv_stride, n_pos, out);
        return true;
    }
    let d = out.len() / n_q;
    let rb = fmt.row_bytes(d).expect("checked by the safe API");
    for h in 0..n_q {
        let oh = &mut out[h * d..][..d];
        for p in 0..n_pos {
            let row = &v[p * kv_stride..][..rb];
            let wp = w[h * n_pos + p];
            for (b, ob) in oh.chunks_exact_mut(QK_KV).enumerate() {
                for (o, x) in ob.iter_mut().zip(decoded_block(fmt, row, b)) {
                    *o += wp * x;
                }
            }
        }
    }
    true
}
