//! The shapes of attention over an f16 or f32 cache that the kernels read through raw
//! pointers: checked by the safe API, and again by the SIMD methods of every kernel set.

pub(crate) fn check_attn(what: &str, d: usize, cache_len: usize, kv_stride: usize, n_pos: usize) {
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

/// The shapes of [`crate::float::attn_scores_f16_group`] (checked there, and again by the SIMD token
/// methods, whose group kernels index raw pointers): `n_q` heads of `d` values in `q`,
/// `n_q * n_pos` scores, the cache as [`crate::float::attn_scores_f16`] reads it. Returns `d`.
pub(crate) fn check_group_scores(
    q_len: usize,
    n_q: usize,
    k_len: usize,
    kv_stride: usize,
    n_pos: usize,
    out_len: usize,
) -> usize {
    assert!(
        n_q > 0 && q_len.is_multiple_of(n_q),
        "attn_scores_f16_group: q is not n_q heads"
    );
    let d = q_len / n_q;
    assert_eq!(
        Some(out_len),
        n_q.checked_mul(n_pos),
        "attn_scores_f16_group: out must be n_q x n_pos"
    );
    check_attn("attn_scores_f16_group", d, k_len, kv_stride, n_pos);
    d
}

/// The shapes of [`crate::float::attn_weighted_sum_f16_group`] (checked there, and again by the SIMD token
/// methods): `n_q` heads of `d` values in `out`, `n_q * n_pos` weights, the cache as
/// [`crate::float::attn_weighted_sum_f16`] reads it. Returns `d`.
pub(crate) fn check_group_wsum(
    w_len: usize,
    n_q: usize,
    v_len: usize,
    kv_stride: usize,
    n_pos: usize,
    out_len: usize,
) -> usize {
    assert!(
        n_q > 0 && out_len.is_multiple_of(n_q),
        "attn_weighted_sum_f16_group: out is not n_q heads"
    );
    let d = out_len / n_q;
    assert_eq!(
        Some(w_len),
        n_q.checked_mul(n_pos),
        "attn_weighted_sum_f16_group: w must be n_q x n_pos"
    );
    check_attn("attn_weighted_sum_f16_group", d, v_len, kv_stride, n_pos);
    d
}
