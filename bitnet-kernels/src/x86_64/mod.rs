//! x86-64 kernels. Each submodule mirrors the names in `scalar/`.

pub mod avx2;
pub mod avx512;
