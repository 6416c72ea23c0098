//! Reference kernels of the low-bit KV formats (`crate::float::kv` has the layouts): the
//! encoders, the decoders, and attention scores and weighted sums written plainly. This is
//! the specification the AVX2 kernels are tested against.
//!
//! Every format reads as blocks of 32 values: a scale `s_b` (the block's f16; Q8R's row f32
//! for every block of the row) times 32 small exact values (`i8`, E4M3, nibble - 8, ±1). The
//! decoded value is the one product `s_b * vals_b[j]`, and the kernels work on decoded
//! values: a score is `scale * dot(q, decoded row)`, a weighted sum adds `w * decoded[j]` to
//! `out[j]`, position after position. (Scaling the values once, rather than each head's
//! partial sums, lets the SIMD kernels share that work across a GQA group.)

use crate::float::formats::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES};
use crate::float::kv::{
    B1_BLOCK_BYTES, E4M3_MAX, FP8_BLOCK_BYTES, KvQuant, Q8R_SCALE_BYTES, QK_KV,
};
use crate::scalar::float::{f16_to_f32, f32_to_f16};

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

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// An f16 scale for `v >= 0`, saturating at f16's largest value.
fn f16_scale(v: f32) -> u16 {
    f32_to_f16(v.min(F16_MAX))
}

/// Largest magnitude, NaNs ignored.
fn absmax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
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
/// through [`attn_weighted_sum_q4_0`].
pub fn attn_weighted_sum(
    fmt: KvQuant,
    w: &[f32],
    n_q: usize,
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    if fmt == KvQuant::Q4_0 {
        return attn_weighted_sum_q4_0(w, n_q, v, kv_stride, n_pos, out);
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
}

/// Positions per tile of [`attn_weighted_sum_q4_0`]: a call's positions are taken 16 at a
/// time from its first, so calls that start at multiples of 16 (the engine's KV blocks of 16
/// tokens or more) tile a sequence alike however its blocks are grouped into calls.
pub const Q4_0_WSUM_TILE: usize = 16;

/// Largest magnitude of a Q4_0 weighted sum's integer weight: two products of a nibble
/// (<= 15) and a weight fit a signed 16-bit lane (`vpmaddubsw`), and so do 16 of them.
pub const Q4_0_WSUM_WEIGHT_MAX: f32 = 127.0;

/// Q4_0 values weighted with integer weights: per head `h`, block `b` and tile `t` of
/// [`Q4_0_WSUM_TILE`] positions, the products `c_p = w[h][p] * s_p,b` are rounded (ties to
/// even) to integers `k_p = round(c_p * (127 / m))`, `m = max_p |c_p|`, and
/// `out[h][32 b + j] += (m / 127) * Σ_p k_p (n_p,j - 8)` (one fused multiply-add; the sum is
/// exact). Against the float weighted sum this rounds each weight by at most `m / 254`: the
/// budget `tests/kv_formats.rs` names. What it buys: the nibbles are multiplied as bytes,
/// two positions per `vpmaddubsw`, instead of each being turned into a float. A tile whose
/// `m` is 0 (or under 4e-37) adds nothing; one with a weight that is not finite adds NaN.
pub fn attn_weighted_sum_q4_0(
    w: &[f32],
    n_q: usize,
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let d = out.len() / n_q;
    let rb = KvQuant::Q4_0.row_bytes(d).expect("checked by the safe API");
    for t0 in (0..n_pos).step_by(Q4_0_WSUM_TILE) {
        let n = Q4_0_WSUM_TILE.min(n_pos - t0);
        let row = |p: usize| &v[(t0 + p) * kv_stride..][..rb];
        for h in 0..n_q {
            for (b, ob) in out[h * d..][..d].chunks_exact_mut(QK_KV).enumerate() {
                // Each position's block scale and integers `n - 8`.
                let blocks: Vec<(f32, [i8; QK_KV])> = (0..n)
                    .map(|p| block_ints(KvQuant::Q4_0, row(p), b))
                    .collect();
                let c: Vec<f32> = (0..n)
                    .map(|p| w[h * n_pos + t0 + p] * blocks[p].0)
                    .collect();
                let Some((step, k)) = q4_0_wsum_weights(&c) else {
                    continue;
                };
                for (j, o) in ob.iter_mut().enumerate() {
                    let sum: i32 = (0..n).map(|p| k[p] * i32::from(blocks[p].1[j])).sum();
                    *o = step.mul_add(sum as f32, *o);
                }
            }
        }
    }
}

/// The integer weights of one tile of [`attn_weighted_sum_q4_0`] and the step they count
/// in; `None` when the tile adds nothing. A weight that is not finite gives a NaN step (it
/// must not vanish from the sum).
pub fn q4_0_wsum_weights(c: &[f32]) -> Option<(f32, Vec<i32>)> {
    if c.iter().any(|x| !x.is_finite()) {
        return Some((f32::NAN, vec![0; c.len()]));
    }
    let (step, inv) = q4_0_wsum_step(c.iter().fold(0.0f32, |m, x| m.max(x.abs())))?;
    let k = c
        .iter()
        .map(|&x| (x * inv).round_ties_even() as i32)
        .collect();
    Some((step, k))
}

/// For a tile's largest weight magnitude `m`: the step `m / 127` and the factor `127 / m`
/// that rounds weights to steps, or `None` (the tile adds nothing) when `m` is 0 or so small
/// that `127 / m` overflows (below 4e-37: contributions far under any f32 output's ulp).
#[inline]
pub fn q4_0_wsum_step(m: f32) -> Option<(f32, f32)> {
    let inv = Q4_0_WSUM_WEIGHT_MAX / m;
    inv.is_finite().then(|| (m / Q4_0_WSUM_WEIGHT_MAX, inv))
}

/// The 1-bit query of the XNOR/popcount scoring of B1 keys: per 32 values, sign bits (bit j
/// set when `q[j] >= 0`, the keys' convention; NaN reads as negative) and the mean
/// magnitude (NaN skipped), the scale that minimises the block's squared error.
pub fn b1_sign_query(q: &[f32], bits: &mut [u32], scales: &mut [f32]) {
    for ((qb, w), s) in q.chunks_exact(QK_KV).zip(bits).zip(scales) {
        *w = qb
            .iter()
            .enumerate()
            .fold(0u32, |acc, (j, &v)| acc | (u32::from(v >= 0.0) << j));
        let sum: f32 = qb.iter().filter(|v| !v.is_nan()).map(|v| v.abs()).sum();
        *s = sum / QK_KV as f32;
    }
}

/// One B1 key row against one sign-quantized query head, before the attention scale:
/// `Σ_b fma(((32 - 2 popcount(q_b ^ k_b)) * s_k,b), s_q,b, acc)` in block order (the count
/// of agreeing signs minus the disagreeing ones is `2 popcount(!(q ^ k)) - 32`).
#[inline]
pub fn b1_xnor_row(qbits: &[u32], qscales: &[f32], row: &[u8]) -> f32 {
    let mut acc = 0.0f32;
    for (b, (&qw, &qs)) in qbits.iter().zip(qscales).enumerate() {
        let blk = &row[B1_BLOCK_BYTES * b..][..B1_BLOCK_BYTES];
        let kw = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
        let agree = 32 - 2 * (qw ^ kw).count_ones() as i32;
        let t = agree as f32 * f16_at(blk, 0);
        acc = t.mul_add(qs, acc);
    }
    acc
}

/// `out[h * n_pos + p] = scale * b1_xnor_row(q_h, k_p)` for the `n_q` heads of `qbits` /
/// `qscales` (`[n_q][d / 32]` each).
#[allow(clippy::too_many_arguments)]
pub fn attn_scores_b1_xnor(
    qbits: &[u32],
    qscales: &[f32],
    n_q: usize,
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let nb = qbits.len() / n_q;
    let rb = nb * B1_BLOCK_BYTES;
    for h in 0..n_q {
        let (qb, qs) = (&qbits[h * nb..][..nb], &qscales[h * nb..][..nb]);
        for p in 0..n_pos {
            let row = &k[p * kv_stride..][..rb];
            out[h * n_pos + p] = scale * b1_xnor_row(qb, qs, row);
        }
    }
}

/// The int8 query of the integer scoring of Q8_0, Q8R and Q4_0 keys: per 32 values of `q`
/// a scale `d = absmax / 127` (in `scales`, as f32) and the codes `round(q / d)` (ggml's
/// `quantize_row_q8_0` rule, rounding half away from zero; a NaN value reads as 0).
pub fn int8_query(q: &[f32], codes: &mut [i8], scales: &mut [f32]) {
    for ((qb, cb), s) in q
        .chunks_exact(QK_KV)
        .zip(codes.chunks_exact_mut(QK_KV))
        .zip(scales)
    {
        let d = absmax(qb) / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        for (c, &v) in cb.iter_mut().zip(qb) {
            // `as` saturates and maps NaN to 0; |v * id| <= 127 up to rounding.
            *c = (v * id).round() as i8;
        }
        *s = d;
    }
}

/// Block `b` of an integer-coded row (Q8_0, Q8R, Q4_0): its scale and its 32 integer
/// values (`i8`, or nibble - 8).
#[inline]
pub fn block_ints(fmt: KvQuant, row: &[u8], b: usize) -> (f32, [i8; QK_KV]) {
    let mut v = [0i8; QK_KV];
    match fmt {
        KvQuant::Q8_0 => {
            let blk = &row[Q8_0_BLOCK_BYTES * b..][..Q8_0_BLOCK_BYTES];
            for (o, &q) in v.iter_mut().zip(&blk[2..]) {
                *o = q as i8;
            }
            (f16_at(blk, 0), v)
        }
        KvQuant::Q8R => {
            let qs = &row[Q8R_SCALE_BYTES + QK_KV * b..][..QK_KV];
            for (o, &q) in v.iter_mut().zip(qs) {
                *o = q as i8;
            }
            (f32::from_le_bytes([row[0], row[1], row[2], row[3]]), v)
        }
        KvQuant::Q4_0 => {
            let blk = &row[Q4_0_BLOCK_BYTES * b..][..Q4_0_BLOCK_BYTES];
            for (j, &q) in blk[2..].iter().enumerate() {
                v[j] = (q & 0x0f) as i8 - 8;
                v[j + QK_KV / 2] = (q >> 4) as i8 - 8;
            }
            (f16_at(blk, 0), v)
        }
        KvQuant::Fp8 | KvQuant::B1 => unreachable!("{fmt:?} rows hold no integer codes"),
    }
}

/// One integer-coded key row against one int8 query head, before the attention scale:
/// `Σ_b (s_k,b * s_q,b) * (exact integer dot of block b)`, in block order.
#[inline]
pub fn int8_query_row(fmt: KvQuant, codes: &[i8], scales: &[f32], row: &[u8]) -> f32 {
    let mut acc = 0.0f32;
    for (b, (cb, &qs)) in codes.chunks_exact(QK_KV).zip(scales).enumerate() {
        let (ks, kv) = block_ints(fmt, row, b);
        let dot: i32 = cb
            .iter()
            .zip(kv)
            .map(|(&a, b)| i32::from(a) * i32::from(b))
            .sum();
        acc += (ks * qs) * dot as f32;
    }
    acc
}

/// `out[h * n_pos + p] = scale * int8_query_row(q_h, k_p)` for the `n_q` heads of `codes` /
/// `scales` (`[n_q][d]` and `[n_q][d / 32]`).
#[allow(clippy::too_many_arguments)]
pub fn attn_scores_int8_query(
    fmt: KvQuant,
    codes: &[i8],
    scales: &[f32],
    n_q: usize,
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let d = codes.len() / n_q;
    let nb = d / QK_KV;
    let rb = fmt.row_bytes(d).expect("checked by the safe API");
    for h in 0..n_q {
        let (qc, qs) = (&codes[h * d..][..d], &scales[h * nb..][..nb]);
        for p in 0..n_pos {
            let row = &k[p * kv_stride..][..rb];
            out[h * n_pos + p] = scale * int8_query_row(fmt, qc, qs, row);
        }
    }
}
