// PLACEHOLDER: the scalar reference until the NEON kernel lands.
pub unsafe fn rope_neox(
    x: &mut [f32],
    head_dim: usize,
    n_heads: usize,
    rope_dim: usize,
    cos: &[f32],
    sin: &[f32],
) {
    crate::scalar::rope::rope_neox(x, head_dim, n_heads, rope_dim, cos, sin)
}
pub unsafe fn rope_normal(
    x: &mut [f32],
    head_dim: usize,
    n_heads: usize,
    rope_dim: usize,
    cos: &[f32],
    sin: &[f32],
) {
    crate::scalar::rope::rope_normal(x, head_dim, n_heads, rope_dim, cos, sin)
}
