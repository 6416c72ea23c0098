//! Reference scoring of integer-coded keys (Q8_0, Q8R, Q4_0; `crate::layout::kv` has the
//! layouts) against an int8 query: exact integer dots per block, then the two block scales.
//! The specification of the SIMD `kv_int8` kernels.

use crate::layout::half::f16_at;
use crate::layout::kv::{KvQuant, Q8R_SCALE_BYTES, QK_KV};
use crate::layout::rows::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES};

/// Largest magnitude, NaNs ignored (the query's block scale here, the row scales of the
/// encoders in `kv.rs`).
pub(super) fn absmax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
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
