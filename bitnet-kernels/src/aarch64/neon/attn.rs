// PLACEHOLDER: the scalar reference until the NEON kernel lands.
use crate::scalar::attn as s;
pub unsafe fn attn_scores_f16(
    q: &[f32],
    k: &[u16],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    s::attn_scores_f16(q, k, kv_stride, n_pos, scale, out)
}
pub unsafe fn attn_weighted_sum_f16(
    w: &[f32],
    v: &[u16],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    s::attn_weighted_sum_f16(w, v, kv_stride, n_pos, out)
}
pub unsafe fn attn_scores_f32(
    q: &[f32],
    k: &[f32],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    s::attn_scores_f32(q, k, kv_stride, n_pos, scale, out)
}
pub unsafe fn attn_weighted_sum_f32(
    w: &[f32],
    v: &[f32],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    s::attn_weighted_sum_f32(w, v, kv_stride, n_pos, out)
}
pub unsafe fn attn_scores_q8_0(
    q: &[f32],
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    s::attn_scores_q8_0(q, k, kv_stride, n_pos, scale, out)
}
pub unsafe fn attn_weighted_sum_q8_0(
    w: &[f32],
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    s::attn_weighted_sum_q8_0(w, v, kv_stride, n_pos, out)
}
