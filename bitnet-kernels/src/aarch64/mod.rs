//! AArch64 kernels, one tree per feature level with the file names of `scalar/`:
//!
//! - `neon/`: every op on the ARMv8-A baseline (Advanced SIMD is mandatory on AArch64);
//! - `dotprod/`: the integer products rewritten around `SDOT` (ARMv8.2 FEAT_DotProd);
//! - `i8mm/`: the multi-token integer products rewritten around `SMMLA` (ARMv8.6 FEAT_I8MM).
//!
//! Each tree's `mod.rs` holds its proof token ([`neon::Neon`], [`dotprod::Dotprod`],
//! [`i8mm::I8mm`]), built only after the features were detected
//! (`std::arch::is_aarch64_feature_detected!`). The NEON token has every method
//! (`crate::token_entries` plus its own); the higher levels implement what their instructions
//! speed up and forward the rest, at the token level, to the level below (their `reuse_*!`
//! lists). No tree imports another tree's files.
//!
//! What several trees share lives here: `asm.rs`, the instructions Rust's `std::arch` offers
//! no stable intrinsic for (`SDOT`, `SMMLA`, the f16 conversions `FCVTL`/`FCVTN`), each a
//! one-instruction `asm!` wrapper; `half.rs`, f16 reads (block scales, 8-lane widening);
//! `exp.rs`, the vectorized `exp` of softmax and SiLU; `rows.rs`, the row and token walk of
//! the float and Q8_0 x Q8_0 products.

pub mod dotprod;
pub mod i8mm;
pub mod neon;

mod asm;
mod exp;
mod half;
mod int_dot;
mod int_walk;
mod rows;

/// Asks for the `n` cache lines of `bytes` from `at` on (those that exist) to be fetched.
#[inline(always)]
pub(crate) fn prefetch_lines(bytes: &[u8], at: usize, n: usize) {
    for k in 0..n {
        if let Some(p) = bytes.get(at + 64 * k) {
            // SAFETY: `PRFM` is a hint: it reads nothing into the program and cannot fault;
            // it is in the AArch64 base ISA; the address is inside `bytes`.
            unsafe {
                std::arch::asm!(
                    "prfm pldl1keep, [{0}]",
                    in(reg) std::ptr::from_ref(p),
                    options(nostack, readonly, preserves_flags)
                )
            };
        }
    }
}
