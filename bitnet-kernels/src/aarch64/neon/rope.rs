//! NEON RoPE: the rotations of `scalar/rope.rs`, 4 pairs at a time, with the same
//! multiplies and adds (`FMUL`, `FSUB`, `FADD`; no fused multiply-add), so bit for bit the
//! reference's results. The GPT-J layout's adjacent pairs are split and rejoined by
//! `LD2`/`ST2`.

use std::arch::aarch64::*;

use crate::shared::rope::check_kernel_args;

/// `(x0 c - x1 s, x0 s + x1 c)` on four pairs, unfused as in the reference.
#[inline]
#[target_feature(enable = "neon")]
fn rotate(
    x0: float32x4_t,
    x1: float32x4_t,
    c: float32x4_t,
    s: float32x4_t,
) -> (float32x4_t, float32x4_t) {
    (
        vsubq_f32(vmulq_f32(x0, c), vmulq_f32(x1, s)),
        vaddq_f32(vmulq_f32(x0, s), vmulq_f32(x1, c)),
    )
}

/// Same contract as the scalar kernel of this name (bit-exact with it).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn rope_neox(
    x: &mut [f32],
    head_dim: usize,
    n_heads: usize,
    rope_dim: usize,
    cos: &[f32],
    sin: &[f32],
) {
    check_kernel_args(x.len(), head_dim, n_heads, rope_dim, cos.len(), sin.len());
    let half = rope_dim / 2;
    for h in x.chunks_exact_mut(head_dim).take(n_heads) {
        let (a, b) = h[..rope_dim].split_at_mut(half);
        let mut i = 0;
        while i + 4 <= half {
            // SAFETY: i + 4 <= half, which a, b, cos and sin all hold.
            unsafe {
                let (y0, y1) = rotate(
                    vld1q_f32(a.as_ptr().add(i)),
                    vld1q_f32(b.as_ptr().add(i)),
                    vld1q_f32(cos.as_ptr().add(i)),
                    vld1q_f32(sin.as_ptr().add(i)),
                );
                vst1q_f32(a.as_mut_ptr().add(i), y0);
                vst1q_f32(b.as_mut_ptr().add(i), y1);
            }
            i += 4;
        }
        for i in i..half {
            let (x0, x1, c, s) = (a[i], b[i], cos[i], sin[i]);
            a[i] = x0 * c - x1 * s;
            b[i] = x0 * s + x1 * c;
        }
    }
}

/// Same contract as the scalar kernel of this name (bit-exact with it).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn rope_normal(
    x: &mut [f32],
    head_dim: usize,
    n_heads: usize,
    rope_dim: usize,
    cos: &[f32],
    sin: &[f32],
) {
    check_kernel_args(x.len(), head_dim, n_heads, rope_dim, cos.len(), sin.len());
    let half = rope_dim / 2;
    for h in x.chunks_exact_mut(head_dim).take(n_heads) {
        let mut k = 0;
        while k + 4 <= half {
            // SAFETY: pairs k..k + 4 lie inside the head's first rope_dim values; cos and sin
            // hold half values.
            unsafe {
                let v = vld2q_f32(h.as_ptr().add(2 * k));
                let (y0, y1) = rotate(
                    v.0,
                    v.1,
                    vld1q_f32(cos.as_ptr().add(k)),
                    vld1q_f32(sin.as_ptr().add(k)),
                );
                vst2q_f32(h.as_mut_ptr().add(2 * k), float32x4x2_t(y0, y1));
            }
            k += 4;
        }
        for i in k..half {
            let (x0, x1, c, s) = (h[2 * i], h[2 * i + 1], cos[i], sin[i]);
            h[2 * i] = x0 * c - x1 * s;
            h[2 * i + 1] = x0 * s + x1 * c;
        }
    }
}
