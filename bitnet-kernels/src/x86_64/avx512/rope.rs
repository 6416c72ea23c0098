//! AVX-512 RoPE: the rotations of `scalar/rope.rs`, 16 lanes at a time with masked
//! tails, with the same multiplies and adds (no fused multiply-add), so bit for bit the
//! reference's results.

use std::arch::x86_64::*;

use super::float::mask16;
use crate::shared::rope::check_kernel_args;

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
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
    for h in 0..n_heads {
        let a = x[h * head_dim..].as_mut_ptr();
        let mut i = 0;
        while i < half {
            let m = mask16(half - i);
            // SAFETY: i + lanes <= half; the pairs (i, half + i) lie inside head h, and cos
            // and sin hold half values (checked above).
            unsafe {
                let x0 = _mm512_maskz_loadu_ps(m, a.add(i));
                let x1 = _mm512_maskz_loadu_ps(m, a.add(half + i));
                let c = _mm512_maskz_loadu_ps(m, cos.as_ptr().add(i));
                let s = _mm512_maskz_loadu_ps(m, sin.as_ptr().add(i));
                let y0 = _mm512_sub_ps(_mm512_mul_ps(x0, c), _mm512_mul_ps(x1, s));
                let y1 = _mm512_add_ps(_mm512_mul_ps(x0, s), _mm512_mul_ps(x1, c));
                _mm512_mask_storeu_ps(a.add(i), m, y0);
                _mm512_mask_storeu_ps(a.add(half + i), m, y1);
            }
            i += 16;
        }
    }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
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
    // Lane 2k and 2k + 1 take cos/sin k; even lanes negate sin (x0 c + x1 (-s)).
    let dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    let neg_even = _mm512_castsi512_ps(_mm512_set_epi32(
        0,
        -0x8000_0000,
        0,
        -0x8000_0000,
        0,
        -0x8000_0000,
        0,
        -0x8000_0000,
        0,
        -0x8000_0000,
        0,
        -0x8000_0000,
        0,
        -0x8000_0000,
        0,
        -0x8000_0000,
    ));
    for h in 0..n_heads {
        let a = x[h * head_dim..].as_mut_ptr();
        let mut k = 0; // pair index
        while k < half {
            let pairs = (half - k).min(8);
            let m8 = mask16(pairs);
            let m16 = mask16(2 * pairs);
            // SAFETY: pairs k..k + pairs lie inside head h's first rope_dim values, and cos
            // and sin hold half values (checked above).
            unsafe {
                let v = _mm512_maskz_loadu_ps(m16, a.add(2 * k));
                let c = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(m8, cos.as_ptr().add(k)));
                let s = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(m8, sin.as_ptr().add(k)));
                let s = _mm512_xor_ps(s, neg_even);
                let sw = _mm512_permute_ps::<0b10_11_00_01>(v);
                let y = _mm512_add_ps(_mm512_mul_ps(v, c), _mm512_mul_ps(sw, s));
                _mm512_mask_storeu_ps(a.add(2 * k), m16, y);
            }
            k += 8;
        }
    }
}
