// PLACEHOLDER: the scalar reference until the NEON kernel lands.
use crate::float::kv::KvQuant;
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn attn_scores(
    fmt: KvQuant,
    q: &[f32],
    n_q: usize,
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    crate::scalar::kv::attn_scores(fmt, q, n_q, k, kv_stride, n_pos, scale, out)
}
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn attn_weighted_sum(
    fmt: KvQuant,
    w: &[f32],
    n_q: usize,
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    crate::scalar::kv::attn_weighted_sum(fmt, w, n_q, v, kv_stride, n_pos, out)
}
