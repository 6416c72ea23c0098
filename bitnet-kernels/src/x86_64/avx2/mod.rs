//! AVX2 + FMA kernels.

pub mod float;
