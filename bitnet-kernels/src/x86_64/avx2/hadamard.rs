//! AVX2 fast Walsh-Hadamard transform: the spans 1, 2 and 4 inside each 8-lane vector
//! (lane permutes and a blend), the spans of 8 and more between whole vectors. Each stage
//! computes the same `a + b` / `a - b` of the same operands as the scalar reference, in the
//! same stage order, so the result is the reference's bit for bit.

use std::arch::x86_64::*;

use crate::shared::hadamard::inv_sqrt;

/// Spans 1, 2 and 4 of the butterfly within one vector of 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn butterflies_in_vector(v: __m256) -> __m256 {
    // Span 1: lanes (0,1), (2,3), ...: the partner is the neighbour; the lower lane of a
    // pair keeps a + b, the upper one gets (lower - upper) = partner - self.
    let p = _mm256_permute_ps::<0b10_11_00_01>(v);
    let v = _mm256_blend_ps::<0b1010_1010>(_mm256_add_ps(v, p), _mm256_sub_ps(p, v));
    // Span 2: lanes (0,2), (1,3) of each 128-bit half.
    let p = _mm256_permute_ps::<0b01_00_11_10>(v);
    let v = _mm256_blend_ps::<0b1100_1100>(_mm256_add_ps(v, p), _mm256_sub_ps(p, v));
    // Span 4: the two 128-bit halves.
    let p = _mm256_permute2f128_ps::<0x01>(v, v);
    _mm256_blend_ps::<0b1111_0000>(_mm256_add_ps(v, p), _mm256_sub_ps(p, v))
}

/// The reference `fwht` (`scalar/hadamard.rs`) on one row of `x.len()` values (a power of
/// two, at least 8).
///
/// # Safety
/// The CPU must support AVX2 and FMA; `x.len()` a power of two >= 8.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn fwht(x: &mut [f32]) {
    let n = x.len();
    debug_assert!(n.is_power_of_two() && n >= 8);
    let p = x.as_mut_ptr();
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n (n is a multiple of 8).
        unsafe {
            let v = _mm256_loadu_ps(p.add(i));
            _mm256_storeu_ps(p.add(i), butterflies_in_vector(v));
        }
    }
    let mut h = 8;
    while h < n {
        for i in (0..n).step_by(2 * h) {
            for j in (i..i + h).step_by(8) {
                // SAFETY: j + h + 8 <= i + 2h <= n.
                unsafe {
                    let a = _mm256_loadu_ps(p.add(j));
                    let b = _mm256_loadu_ps(p.add(j + h));
                    _mm256_storeu_ps(p.add(j), _mm256_add_ps(a, b));
                    _mm256_storeu_ps(p.add(j + h), _mm256_sub_ps(a, b));
                }
            }
        }
        h *= 2;
    }
    let s = _mm256_set1_ps(inv_sqrt(n));
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n.
        unsafe { _mm256_storeu_ps(p.add(i), _mm256_mul_ps(_mm256_loadu_ps(p.add(i)), s)) };
    }
}
