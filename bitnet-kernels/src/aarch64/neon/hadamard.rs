//! NEON fast Walsh-Hadamard transform: spans 1 and 2 inside 4-lane vectors, two vectors at a
//! time (`UZP1`/`UZP2` pair the partners of span 1, the 64-bit halves those of span 2, and
//! `ZIP1`/`ZIP2` put the sums and differences back in place), the spans of 4 and more
//! between whole vectors. Each stage computes the same `a + b` / `a - b` of the same
//! operands as the scalar reference, in the same stage order, then the same one multiply by
//! `1 / sqrt(n)`, so the result is the reference's bit for bit.

use std::arch::aarch64::*;

use crate::shared::hadamard::inv_sqrt;

/// Spans 1 and 2 of the butterfly on the eight values of `v0`, `v1`.
#[inline]
#[target_feature(enable = "neon")]
fn butterflies_in_pair(v0: float32x4_t, v1: float32x4_t) -> (float32x4_t, float32x4_t) {
    // Span 1: the even lanes are the `a`s, the odd ones their `b`s.
    let (a, b) = (vuzp1q_f32(v0, v1), vuzp2q_f32(v0, v1));
    let (s, d) = (vaddq_f32(a, b), vsubq_f32(a, b));
    let (v0, v1) = (vzip1q_f32(s, d), vzip2q_f32(s, d));
    // Span 2: the low 64-bit half of each vector against its high half.
    let (v0, v1) = (vreinterpretq_f64_f32(v0), vreinterpretq_f64_f32(v1));
    let a = vreinterpretq_f32_f64(vzip1q_f64(v0, v1));
    let b = vreinterpretq_f32_f64(vzip2q_f64(v0, v1));
    let (s, d) = (
        vreinterpretq_f64_f32(vaddq_f32(a, b)),
        vreinterpretq_f64_f32(vsubq_f32(a, b)),
    );
    (
        vreinterpretq_f32_f64(vzip1q_f64(s, d)),
        vreinterpretq_f32_f64(vzip2q_f64(s, d)),
    )
}

/// The reference `fwht` (`scalar/hadamard.rs`) on one row of `x.len()` values (a power of
/// two, at least 8).
///
/// # Safety
/// The CPU must support NEON; `x.len()` a power of two >= 8.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn fwht(x: &mut [f32]) {
    let n = x.len();
    assert!(n.is_power_of_two() && n >= 8);
    let p = x.as_mut_ptr();
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n (n is a multiple of 8).
        unsafe {
            let (v0, v1) = butterflies_in_pair(vld1q_f32(p.add(i)), vld1q_f32(p.add(i + 4)));
            vst1q_f32(p.add(i), v0);
            vst1q_f32(p.add(i + 4), v1);
        }
    }
    let mut h = 4;
    while h < n {
        for i in (0..n).step_by(2 * h) {
            for j in (i..i + h).step_by(4) {
                // SAFETY: j + h + 4 <= i + 2h <= n.
                unsafe {
                    let a = vld1q_f32(p.add(j));
                    let b = vld1q_f32(p.add(j + h));
                    vst1q_f32(p.add(j), vaddq_f32(a, b));
                    vst1q_f32(p.add(j + h), vsubq_f32(a, b));
                }
            }
        }
        h *= 2;
    }
    let s = vdupq_n_f32(inv_sqrt(n));
    for i in (0..n).step_by(4) {
        // SAFETY: i + 4 <= n.
        unsafe { vst1q_f32(p.add(i), vmulq_f32(vld1q_f32(p.add(i)), s)) };
    }
}
