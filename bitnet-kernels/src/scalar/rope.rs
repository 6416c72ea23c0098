//! Reference RoPE (cos/sin of one position, from `crate::float::RopeTable`): the
//! specification of the SIMD `rope` kernels, which match it bit for bit.

/// NeoX / rotate-half: pairs `(i, i + rope_dim/2)` of each head, `cos`/`sin` of length
/// `rope_dim/2`. `x0' = x0 c - x1 s`, `x1' = x0 s + x1 c`, no fused multiply-add (the SIMD
/// kernels match this bit for bit).
pub fn rope_neox(
    x: &mut [f32],
    head_dim: usize,
    n_heads: usize,
    rope_dim: usize,
    cos: &[f32],
    sin: &[f32],
) {
    let half = rope_dim / 2;
    for h in x.chunks_exact_mut(head_dim).take(n_heads) {
        let (a, b) = h[..rope_dim].split_at_mut(half);
        for i in 0..half {
            let (x0, x1, c, s) = (a[i], b[i], cos[i], sin[i]);
            a[i] = x0 * c - x1 * s;
            b[i] = x0 * s + x1 * c;
        }
    }
}

/// GPT-J / "normal": adjacent pairs `(2i, 2i + 1)` of each head.
pub fn rope_normal(
    x: &mut [f32],
    head_dim: usize,
    n_heads: usize,
    rope_dim: usize,
    cos: &[f32],
    sin: &[f32],
) {
    for h in x.chunks_exact_mut(head_dim).take(n_heads) {
        for i in 0..rope_dim / 2 {
            let (x0, x1, c, s) = (h[2 * i], h[2 * i + 1], cos[i], sin[i]);
            h[2 * i] = x0 * c - x1 * s;
            h[2 * i + 1] = x0 * s + x1 * c;
        }
    }
}
