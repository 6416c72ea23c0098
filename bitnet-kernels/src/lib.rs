//! bitnet-kernels: the hot loops of the runtime, and nothing else.
//!
//! A leaf crate: it knows nothing of GGUF files or models. The code is laid out by
//! instruction set, with the same file names under each:
//!
//! ```text
//! src/{act,ternary,binary,formats,probe}.rs   the safe API by op family: each function
//! src/float.rs, src/float/*.rs                checks shapes, then dispatches (no SIMD here)
//! src/isa.rs        the kernel sets, CPU detection, BITNET_KERNEL
//! src/dispatch.rs   Isa -> proof token, detected once: the one dispatch mechanism (public)
//! src/scalar/       the reference kernel of every op: the specification
//! src/x86_64/avx2/     AVX2 kernels and the Avx2 token, one file per op family
//! src/x86_64/avx512/   AVX-512 kernels and the Avx512 token, the same file names
//! src/x86_64/{rows,exp,f16c,q6k}.rs   what the two x86 sets share
//! src/aarch64/neon/    NEON kernels of every op and the Neon token
//! src/aarch64/dotprod/ SDOT integer products and the Dotprod token (the rest: NEON's)
//! src/aarch64/i8mm/    SMMLA multi-token products and the I8mm token (the rest: dotprod's)
//! src/aarch64/*.rs     what the ARM sets share (asm.rs: SDOT, SMMLA, f16 conversions)
//! src/token_entries.rs the token methods every full set has (Avx2, Avx512, Neon)
//! ```
//!
//! Op families and their files (in `scalar/`, `x86_64/avx2/`, `aarch64/neon/`, ...): `act`,
//! `ternary`, `binary`, `float` (dense float), `qrows` (quantized rows), `q8q8`, `rope`,
//! `attn`, `attn_group` (grouped-query attention over f16), `kv`, `kv_int8`, `kv_q4_wsum`,
//! `kv_b1_xnor`, `hadamard`, `requant`. The AVX-512 tree has no KV, Hadamard or requant
//! files yet: its token forwards those ops to the `Avx2` token (`x86_64/avx512/mod.rs`).
//!
//! **No tree imports another.** `scalar/` is called only by the API modules, as the
//! reference; an ISA tree never calls it, and never imports another ISA tree's files. What
//! several trees need lives above them: portable definitions every set must agree on (the
//! rounding of one activation in [`act`], the f16 conversions and the chunked path of
//! quantized rows in [`float`], KV format details in [`float::kv`]) in the API modules;
//! helpers an architecture's sets share, with their `#[target_feature]`, in `x86_64/` and
//! `aarch64/`. Sets are linked only at the token level (AVX-512's forwarding list, and the
//! ARM levels' `reuse_neon!` / `reuse_dotprod!`).
//!
//! **Dispatch.** Every API function takes an [`Isa`]; [`dispatch::token`] turns it into a
//! proof token of the best set at most that capable which this CPU runs (so a wrong `Isa`
//! costs speed, never soundness), or `None` for the scalar reference. A token can only be
//! built after its CPU features were detected, so its methods are safe; they are the only
//! code that calls `#[target_feature]` kernels, and every `unsafe` block they hold says why
//! it is sound. A method may decline an input its kernels cannot take (it returns `false`)
//! and the API takes the reference path. Hot loops stay inside the `#[target_feature]`
//! functions, so intrinsics inline.
//!
//! **Adding an instruction set** (say SVE2 in `src/aarch64/sve2/`): an [`Isa`] variant and
//! its feature check (`src/isa.rs`); its kernels under the file and function names of
//! `scalar/`, importing only the API modules and its own architecture's shared helpers
//! (`src/aarch64/*.rs`); a token type, built only after detection, with the methods
//! [`dispatch::Simd`] forwards (`token_entries!` plus `Neon`'s own are the full list; an op
//! with no kernel yet can forward to another set's token, as `Dotprod` forwards to `Neon`,
//! or decline where its method returns `bool`); then a
//! `Simd` variant, its arm in the `forward!` list and in `dispatch::token`. The tests check
//! every set this CPU runs against the scalar kernels.
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
mod prefetch;
pub mod probe;
pub mod scalar;
mod shared;
pub mod ternary;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod token_entries;
#[cfg(target_arch = "x86_64")]
pub mod x86_64;

pub use act::{ActScale, quantize_act, quantize_act_binary};
pub use aligned::AlignedVec;
pub use binary::{BinaryActs, BinaryMatrix, binary_binary_matvec, binary_matmul, binary_matvec};
pub use error::KernelError;
pub use layout::files as formats;
pub use layout::files::{pack_i2s, pack_q1, pack_tq1_0, pack_tq2_0};
pub use isa::Isa;
pub use ternary::{MATMUL_CALL_ROWS, TernaryMatrix, TernarySource, ternary_matmul, ternary_matvec};
