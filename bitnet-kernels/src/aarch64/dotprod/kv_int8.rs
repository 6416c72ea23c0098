// PLACEHOLDER: the scalar reference until the kernel lands.
use crate::float::kv::KvQuant;
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn attn_scores_int8_query(
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
    crate::scalar::kv_int8::attn_scores_int8_query(
        fmt, codes, scales, n_q, k, kv_stride, n_pos, scale, out,
    )
}
