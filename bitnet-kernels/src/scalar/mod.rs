//! Reference kernels: plain Rust, the specification every SIMD kernel is tested against.

pub mod float;
