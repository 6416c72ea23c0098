//! bitnet-kernels: the hot loops of the runtime, and nothing else.
//!
//! A leaf crate: it knows nothing of GGUF files or models. Every operation has a scalar
//! reference in [`scalar`] (that is the spec) and SIMD versions under `x86_64/` with the same
//! names; [`isa`] detects the CPU once and the safe APIs pick the kernels from it.

pub mod error;
pub mod float;
pub mod isa;
pub mod scalar;
#[cfg(target_arch = "x86_64")]
pub mod x86_64;

pub use error::KernelError;
pub use isa::Isa;
