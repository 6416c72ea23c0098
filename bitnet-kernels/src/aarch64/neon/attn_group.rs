// PLACEHOLDER: the scalar reference until the NEON kernel lands.
pub(crate) unsafe fn scores_group(
    q: &[f32],
    n_q: usize,
    k: &[u16],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) -> bool {
    let _ = (q, n_q, k, kv_stride, n_pos, scale, out);
    false
}
pub(crate) unsafe fn wsum_group(
    w: &[f32],
    n_q: usize,
    v: &[u16],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) -> bool {
    let _ = (w, n_q, v, kv_stride, n_pos, out);
    false
}
