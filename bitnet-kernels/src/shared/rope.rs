//! The shapes the RoPE kernels read through raw pointers.

/// What the SIMD rotation kernels read before indexing raw pointers (they call this; the
/// table's own checks above are stricter): `n_heads` heads of `head_dim` in `x`,
/// `rope_dim <= head_dim`, and `rope_dim / 2` cos and sin values.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)] // used by the SIMD levels only
pub(crate) fn check_kernel_args(
    x_len: usize,
    head_dim: usize,
    n_heads: usize,
    rope_dim: usize,
    cos_len: usize,
    sin_len: usize,
) {
    let half = rope_dim / 2;
    assert!(head_dim.checked_mul(n_heads).is_some_and(|n| x_len >= n) && rope_dim <= head_dim);
    assert!(cos_len >= half && sin_len >= half);
}
