//! Reference kernels: plain Rust, the specification every SIMD kernel is tested against, and
//! the kernels a target without SIMD ones runs. One file per op family, under the names the
//! SIMD trees use (`x86_64/avx2/`, `x86_64/avx512/`, and any set added later), so the
//! reference of `x86_64/avx2/qrows.rs` is `qrows.rs` here.
//!
//! `crate::ops` binds every op to its reference here (the `Scalar` level, the bottom one
//! every SIMD level lowers to for the ops it has no kernel for). No SIMD tree imports this
//! one. Definitions both a reference and a SIMD kernel need (the f16 conversions, the
//! rounding of one activation, the Q4_0 weight step, one B1 row's XNOR score, the chunked
//! path of quantized rows, ...) live below both, in `crate::layout` and `crate::shared`.

pub mod act;
pub mod attn;
pub mod attn_group;
pub mod binary;
pub mod float;
pub(crate) mod fma;
pub mod hadamard;
pub mod kv;
pub mod kv_b1_xnor;
pub mod kv_int8;
pub mod kv_q4_wsum;
pub mod q4q8;
pub mod q4r;
pub mod q6k_q8k;
pub mod q6kr;
pub mod q8q8;
pub mod q8r;
pub mod qrows;
pub mod requant;
pub mod rope;
pub mod ternary;
