//! Reference kernels: plain Rust, the specification every SIMD kernel is tested against.

pub mod act;
pub mod binary;
pub mod float;
pub mod hadamard;
pub mod kv;
pub mod ternary;
