//! x86-64 kernels, one tree per instruction set with the same file names in each
//! (`avx2/`, `avx512/`), mirroring `crate::scalar`.
//!
//! Each tree's `mod.rs` holds its proof token ([`avx2::Avx2`], [`avx512::Avx512`]): a value
//! that can only be built after the CPU features were detected, whose methods are therefore
//! safe; they are the one place the tree's `#[target_feature]` kernels are called from.
//! `crate::dispatch` turns an `Isa` into one of them ([`token`]).
//!
//! What the two trees share lives here, not in either tree: `entries.rs` (the token methods
//! both have, one list), `rows.rs` (the row and token walks of the float kernels, which do
//! not depend on the lane width, and each tree's glue to them) and `exp.rs` (the constants
//! of the vectorized `exp`). The AVX-512 tree reuses AVX2 code only where it says so: the
//! ops of `avx512/mod.rs`' `reuse_avx2!` list (and its 1-bit XNOR without VPOPCNTDQ), and
//! the helpers named in the imports of `avx512/qrows.rs` and `avx512/q8q8.rs`; the AVX2
//! tree never uses AVX-512 code.

pub mod avx2;
pub mod avx512;
mod entries;
mod exp;
mod rows;

pub use crate::dispatch::{Simd, token};

/// Asks for the `n` cache lines of `bytes` from `at` on (those that exist) to be fetched: a
/// hint for loops whose source the hardware prefetchers lose (at 4 KiB page boundaries).
#[inline(always)]
pub(crate) fn prefetch_lines(bytes: &[u8], at: usize, n: usize) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    for k in 0..n {
        if let Some(p) = bytes.get(at + 64 * k) {
            // SAFETY: prefetching reads nothing into the program and cannot fault; SSE is
            // part of the x86-64 baseline; the address is inside `bytes`.
            unsafe { _mm_prefetch::<{ _MM_HINT_T0 }>(std::ptr::from_ref(p).cast()) };
        }
    }
}
