//! The quantized KV cache formats (beside f16 and f32, which have their own kernels in
//! [`crate::float`]) as a safe API: the reference encoders and decoders, and the two
//! attention kernels every KV format needs: scores of a group of query heads against a run of
//! key rows, and the weighted sum of a run of value rows accumulated onto the output. The
//! byte layouts are described in [`crate::layout::kv`] and re-exported here.
//!
//! The scalar kernels (`crate::scalar::kv` and its siblings `kv_int8`, `kv_q4_wsum`,
//! `kv_b1_xnor`) are the specification; the SIMD kernels decode exactly the same values and
//! sum in another order, within the dot budget of [`crate::float`].
//!
//! Keys of the integer formats (Q8_0, Q8R, Q4_0) can also be scored against an int8 query
//! ([`int8_query`], [`attn_scores_kv_int8_query`]), as llama.cpp does on the CPU: exact
//! integer dots per block, then the two block scales. The engine does so by default.

use crate::dispatch::kernels;
use crate::isa::Isa;
use crate::layout::kv::{check, check_b1_xnor, check_int8_query, row_bytes_or_panic};
use crate::ops::{Kernels, Scalar};
use crate::scalar::kv as scalar;

pub use crate::layout::kv::{
    B1_BLOCK_BYTES, E4M3_MAX, FP8_BLOCK_BYTES, KvQuant, Q4_0_WSUM_TILE, Q4_0_WSUM_WEIGHT_MAX,
    Q8R_SCALE_BYTES, QK_KV,
};

/// Encodes rows of `d` values: `src` is `[n][d]`, `dst` the `n` encoded rows back to back.
/// Finite input never gives a NaN or infinity back: scales saturate at f16's largest value
/// (FP8, B1; Q4_0 is ggml's encoder and holds magnitudes up to about 5e5), codes at the
/// format's range. A NaN in `src` is stored as 0.
///
/// # Panics
/// If `d` is not a positive multiple of 32, `src.len()` not a multiple of `d`, or `dst` not
/// the size of those rows.
pub fn kv_quantize(fmt: KvQuant, d: usize, src: &[f32], dst: &mut [u8]) {
    let rb = row_bytes_or_panic("kv_quantize", fmt, d);
    assert!(
        src.len().is_multiple_of(d),
        "kv_quantize: {} values are not rows of {d}",
        src.len()
    );
    assert_eq!(
        Some(dst.len()),
        (src.len() / d).checked_mul(rb),
        "kv_quantize: dst must hold the encoded rows"
    );
    for (x, row) in src.chunks_exact(d).zip(dst.chunks_exact_mut(rb)) {
        scalar::quantize_row(fmt, x, row);
    }
}

/// Decodes one row (`dst.len()` values) exactly as the attention kernels read it.
///
/// # Panics
/// If `dst.len()` is not a positive multiple of 32 or `src` is not one such row.
pub fn kv_dequantize(fmt: KvQuant, src: &[u8], dst: &mut [f32]) {
    let rb = row_bytes_or_panic("kv_dequantize", fmt, dst.len());
    assert_eq!(src.len(), rb, "kv_dequantize: src must be one row");
    scalar::dequantize_row(fmt, src, dst);
}

/// The value of an OCP FP8 E4M3 code (the NaN codes `0x7f`/`0xff`, never written by the
/// encoders here, read as ±480).
pub fn e4m3_to_f32(c: u8) -> f32 {
    scalar::e4m3_to_f32(c)
}

/// `x` as the nearest E4M3 code (ties to even), saturating at ±448; NaN gives 0.
pub fn f32_to_e4m3(x: f32) -> u8 {
    scalar::f32_to_e4m3(x)
}

/// Scores of the `n_q` query heads in `q` (`[n_q][d]`, one KV head's group) against `n_pos`
/// rows of `fmt` at byte stride `kv_stride`: `out[h * n_pos + p] = scale * dot(q_h, k_p)`.
/// Each key row is decoded once for the whole group.
///
/// # Panics
/// If `n_q` is 0 or does not divide `q.len()`, `d` is not a multiple of 32, the stride is
/// shorter than a row, `out.len() != n_q * n_pos` or `k` is too short.
#[allow(clippy::too_many_arguments)]
pub fn attn_scores_kv(
    isa: Isa,
    fmt: KvQuant,
    q: &[f32],
    n_q: usize,
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let (ql, kl, ol) = (q.len(), k.len(), out.len());
    check("attn_scores_kv", fmt, ql, n_q, kl, kv_stride, n_pos, ol);
    if n_pos == 0 {
        return;
    }
    kernels(isa).attn_scores_kv(fmt, q, n_q, k, kv_stride, n_pos, scale, out)
}

/// `out_h += Σ_p w[h * n_pos + p] * v_p` for the `n_q` heads of `out` (`[n_q][d]`) over
/// `n_pos` rows of `fmt`: it accumulates onto `out`, so a paged cache walked block by block
/// gives the bits one call over all positions gives (on the same kernel set).
///
/// # Panics
/// As [`attn_scores_kv`], with `w.len() == n_q * n_pos`.
#[allow(clippy::too_many_arguments)]
pub fn attn_weighted_sum_kv(
    isa: Isa,
    fmt: KvQuant,
    w: &[f32],
    n_q: usize,
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let (ol, vl, wl) = (out.len(), v.len(), w.len());
    check(
        "attn_weighted_sum_kv",
        fmt,
        ol,
        n_q,
        vl,
        kv_stride,
        n_pos,
        wl,
    );
    if n_pos == 0 {
        return;
    }
    if !kernels(isa).attn_weighted_sum_kv(fmt, w, n_q, v, kv_stride, n_pos, out) {
        // Declined (rows too far apart for the kernel's gathers): the reference.
        Scalar.attn_weighted_sum_kv(fmt, w, n_q, v, kv_stride, n_pos, out);
    }
}

/// The sign-quantized query of [`attn_scores_b1_xnor`]: per 32 values of `q`, sign bits
/// (bit j set when `q[j] >= 0`, as B1 keys store theirs) in `bits` and the mean magnitude in
/// `scales`.
///
/// # Panics
/// If `q.len()` is not `32 * bits.len()` or `scales.len() != bits.len()`.
pub fn b1_sign_query(q: &[f32], bits: &mut [u32], scales: &mut [f32]) {
    assert!(
        q.len() == bits.len() * QK_KV && scales.len() == bits.len(),
        "b1_sign_query: {} values need {} words and scales, got {} and {}",
        q.len(),
        q.len() / QK_KV,
        bits.len(),
        scales.len()
    );
    scalar::b1_sign_query(q, bits, scales);
}

/// Scores of `n_q` sign-quantized query heads (`qbits` and `qscales`, `[n_q][d / 32]` each,
/// from [`b1_sign_query`]) against `n_pos` B1 key rows at byte stride `kv_stride`, by
/// XNOR/popcount: `out[h * n_pos + p] = scale * Σ_b s_q * s_k * (2 popcount(!(q_b ^ k_b)) -
/// 32)`. Every kernel set gives the scalar reference's bits. A 1-bit query loses most of
/// the query's information; this is an opt-in speed path (`docs/kv-cache.md`, "XNOR scores
/// for sign keys", says what it costs).
///
/// # Panics
/// As [`attn_scores_kv`] for B1 rows of `32 * qbits.len() / n_q` values, and if
/// `qscales.len() != qbits.len()`.
#[allow(clippy::too_many_arguments)]
pub fn attn_scores_b1_xnor(
    isa: Isa,
    qbits: &[u32],
    qscales: &[f32],
    n_q: usize,
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    check_b1_xnor(qbits, qscales, n_q, k, kv_stride, n_pos, out);
    if n_pos == 0 {
        return;
    }
    if !kernels(isa).attn_scores_b1_xnor(qbits, qscales, n_q, k, kv_stride, n_pos, scale, out) {
        // Declined (rows too far apart for the kernel's gathers): the reference.
        Scalar.attn_scores_b1_xnor(qbits, qscales, n_q, k, kv_stride, n_pos, scale, out);
    }
}

/// The int8 query of [`attn_scores_kv_int8_query`]: per 32 values of `q`, the scale
/// `d = absmax / 127` in `scales` and the codes `round(q / d)` in `codes` (ggml's Q8_0 rule,
/// with an f32 scale; NaN values read as 0).
///
/// # Panics
/// If `q.len()` is not a multiple of 32, `codes.len() != q.len()` or `scales.len()` is not
/// `q.len() / 32`.
pub fn int8_query(q: &[f32], codes: &mut [i8], scales: &mut [f32]) {
    assert!(
        q.len().is_multiple_of(QK_KV) && codes.len() == q.len() && scales.len() == q.len() / QK_KV,
        "int8_query: {} values need as many codes and {} scales, got {} and {}",
        q.len(),
        q.len() / QK_KV,
        codes.len(),
        scales.len()
    );
    scalar::int8_query(q, codes, scales);
}

/// Scores of `n_q` int8 query heads (`codes` `[n_q][d]` and `scales` `[n_q][d / 32]`, from
/// [`int8_query`]) against `n_pos` key rows of `fmt` (one with
/// [`KvQuant::has_int8_query_scores`]) at byte stride `kv_stride`:
/// `out[h * n_pos + p] = scale * Σ_b s_k,b * s_q,b * (integer dot of block b)`. Each block's
/// dot is exact; SIMD kernels sum the scaled blocks in another order, within the dot budget
/// of the scaled terms. This is how llama.cpp scores Q8_0 and Q4_0 keys on the CPU: the
/// query's quantization costs about what the keys' does, and the integer dots take a
/// quarter of the multiplies of decoding the keys to floats.
///
/// # Panics
/// As [`attn_scores_kv`] for rows of `codes.len() / n_q` values, if `fmt` has no integer
/// codes, if `scales` is not one per 32 codes, or if a code is -128 (outside
/// [`int8_query`]'s range).
#[allow(clippy::too_many_arguments)]
pub fn attn_scores_kv_int8_query(
    isa: Isa,
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
    check_int8_query(fmt, codes, scales, n_q, k, kv_stride, n_pos, out);
    if n_pos == 0 {
        return;
    }
    kernels(isa).attn_scores_kv_int8_query(fmt, codes, scales, n_q, k, kv_stride, n_pos, scale, out)
}
