//! The quantized KV cache row formats (beside f16 and f32, which have their own kernels in
//! [`crate::float`]): their byte layouts, reference encoders and decoders, and the two
//! attention kernels every KV format needs, as a safe API: scores of a group of query heads
//! against a run of key rows, and the weighted sum of a run of value rows accumulated onto
//! the output.
//!
//! A row is one KV head's `d` values of one position (`d` a multiple of 32). Layouts, all
//! little-endian:
//! - [`KvQuant::Q8_0`]: ggml's `block_q8_0` (see [`crate::float::Q8_0_BLOCK_BYTES`]): per 32
//!   values `d: f16` then 32 × `i8`; value j = `d * q[j]`, `d = absmax / 127`.
//! - [`KvQuant::Q8R`]: `s: f32` (bytes 0..4), then `d` × `i8`; value j = `s * q[j]`, with
//!   `s = absmax / 127` for the whole row (one scale per token and head, as the BitNet papers
//!   quantize activations).
//! - [`KvQuant::Fp8`]: per 32 values `d: f16` (bytes 0..2) then 32 OCP FP8 E4M3 codes
//!   (bytes 2..34); value j = `d * e4m3(code[j])`, with `d = absmax / 448` (448 is E4M3's
//!   largest finite value).
//! - [`KvQuant::Q4_0`]: ggml's `block_q4_0` (see [`crate::float::Q4_0_BLOCK_BYTES`]).
//! - [`KvQuant::B1`]: per 32 values `d: f16` (bytes 0..2) then `bits: u32` (bytes 2..6, bit j
//!   = element j); value j = `+d` if bit j is set, else `-d`, with `d = mean |x|` of the
//!   block (the scale that minimises the squared error of sign codes).
//!
//! The scalar kernels (`crate::scalar::kv` and its siblings `kv_int8`, `kv_q4_wsum`,
//! `kv_b1_xnor`) are the specification; the AVX2 kernels (`x86_64/avx2/kv*.rs`, run on
//! AVX-512 machines too: no 512-bit versions yet) decode exactly the same values and sum in
//! another order, within the dot budget of [`crate::float`].
//!
//! Keys of the integer formats (Q8_0, Q8R, Q4_0) can also be scored against an int8 query
//! ([`int8_query`], [`attn_scores_kv_int8_query`]), as llama.cpp does on the CPU: exact
//! integer dots per block, then the two block scales. The engine does so by default.

use crate::dispatch::token;
use crate::float::formats::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK4_0, QK8_0};
use crate::float::half::f16_at;
use crate::isa::Isa;
use crate::scalar::kv as scalar;

/// Values per block of every low-bit KV format (a head's row is a whole number of them).
pub const QK_KV: usize = 32;
/// Bytes of an FP8 block: f16 scale + 32 E4M3 codes.
pub const FP8_BLOCK_BYTES: usize = 2 + QK_KV;
/// Bytes of a B1 block: f16 scale + 32 sign bits.
pub const B1_BLOCK_BYTES: usize = 2 + QK_KV / 8;
/// Bytes of a Q8R row's header (its f32 scale).
pub const Q8R_SCALE_BYTES: usize = 4;
/// Largest finite OCP E4M3 value.
pub const E4M3_MAX: f32 = 448.0;
/// Positions per tile of the integer-weighted sum of Q4_0 values ([`attn_weighted_sum_kv`]
/// on Q4_0 rows; `crate::scalar::kv_q4_wsum` has its definition): a call's positions are
/// taken 16 at a time from its first, so calls that start at multiples of 16 (the engine's
/// KV blocks of 16 tokens or more) tile a sequence alike however its blocks are grouped into
/// calls.
pub const Q4_0_WSUM_TILE: usize = 16;

/// Largest magnitude of a Q4_0 weighted sum's integer weight: two products of a nibble
/// (<= 15) and a weight fit a signed 16-bit lane (`vpmaddubsw`), and so do 16 of them.
pub const Q4_0_WSUM_WEIGHT_MAX: f32 = 127.0;

const _: () = assert!(FP8_BLOCK_BYTES == 34);
const _: () = assert!(B1_BLOCK_BYTES == 6);
const _: () = assert!(QK4_0 == QK_KV && Q4_0_BLOCK_BYTES == 18);
const _: () = assert!(QK8_0 == QK_KV && Q8_0_BLOCK_BYTES == 34);

/// A low-bit KV row format; see the module docs for the layouts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum KvQuant {
    /// ggml Q8_0: int8 with an f16 scale per 32 values.
    Q8_0,
    /// int8 with one f32 scale per row.
    Q8R,
    /// FP8 E4M3 with an f16 scale per 32 values.
    Fp8,
    /// ggml Q4_0: 4-bit with an f16 scale per 32 values.
    Q4_0,
    /// Sign bits with an f16 scale (mean magnitude) per 32 values.
    B1,
}

impl KvQuant {
    pub const ALL: [KvQuant; 5] = [
        KvQuant::Q8_0,
        KvQuant::Q8R,
        KvQuant::Fp8,
        KvQuant::Q4_0,
        KvQuant::B1,
    ];

    /// Bytes of one row of `d` values; `None` unless `d` is a positive multiple of 32.
    pub fn row_bytes(self, d: usize) -> Option<usize> {
        if d == 0 || !d.is_multiple_of(QK_KV) {
            return None;
        }
        let nb = d / QK_KV;
        match self {
            KvQuant::Q8_0 => nb.checked_mul(Q8_0_BLOCK_BYTES),
            KvQuant::Q8R => d.checked_add(Q8R_SCALE_BYTES),
            KvQuant::Fp8 => nb.checked_mul(FP8_BLOCK_BYTES),
            KvQuant::Q4_0 => nb.checked_mul(Q4_0_BLOCK_BYTES),
            KvQuant::B1 => nb.checked_mul(B1_BLOCK_BYTES),
        }
    }

    /// Whether keys of this format can be scored against an int8 query
    /// ([`attn_scores_kv_int8_query`]): their values are small integers times a scale.
    pub const fn has_int8_query_scores(self) -> bool {
        matches!(self, KvQuant::Q8_0 | KvQuant::Q8R | KvQuant::Q4_0)
    }

    pub const fn name(self) -> &'static str {
        match self {
            KvQuant::Q8_0 => "q8_0",
            KvQuant::Q8R => "q8_r",
            KvQuant::Fp8 => "fp8",
            KvQuant::Q4_0 => "q4_0",
            KvQuant::B1 => "b1",
        }
    }
}

fn row_bytes_or_panic(what: &str, fmt: KvQuant, d: usize) -> usize {
    fmt.row_bytes(d).unwrap_or_else(|| {
        panic!(
            "{what}: {} rows hold a positive multiple of {QK_KV} values, not {d}",
            fmt.name()
        )
    })
}

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

/// The shapes every attention kernel of this module reads (checked here, and again by the
/// SIMD token methods, whose kernels index raw pointers): `n_q` heads of `d` values with `d`
/// a whole number of blocks, `n_pos` rows of `fmt` at byte stride `kv_stride` inside the
/// cache, `n_q * n_pos` scores or weights. Returns `d`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check(
    what: &str,
    fmt: KvQuant,
    heads_len: usize,
    n_q: usize,
    cache_len: usize,
    kv_stride: usize,
    n_pos: usize,
    other_len: usize,
) -> usize {
    assert!(
        n_q > 0 && heads_len.is_multiple_of(n_q),
        "{what}: {heads_len} values are not {n_q} heads"
    );
    let d = heads_len / n_q;
    let rb = row_bytes_or_panic(what, fmt, d);
    assert!(
        kv_stride >= rb,
        "{what}: stride {kv_stride} bytes < row {rb} bytes"
    );
    assert_eq!(
        Some(other_len),
        n_q.checked_mul(n_pos),
        "{what}: scores / weights must be n_q x n_pos"
    );
    if n_pos > 0 {
        let need = (n_pos - 1)
            .checked_mul(kv_stride)
            .and_then(|v| v.checked_add(rb))
            .expect("cache size overflows");
        assert!(
            cache_len >= need,
            "{what}: {n_pos} rows of stride {kv_stride} need {need} bytes, cache has {cache_len}"
        );
    }
    d
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
    if let Some(simd) = token(isa) {
        return simd.attn_scores_kv(fmt, q, n_q, k, kv_stride, n_pos, scale, out);
    }
    scalar::attn_scores(fmt, q, n_q, k, kv_stride, n_pos, scale, out);
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
    if let Some(simd) = token(isa)
        && simd.attn_weighted_sum_kv(fmt, w, n_q, v, kv_stride, n_pos, out)
    {
        return;
    }
    scalar::attn_weighted_sum(fmt, w, n_q, v, kv_stride, n_pos, out);
}

/// For a tile's largest weight magnitude `m` in the Q4_0 integer-weighted sum (the same for
/// every kernel set): the step `m / 127` and the factor `127 / m` that rounds weights to
/// steps, or `None` (the tile adds nothing) when `m` is 0 or so small that `127 / m`
/// overflows (below 4e-37: contributions far under any f32 output's ulp).
#[inline]
pub(crate) fn q4_0_wsum_step(m: f32) -> Option<(f32, f32)> {
    let inv = Q4_0_WSUM_WEIGHT_MAX / m;
    inv.is_finite().then(|| (m / Q4_0_WSUM_WEIGHT_MAX, inv))
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
    if let Some(simd) = token(isa)
        && simd.attn_scores_b1_xnor(qbits, qscales, n_q, k, kv_stride, n_pos, scale, out)
    {
        return;
    }
    scalar::attn_scores_b1_xnor(qbits, qscales, n_q, k, kv_stride, n_pos, scale, out);
}

/// The shapes of [`attn_scores_b1_xnor`] (checked there, and again by the SIMD token methods):
/// one scale per sign word, and those of [`check`] for B1 rows.
pub(crate) fn check_b1_xnor(
    qbits: &[u32],
    qscales: &[f32],
    n_q: usize,
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &[f32],
) {
    assert_eq!(
        qbits.len(),
        qscales.len(),
        "attn_scores_b1_xnor: one scale per sign word"
    );
    let (ql, kl, ol) = (qbits.len() * QK_KV, k.len(), out.len());
    check(
        "attn_scores_b1_xnor",
        KvQuant::B1,
        ql,
        n_q,
        kl,
        kv_stride,
        n_pos,
        ol,
    );
}

/// One B1 key row against one sign-quantized query head, before the attention scale:
/// `Σ_b fma(((32 - 2 popcount(q_b ^ k_b)) * s_k,b), s_q,b, acc)` in block order (the count
/// of agreeing signs minus the disagreeing ones is `2 popcount(!(q ^ k)) - 32`). The
/// definition every kernel set's [`attn_scores_b1_xnor`] matches bit for bit (the SIMD
/// kernels score their last positions with it).
#[inline]
pub(crate) fn b1_xnor_row(qbits: &[u32], qscales: &[f32], row: &[u8]) -> f32 {
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
/// codes, or if `scales` is not one per 32 codes.
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
    if let Some(simd) = token(isa) {
        return simd
            .attn_scores_kv_int8_query(fmt, codes, scales, n_q, k, kv_stride, n_pos, scale, out);
    }
    scalar::attn_scores_int8_query(fmt, codes, scales, n_q, k, kv_stride, n_pos, scale, out);
}

/// The shapes of [`attn_scores_kv_int8_query`] (checked there, and again by the SIMD token
/// methods): a format with integer codes, one query scale per 32 codes, and those of
/// [`check`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_int8_query(
    fmt: KvQuant,
    codes: &[i8],
    scales: &[f32],
    n_q: usize,
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &[f32],
) {
    assert!(
        fmt.has_int8_query_scores(),
        "attn_scores_kv_int8_query: {} keys hold no integer codes",
        fmt.name()
    );
    assert_eq!(
        codes.len(),
        scales.len() * QK_KV,
        "attn_scores_kv_int8_query: one scale per 32 codes"
    );
    let (ql, kl, ol) = (codes.len(), k.len(), out.len());
    check(
        "attn_scores_kv_int8_query",
        fmt,
        ql,
        n_q,
        kl,
        kv_stride,
        n_pos,
        ol,
    );
}
