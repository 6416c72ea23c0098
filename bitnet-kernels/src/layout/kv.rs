//! The quantized KV cache row formats: their byte layouts and the shapes every kernel set
//! reads them in. A row is one KV head's `d` values of one position (`d` a multiple of 32).
//! Layouts, all little-endian:
//! - [`KvQuant::Q8_0`]: ggml's `block_q8_0` (see [`Q8_0_BLOCK_BYTES`]): per 32 values
//!   `d: f16` then 32 × `i8`; value j = `d * q[j]`, `d = absmax / 127`.
//! - [`KvQuant::Q8R`]: `s: f32` (bytes 0..4), then `d` × `i8`; value j = `s * q[j]`, with
//!   `s = absmax / 127` for the whole row (one scale per token and head, as the BitNet papers
//!   quantize activations).
//! - [`KvQuant::Fp8`]: per 32 values `d: f16` (bytes 0..2) then 32 OCP FP8 E4M3 codes
//!   (bytes 2..34); value j = `d * e4m3(code[j])`, with `d = absmax / 448` (448 is E4M3's
//!   largest finite value).
//! - [`KvQuant::Q4_0`]: ggml's `block_q4_0` (see [`Q4_0_BLOCK_BYTES`]).
//! - [`KvQuant::B1`]: per 32 values `d: f16` (bytes 0..2) then `bits: u32` (bytes 2..6, bit j
//!   = element j); value j = `+d` if bit j is set, else `-d`, with `d = mean |x|` of the
//!   block (the scale that minimises the squared error of sign codes).
//!
//! Besides the layouts, the format details every kernel set must agree on to give the
//! reference's bits (the Q4_0 weighted sum's step, one B1 row's XNOR score) live here, below
//! all of them.

use crate::layout::half::f16_at;
use crate::layout::rows::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK4_0, QK8_0};

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

/// Positions per tile of the integer-weighted sum of Q4_0 values (`attn_weighted_sum_kv`
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
    /// (`attn_scores_kv_int8_query`): their values are small integers times a scale.
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

pub(crate) fn row_bytes_or_panic(what: &str, fmt: KvQuant, d: usize) -> usize {
    fmt.row_bytes(d).unwrap_or_else(|| {
        panic!(
            "{what}: {} rows hold a positive multiple of {QK_KV} values, not {d}",
            fmt.name()
        )
    })
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

/// For a tile's largest weight magnitude `m` in the Q4_0 integer-weighted sum (the same for
/// every kernel set): the step `m / 127` and the factor `127 / m` that rounds weights to
/// steps, or `None` (the tile adds nothing) when `m` is 0 or so small that `127 / m`
/// overflows (below 4e-37: contributions far under any f32 output's ulp).
#[inline]
pub(crate) fn q4_0_wsum_step(m: f32) -> Option<(f32, f32)> {
    let inv = Q4_0_WSUM_WEIGHT_MAX / m;
    inv.is_finite().then(|| (m / Q4_0_WSUM_WEIGHT_MAX, inv))
}

/// The shapes of `attn_scores_b1_xnor` (checked there, and again by the SIMD token methods):
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
/// definition every kernel set's `attn_scores_b1_xnor` matches bit for bit (the SIMD
/// kernels score their last positions with it).
#[inline]
pub(crate) fn b1_xnor_row(qbits: &[u32], qscales: &[f32], row: &[u8]) -> f32 {
    let mut acc = 0.0f32;
    for (b, (&qw, &qs)) in qbits.iter().zip(qscales).enumerate() {
        let blk = &row[B1_BLOCK_BYTES * b..][..B1_BLOCK_BYTES];
        let kw = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
        let agree = 32 - 2 * (qw ^ kw).count_ones() as i32;
        let t = agree as f32 * f16_at(blk, 0);
        acc = crate::scalar::fma::mul_add(t, qs, acc);
    }
    acc
}

/// The shapes of `attn_scores_kv_int8_query` (checked there, and again by the SIMD token
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
    // The kernels' exactness rests on it: NEON sums two code x key products in one i16
    // lane, which -128 x -128 twice overflows. `int8_query` clamps to -127.
    assert!(
        !codes.contains(&i8::MIN),
        "attn_scores_kv_int8_query: a query code of -128 (int8_query's codes are in -127..=127)"
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
