//! bitnet-kernels: the hot loops of the runtime, and nothing else.
//!
//! A leaf crate: it knows nothing of GGUF files or models. Every operation has a scalar
//! reference in [`scalar`] (that is the spec) and SIMD versions under `x86_64/` with the same
//! names; [`isa`] detects the CPU once and the safe APIs pick the kernels from it.
//!
//! Integer side: [`quantize_act`] (int8 activations), [`TernaryMatrix`] with
//! [`ternary_matvec`] / [`ternary_matmul`], [`BinaryMatrix`] with [`binary_matvec`],
//! [`binary_matmul`] and the XNOR-popcount [`binary_binary_matvec`].

// Index loops over lanes, tiles and block positions read more plainly than zipped iterators.
#![allow(clippy::needless_range_loop)]

pub mod act;
pub mod aligned;
pub mod binary;
mod dispatch;
pub mod error;
mod extent;
pub mod float;
pub mod formats;
pub mod isa;
pub mod probe;
pub mod scalar;
pub mod ternary;
#[cfg(target_arch = "x86_64")]
pub mod x86_64;

pub use act::{ActScale, quantize_act, quantize_act_binary};
pub use aligned::AlignedVec;
pub use binary::{BinaryActs, BinaryMatrix, binary_binary_matvec, binary_matmul, binary_matvec};
pub use error::KernelError;
pub use formats::{pack_i2s, pack_q1, pack_tq1_0, pack_tq2_0};
pub use isa::Isa;
pub use ternary::{TernaryMatrix, TernarySource, ternary_matmul, ternary_matvec};
