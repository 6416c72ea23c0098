//! AVX-512 kernels.

pub mod float;
