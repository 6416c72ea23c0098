//! The orthonormal fast Walsh-Hadamard transform, applied to rows of a power-of-two length:
//! the rotation the KV cache may apply to keys and values before a low-bit format encodes
//! them (as llama.cpp and ik_llama.cpp do). `H / sqrt(d)` is symmetric and orthogonal, so it
//! is its own inverse and preserves dot products: a rotated query scores rotated keys as
//! the plain query scores the plain keys, and rotating a weighted sum of rotated values
//! gives back the plain sum. Spreading each row's energy over all its coordinates evens out
//! the outliers that a per-block scale otherwise has to cover.

use crate::dispatch::kernels;
use crate::isa::Isa;
use crate::ops::Kernels;
use crate::shared::hadamard::check_rows;

pub use crate::shared::hadamard::hadamard_supported;

/// Applies `H / sqrt(d)` to each row of `d` values of `x` in place. Every kernel set gives
/// the scalar reference's bits.
///
/// # Panics
/// If `d` is not a power of two or `x.len()` not a multiple of `d`.
pub fn hadamard_rows(isa: Isa, d: usize, x: &mut [f32]) {
    check_rows(d, x);
    kernels(isa).hadamard_rows(d, x)
}
