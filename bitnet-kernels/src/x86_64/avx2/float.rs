//! Float kernels for this instruction set (being written: until a kernel lands here it
//! forwards to the scalar reference).

use std::ops::Range;

use crate::float::RowFormat;
use crate::scalar::float as scalar;

macro_rules! forward {
    ($($name:ident($($a:ident: $t:ty),*) $(-> $r:ty)?;)*) => {$(
        /// Forwards to the scalar reference.
        ///
        /// # Safety
        /// None beyond the scalar kernel's; unsafe only to share the SIMD kernels' signature.
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $name($($a: $t),*) $(-> $r)? { scalar::$name($($a),*) }
    )*};
}

forward! {
    f16_to_f32_slice(src: &[u16], dst: &mut [f32]);
    f32_to_f16_slice(src: &[f32], dst: &mut [u16]);
    dot_f32(a: &[f32], b: &[f32]) -> f32;
    matmul_f32(fmt: RowFormat, data: &[u8], row_len: usize, x: &[f32], n_tok: usize, rows: Range<usize>, out: &mut [f32]);
    matmul_q8_0_q8_0(w: &[u8], row_len: usize, xq: &[u8], n_tok: usize, rows: Range<usize>, out: &mut [f32]);
    rmsnorm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]);
    softmax_inplace(x: &mut [f32]);
    silu(x: &mut [f32]);
    silu_mul(gate: &mut [f32], up: &[f32]);
    relu2(x: &mut [f32]);
    relu2_mul(gate: &mut [f32], up: &[f32]);
    add_inplace(dst: &mut [f32], src: &[f32]);
    mul_inplace(dst: &mut [f32], src: &[f32]);
    scale_inplace(x: &mut [f32], s: f32);
    rope_neox(x: &mut [f32], head_dim: usize, n_heads: usize, rope_dim: usize, cos: &[f32], sin: &[f32]);
    rope_normal(x: &mut [f32], head_dim: usize, n_heads: usize, rope_dim: usize, cos: &[f32], sin: &[f32]);
    attn_scores_f16(q: &[f32], k: &[u16], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    attn_weighted_sum_f16(w: &[f32], v: &[u16], kv_stride: usize, n_pos: usize, out: &mut [f32]);
    attn_scores_f32(q: &[f32], k: &[f32], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    attn_weighted_sum_f32(w: &[f32], v: &[f32], kv_stride: usize, n_pos: usize, out: &mut [f32]);
}
