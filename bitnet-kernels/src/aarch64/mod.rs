//! AArch64 kernels, one tree per feature level with the file names of `scalar/`:
//!
//! - `neon/`: every op on the ARMv8-A baseline (Advanced SIMD is mandatory on AArch64);
//! - `dotprod/`: the integer products rewritten around `SDOT` (ARMv8.2 FEAT_DotProd);
//! - `i8mm/`: the multi-token integer products rewritten around `SMMLA` (ARMv8.6 FEAT_I8MM).
//!
//! Each tree's `mod.rs` holds its proof token ([`neon::Neon`], [`dotprod::Dotprod`],
//! [`i8mm::I8mm`]), built only after the features were detected
//! (`std::arch::is_aarch64_feature_detected!`). Each implements `crate::ops::Kernels`: the
//! NEON level has a kernel for every op (`crate::token_entries` plus its own), the higher
//! levels write only what their instructions speed up, and every other op falls to the level
//! below (`Dotprod` on `Neon`, `I8mm` on `Dotprod`). No tree imports another tree's files.
//!
//! What several trees share lives here: `asm.rs`, the instructions Rust's `std::arch` offers
//! no stable intrinsic for (`SDOT`, `SMMLA`, the f16 conversions `FCVTL`/`FCVTN`), each a
//! one-instruction `asm!` wrapper; `half.rs`, f16 reads (block scales, 8-lane widening);
//! `exp.rs`, the vectorized `exp` of softmax and SiLU; `rows.rs`, the row and token walk of
//! the float and Q8_0 x Q8_0 products; `int_dot.rs`, the integer dot step as a type
//! (`SMULL`/`SADALP` for NEON, `SDOT` for dotprod), and `int_walk/`, the integer products
//! (`binary`, `kv_int8`, `q8q8`) written once over that step, which the NEON and dotprod
//! trees instantiate from their `#[target_feature]` entries, as llama.cpp swaps
//! `ggml_vdotq_s32` under one NEON loop.

pub mod dotprod;
pub mod i8mm;
pub mod neon;

mod asm;
mod exp;
mod half;
mod int_dot;
mod int_walk;
mod rows;
