//! The orthonormal fast Walsh-Hadamard transform, applied to rows of a power-of-two length:
//! the rotation the KV cache may apply to keys and values before a low-bit format encodes
//! them (as llama.cpp and ik_llama.cpp do). `H / sqrt(d)` is symmetric and orthogonal, so it
//! is its own inverse and preserves dot products: a rotated query scores rotated keys as
//! the plain query scores the plain keys, and rotating a weighted sum of rotated values
//! gives back the plain sum. Spreading each row's energy over all its coordinates evens out
//! the outliers that a per-block scale otherwise has to cover.

use crate::float::runnable;
use crate::isa::Isa;
use crate::scalar::hadamard as scalar;

/// Whether rows of `d` values can be rotated (`d` a power of two).
pub fn hadamard_supported(d: usize) -> bool {
    d.is_power_of_two()
}

/// Applies `H / sqrt(d)` to each row of `d` values of `x` in place. Every kernel set gives
/// the scalar reference's bits.
///
/// # Panics
/// If `d` is not a power of two or `x.len()` not a multiple of `d`.
pub fn hadamard_rows(isa: Isa, d: usize, x: &mut [f32]) {
    assert!(
        hadamard_supported(d),
        "hadamard_rows: the row length {d} is not a power of two"
    );
    assert!(
        x.len().is_multiple_of(d),
        "hadamard_rows: {} values are not rows of {d}",
        x.len()
    );
    #[cfg(target_arch = "x86_64")]
    if d >= 8 && runnable(isa) != Isa::Scalar {
        for row in x.chunks_exact_mut(d) {
            // SAFETY: runnable() returns a SIMD set only after detecting AVX2 and FMA (the
            // AVX-512 set includes them); d is a power of two >= 8.
            unsafe { super::hadamard_x86::fwht(row) };
        }
        return;
    }
    let _ = isa;
    x.chunks_exact_mut(d).for_each(scalar::fwht);
}
