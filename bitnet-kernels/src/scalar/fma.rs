//! The fused multiply-add of the scalar references, `a * b + c` rounded once (IEEE 754
//! fusedMultiplyAdd), which the SIMD kernels' FMA instructions compute and must match bit
//! for bit.
//!
//! Without the `fma` target feature `f32::mul_add` is a call to the C library's `fmaf`.
//! glibc's, macOS's and Microsoft's UCRT's are correctly rounded; MinGW-w64's (the
//! `x86_64-pc-windows-gnu` target's C runtime) is not: it adds in `f64` and rounds again to
//! `f32`, one unit in the last place off now and then. On that target the sum is rounded
//! here, in safe Rust, and everywhere else `mul_add` is used as it is.

/// `a * b + c` rounded once to the nearest `f32` (ties to even).
#[inline]
pub(crate) fn mul_add(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(not(all(windows, target_env = "gnu")))]
    {
        a.mul_add(b, c)
    }
    #[cfg(all(windows, target_env = "gnu"))]
    {
        mul_add_exact(a, b, c)
    }
}

/// `a * b + c` correctly rounded without `fmaf`. The product of two `f32` is exact in `f64`
/// (24 + 24 significant bits of 53); the sum is rounded to `f64` *to odd* (TwoSum gives its
/// exact error, and an inexact even result moves one unit toward the exact value), and a
/// sum rounded to odd with at least 2 * 24 + 2 bits rounds to `f32` as the exact sum would
/// (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums", 2008).
#[cfg_attr(not(all(windows, target_env = "gnu")), allow(dead_code))]
fn mul_add_exact(a: f32, b: f32, c: f32) -> f32 {
    let p = f64::from(a) * f64::from(b);
    let c = f64::from(c);
    let mut s = p + c;
    if s.is_finite() {
        let back = s - p;
        let err = (p - (s - back)) + (c - back);
        let bits = s.to_bits();
        if err != 0.0 && bits & 1 == 0 {
            // Sign and magnitude: one more in the bits is one unit further from zero.
            let away_from_zero = (err > 0.0) == (s > 0.0);
            s = f64::from_bits(if away_from_zero { bits + 1 } else { bits - 1 });
        }
    }
    s as f32
}

// Against the C library's fmaf, which is the thing not to trust on windows-gnu.
#[cfg(all(test, not(all(windows, target_env = "gnu"))))]
mod tests {
    use super::mul_add_exact;

    #[test]
    fn the_exact_sum_matches_a_correctly_rounded_fma() {
        // Random operands over the magnitudes the kernels see, then a product that lies
        // just beside an f32 rounding boundary.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            f32::from_bits((x as u32 & 0x807f_ffff) | (((x >> 40) as u32 % 40 + 107) << 23))
        };
        for _ in 0..200_000 {
            let (a, b, c) = (next(), next(), next());
            assert_eq!(
                mul_add_exact(a, b, c).to_bits(),
                a.mul_add(b, c).to_bits(),
                "{a:e} * {b:e} + {c:e}"
            );
        }
        // a * b is a hair above 2^-24, so 1 + a * b lies a hair above the tie between 1 and
        // the next f32: rounded once it goes up; rounded to f64 first it lands on the tie,
        // which rounds to even, 1.0 (MinGW-w64's answer).
        let (a, b) = (f32::from_bits(1_066_400_455), f32::from_bits(862_164_602));
        let naive = (f64::from(a) * f64::from(b) + 1.0) as f32;
        assert_eq!(naive, 1.0);
        assert_eq!(mul_add_exact(a, b, 1.0), 1.0 + f32::EPSILON);
        assert_eq!(a.mul_add(b, 1.0), 1.0 + f32::EPSILON);
    }
}
