//! AVX2 RoPE: the rotations of `scalar/rope.rs`, 8 lanes at a time, with the same
//! multiplies and adds (no fused multiply-add), so bit for bit the reference's results.

use std::arch::x86_64::*;

use crate::shared::rope::check_kernel_args;

/// Same contract as the scalar kernel of this name (bit-exact with it).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
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
        while i + 8 <= half {
            // SAFETY: i + 8 <= half, which a, b, cos and sin all hold.
            unsafe {
                let x0 = _mm256_loadu_ps(a.as_ptr().add(i));
                let x1 = _mm256_loadu_ps(b.as_ptr().add(i));
                let c = _mm256_loadu_ps(cos.as_ptr().add(i));
                let s = _mm256_loadu_ps(sin.as_ptr().add(i));
                let y0 = _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, s));
                let y1 = _mm256_add_ps(_mm256_mul_ps(x0, s), _mm256_mul_ps(x1, c));
                _mm256_storeu_ps(a.as_mut_ptr().add(i), y0);
                _mm256_storeu_ps(b.as_mut_ptr().add(i), y1);
            }
            i += 8;
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
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
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
    let dup = _mm256_set_epi32(3, 3, 2, 2, 1, 1, 0, 0);
    let neg_even = _mm256_castsi256_ps(_mm256_set_epi32(
        0,
        i32::MIN,
        0,
        i32::MIN,
        0,
        i32::MIN,
        0,
        i32::MIN,
    ));
    for h in x.chunks_exact_mut(head_dim).take(n_heads) {
        let mut k = 0;
        while k + 4 <= half {
            // SAFETY: pairs k..k + 4 lie inside the head's first rope_dim values; cos and sin
            // hold half values.
            unsafe {
                let v = _mm256_loadu_ps(h.as_ptr().add(2 * k));
                let c = _mm256_castps128_ps256(_mm_loadu_ps(cos.as_ptr().add(k)));
                let s = _mm256_castps128_ps256(_mm_loadu_ps(sin.as_ptr().add(k)));
                let c = _mm256_permutevar8x32_ps(c, dup);
                let s = _mm256_xor_ps(_mm256_permutevar8x32_ps(s, dup), neg_even);
                let sw = _mm256_permute_ps::<0b10_11_00_01>(v);
                let y = _mm256_add_ps(_mm256_mul_ps(v, c), _mm256_mul_ps(sw, s));
                _mm256_storeu_ps(h.as_mut_ptr().add(2 * k), y);
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
