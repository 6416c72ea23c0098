//! bitnet-kernels: the hot loops of the runtime, and nothing else.
//!
//! A leaf crate: it knows nothing of GGUF files or models. The imports run one way, with no
//! circle: layouts -> kernels -> dispatch -> API.
//!
//! ```text
//! src/layout/       the data layouts every kernel set reads: repacked ternary (ternary.rs,
//!                   built by repack.rs) and 1-bit (binary.rs) matrices, weight rows
//!                   (rows.rs), the Q8_0, Q6_K and Q4_0 heads in 16-row groups (q8r.rs,
//!                   q6kr.rs, q4r.rs), KV rows (kv.rs),
//!                   f16/bf16 (half.rs), file formats (files.rs)
//! src/shared/       what every kernel set agrees on: shape checks, per-value definitions
//! src/ops.rs        the one declaration of the operations: the Kernels trait and Scalar
//! src/scalar/       the reference kernel of every op: the specification
//! src/x86_64/avx2/     AVX2 kernels and the Avx2 level, one file per op family
//! src/x86_64/avxvnni/  the products VPDPBUSD speeds up, and the AvxVnni level
//! src/x86_64/avx512/   AVX-512 kernels and the Avx512 level, the same file names
//! src/x86_64/*.rs      what the x86 sets share
//! src/aarch64/neon/    NEON kernels of every op and the Neon level
//! src/aarch64/dotprod/ SDOT integer products and the Dotprod level
//! src/aarch64/i8mm/    SMMLA multi-token products and the I8mm level
//! src/aarch64/*.rs     what the ARM sets share (asm.rs: SDOT, SMMLA, f16 conversions)
//! src/token_entries.rs the bodies of the ops every full tree has (Avx2, Avx512, Neon)
//! src/isa.rs        the kernel sets, CPU detection, BITNET_KERNEL
//! src/dispatch.rs   Isa -> Level, detected once: the one dispatch mechanism (public)
//! src/{act,ternary,binary,probe}.rs, src/float.rs, src/float/*.rs
//!                   the safe API by op family: check shapes, then one call
//! ```
//!
//! Op families and their files (in `scalar/`, `x86_64/avx2/`, `aarch64/neon/`, ...): `act`,
//! `ternary`, `binary`, `float` (dense float), `qrows` (quantized rows), `q8q8`, `q8r`, `q6kr`,
//! `q4r` (the grouped Q8_0, Q6_K and Q4_0 heads), `rope`,
//! `attn`, `attn_group` (grouped-query attention over f16), `kv`, `kv_int8`, `kv_q4_wsum`,
//! `kv_b1_xnor`, `hadamard`, `requant`.
//!
//! **Levels.** [`ops::Kernels`] is the trait of a kernel level; each level names the one
//! below it and runs that level's kernel for every op it does not speed up. [`ops::Scalar`]
//! is the bottom: it binds every op to its reference in `scalar/`. `Avx2` and `Neon` sit on
//! `Scalar`; `AvxVnni` and `Avx512` on `Avx2` (AVX-512 CPUs such as Zen 4 lack AVX-VNNI);
//! `Dotprod` on `Neon`, `I8mm` on `Dotprod`. No tree imports another tree's files: levels
//! are linked only through `Kernels::lower`.
//!
//! **Dispatch.** Every API function takes an [`Isa`]; [`dispatch::kernels`] turns it into a
//! [`dispatch::Level`], the best level at most that capable which this CPU runs (so a wrong
//! `Isa` costs speed, never soundness), and the API makes one call on it:
//! `kernels(isa).absmax(x)`. A SIMD level's value is a proof token, built only after its
//! CPU features were detected, so its methods are safe; they are the only code that calls
//! `#[target_feature]` kernels, and every `unsafe` block they hold says why it is sound. An
//! op returning `bool` may decline an input its kernel cannot take (`false`) and the API
//! takes another path. Hot loops stay inside the `#[target_feature]` functions, so
//! intrinsics inline; dispatch is one `match` per call.
//!
//! **Adding an op** touches three places: its reference kernel in `scalar/` (with the op's
//! argument list), one line in `for_each_op!` (`src/ops.rs`), and the levels that speed it
//! up. Say a fused `rmsnorm_mul`:
//!
//! ```text
//! // src/scalar/float.rs
//! pub fn rmsnorm_mul(x: &[f32], weight: &[f32], eps: f32, up: &[f32], out: &mut [f32]) { ... }
//!
//! // src/ops.rs, in for_each_op!
//! fn rmsnorm_mul(self, x: &[f32], weight: &[f32], eps: f32, up: &[f32], out: &mut [f32]) => float::rmsnorm_mul;
//!
//! // src/x86_64/avx2/mod.rs, in `impl Kernels for Avx2` (the kernel in avx2/float.rs)
//! fn rmsnorm_mul(self, x: &[f32], weight: &[f32], eps: f32, up: &[f32], out: &mut [f32]) {
//!     // SAFETY: `self` proves the target features; the kernel checks the shapes.
//!     unsafe { float::rmsnorm_mul(x, weight, eps, up, out) }
//! }
//! ```
//!
//! The API function then calls `kernels(isa).rmsnorm_mul(...)`. Every other level runs the
//! op of the level below (AVX-VNNI and AVX-512 get AVX2's, NEON the reference) until it gets
//! a kernel of its own; the tests compare each set against the reference.
//!
//! **Adding an instruction set** (say SVE2 in `src/aarch64/sve2/`): an [`Isa`] variant and
//! its feature check (`src/isa.rs`); its kernels under the file and function names of
//! `scalar/`, importing only `layout/`, `shared/` and its own architecture's helpers
//! (`src/aarch64/*.rs`); a token type, built only after detection, implementing
//! [`ops::Kernels`] with the level below it as `Lower` and the ops it speeds up; then a
//! [`dispatch::Level`] variant and its arms in `dispatch.rs` (`kernels` and `impl_level!`).
//! The tests check every set this CPU runs against the scalar kernels.
//!
//! Integer side: [`quantize_act`] (int8 activations), [`TernaryMatrix`] with
//! [`ternary_matvec`] / [`ternary_matmul`], [`BinaryMatrix`] with [`binary_matvec`],
//! [`binary_matmul`] and the XNOR-popcount [`binary_binary_matvec`]. Float side: [`float`].

// Index loops over lanes, tiles and block positions read more plainly than zipped iterators.
#![allow(clippy::needless_range_loop)]

#[cfg(target_arch = "aarch64")]
pub mod aarch64;
pub mod act;
pub mod aligned;
pub mod binary;
pub mod dispatch;
pub mod error;
mod extent;
pub mod float;
pub mod isa;
pub mod layout;
pub mod ops;
pub mod prefetch;
pub mod probe;
pub mod scalar;
mod shared;
pub mod ternary;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod token_entries;
#[cfg(target_arch = "x86_64")]
pub mod x86_64;

pub use act::{ActScale, quantize_act, quantize_act_binary, quantize_act_int4};
pub use aligned::AlignedVec;
pub use binary::{BinaryActs, BinaryMatrix, binary_binary_matvec, binary_matmul, binary_matvec};
pub use error::KernelError;
pub use isa::Isa;
pub use layout::files as formats;
pub use layout::files::{pack_i2s, pack_q1, pack_tq1_0, pack_tq2_0};
pub use ternary::{MATMUL_CALL_ROWS, TernaryMatrix, TernarySource, ternary_matmul, ternary_matvec};
