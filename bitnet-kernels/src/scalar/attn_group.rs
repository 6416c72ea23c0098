//! Reference grouped-query attention over an f16 cache: the `n_q` query heads of a GQA group
//! scored against, or summed over, the rows of their one KV head, head after head with the
//! one-head references of `attn.rs`. The specification of the SIMD `attn_group` kernels
//! (which load each row once for the whole group, and are held to the dot budget).

use super::attn::{attn_scores_f16, attn_weighted_sum_f16};

/// `out[h * n_pos + p] = scale * dot(q_h, k_p)` for the `n_q` heads of `q` (`[n_q][d]`).
/// Always `true`: the reference takes every group size (the SIMD group kernels may decline
/// one, see `crate::ops::Kernels`).
pub fn scores_group(
    q: &[f32],
    n_q: usize,
    k: &[u16],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) -> bool {
    let d = q.len() / n_q;
    for (qh, oh) in q
        .chunks_exact(d.max(1))
        .zip(out.chunks_exact_mut(n_pos.max(1)))
    {
        attn_scores_f16(qh, k, kv_stride, n_pos, scale, &mut oh[..n_pos]);
    }
    true
}

/// `out_h += Σ_p w[h][p] v_p` for the `n_q` heads of `out` (`[n_q][d]`), `w` `[n_q][n_pos]`.
/// Always `true`, as [`scores_group`].
pub fn wsum_group(
    w: &[f32],
    n_q: usize,
    v: &[u16],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) -> bool {
    let d = out.len() / n_q;
    for h in 0..n_q {
        let wh = &w[h * n_pos..(h + 1) * n_pos];
        attn_weighted_sum_f16(wh, v, kv_stride, n_pos, &mut out[h * d..(h + 1) * d]);
    }
    true
}
