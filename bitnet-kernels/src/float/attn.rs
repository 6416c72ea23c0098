//! Attention over one KV head of an f16, f32 or Q8_0 cache, as a safe API: scores of a query
//! against every cached position, and the weighted sum of the cached values, per head or for
//! the query heads of a GQA group at once (f16). The low-bit KV formats are `kv.rs`.
//!
//! Shapes are checked here before any kernel runs; the kernels are `crate::scalar::attn` and
//! `crate::scalar::attn_group` (the specification) and the SIMD `attn` / `attn_group`
//! kernels of the same names, reached through `crate::dispatch::kernels`.

use crate::dispatch::kernels;
use crate::isa::Isa;
use crate::layout::rows::{Q8_0_BLOCK_BYTES, QK8_0};
use crate::ops::Kernels;
use crate::shared::attn::{check_attn, check_group_scores, check_group_wsum};

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
    kernels(isa).attn_scores_f16(q, k, kv_stride, n_pos, scale, out)
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
    kernels(isa).attn_weighted_sum_f16(w, v, kv_stride, n_pos, out)
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
    kernels(isa).attn_scores_f32(q, k, kv_stride, n_pos, scale, out)
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
    kernels(isa).attn_weighted_sum_f32(w, v, kv_stride, n_pos, out)
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
    let d = check_group_scores(q.len(), n_q, k.len(), kv_stride, n_pos, out.len());
    if kernels(isa).attn_scores_f16_group(q, n_q, k, kv_stride, n_pos, scale, out) {
        return;
    }
    // No group kernel of this size in the set: head after head, with its one-head kernel.
    for (qh, oh) in q
        .chunks_exact(d.max(1))
        .zip(out.chunks_exact_mut(n_pos.max(1)))
    {
        attn_scores_f16(isa, qh, k, kv_stride, n_pos, scale, &mut oh[..n_pos]);
    }
}

/// Grouped-query weighted sums over an f16 cache: `w` is `[n_q][n_pos]`, `out` is
/// `[n_q][d]`, `out_h += Σ_p w[h][p] v_p` (accumulates, as [`attn_weighted_sum_f16`]); each
/// V row is loaded once for the whole group.
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
    let d = check_group_wsum(w.len(), n_q, v.len(), kv_stride, n_pos, out.len());
    if kernels(isa).attn_weighted_sum_f16_group(w, n_q, v, kv_stride, n_pos, out) {
        return;
    }
    // No group kernel of this size in the set: head after head, with its one-head kernel.
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
/// blocks (as [`quantize_row_q8_0`](crate::float::quantize_row_q8_0) writes them) at byte
/// `p * kv_stride`.
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
    kernels(isa).attn_scores_q8_0(q, k, kv_stride, n_pos, scale, out)
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
    kernels(isa).attn_weighted_sum_q8_0(w, v, kv_stride, n_pos, out)
}
