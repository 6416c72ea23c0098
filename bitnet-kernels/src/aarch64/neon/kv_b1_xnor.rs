// PLACEHOLDER: the scalar reference until the NEON kernel lands.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn attn_scores_b1_xnor(
    qbits: &[u32],
    qscales: &[f32],
    n_q: usize,
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    crate::scalar::kv_b1_xnor::attn_scores_b1_xnor(
        qbits, qscales, n_q, k, kv_stride, n_pos, scale, out,
    )
}
