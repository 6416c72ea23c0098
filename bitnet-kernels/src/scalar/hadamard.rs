//! Reference fast Walsh-Hadamard transform (the specification of the AVX2 kernel).

use crate::shared::hadamard::inv_sqrt;

/// The orthonormal Walsh-Hadamard transform of `x` in place: `x <- H x / sqrt(n)` with
/// `n = x.len()` a power of two. Butterfly stages of span 1, 2, 4, ... in that order, then
/// one multiply by `1 / sqrt(n)`; the AVX2 kernel performs the same additions in the same
/// order, so the two agree bit for bit.
pub fn fwht(x: &mut [f32]) {
    let n = x.len();
    debug_assert!(n.is_power_of_two(), "checked by the safe API");
    let mut h = 1;
    while h < n {
        for i in (0..n).step_by(2 * h) {
            for j in i..i + h {
                let (a, b) = (x[j], x[j + h]);
                x[j] = a + b;
                x[j + h] = a - b;
            }
        }
        h *= 2;
    }
    let s = inv_sqrt(n);
    for v in x {
        *v *= s;
    }
}

/// [`fwht`] on each row of `d` values of `x` (`d` a power of two, `x` whole rows: checked by
/// the safe API).
pub fn rows(d: usize, x: &mut [f32]) {
    x.chunks_exact_mut(d).for_each(fwht);
}
