//! Reference kernels: plain Rust, the specification every SIMD kernel is tested against, and
//! the kernels a target without SIMD ones runs. One file per op family, under the names the
//! SIMD trees use (`x86_64/avx2/`, `x86_64/avx512/`, and any set added later), so the
//! reference of `x86_64/avx2/qrows.rs` is `qrows.rs` here.
//!
//! Only the safe API modules call into this tree (when the kernel set is scalar, or a SIMD
//! token declines an input); no SIMD tree does. Definitions both a reference and a SIMD kernel
//! need (the f16 conversions, the rounding of one activation, the Q4_0 weight step, one B1
//! row's XNOR score, the chunked path of quantized rows, ...) live in the API modules
//! (`crate::act`, `crate::float` and its submodules), and this tree imports them from there.

pub mod act;
pub mod attn;
pub mod attn_group;
pub mod binary;
pub mod float;
pub mod hadamard;
pub mod kv;
pub mod kv_b1_xnor;
pub mod kv_int8;
pub mod kv_q4_wsum;
pub mod q8q8;
pub mod qrows;
pub mod requant;
pub mod rope;
pub mod ternary;
