//! Reference kernels: plain Rust, the specification every SIMD kernel is tested against.

pub mod act;
pub mod attn;
pub mod binary;
pub mod float;
pub mod hadamard;
pub mod kv;
pub mod kv_b1_xnor;
pub mod kv_int8;
pub mod kv_q4_wsum;
pub mod q8q8;
pub mod requant;
pub mod rope;
pub mod ternary;
