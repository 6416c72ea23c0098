//! x86-64 kernels, one tree per instruction set with the same file names in each
//! (`avx2/`, `avx512/`, and `avxvnni/` with only the ops `vpdpbusd` speeds up), mirroring
//! `scalar/`.
//!
//! Each tree's `mod.rs` holds its proof token ([`avx2::Avx2`], [`avxvnni::AvxVnni`],
//! [`avx512::Avx512`]): a value that can only be built after the CPU features were detected,
//! whose `Kernels` methods are therefore safe; they are the one place the tree's
//! `#[target_feature]` kernels are called from. `crate::dispatch` turns an `Isa` into one of
//! them.
//!
//! What the trees share lives here, not in any one tree (the bodies of the ops both full
//! trees have are written once, `crate::token_entries`): `rows.rs` (the row and token walks of
//! the float kernels, which do not depend on the lane width, and each tree's glue), `exp.rs`
//! (the constants of the vectorized `exp`), `f16c.rs` (F16C reads of block scales), `q6k.rs`
//! (the Q6_K code unpacking), `tile_plan.rs` (how the AVX2 and AVX-VNNI register tiles cut a
//! ternary product), `q8_tiles.rs` (the batched Q8_0 head's walk), `q4_tiles.rs` (the
//! Q4_0 x Q8_0 head's kernels, written once over each set's integer core) and `hsum.rs` (the lane sums
//! of 256-bit vectors). No tree imports another's files: portable definitions that every set
//! needs (the int8 rounding of one value, the f16 conversions, the chunked path of Q4_0 rows,
//! ...) are below all of them, in `crate::layout` and `crate::shared`. The one link between
//! the trees is at the level of tokens: `Avx512` and `AvxVnni` name [`avx2::Avx2`] as their
//! level below, so every op without a kernel of their own (and AVX-512's 1-bit XNOR without
//! VPOPCNTDQ) runs AVX2's.

pub mod avx2;
pub mod avx512;
pub mod avxvnni;
mod exp;
mod f16c;
mod hsum;
mod q4_tiles;
mod q6k;
mod q6kr;
mod q8_tiles;
mod rows;
mod stream;
#[cfg(test)]
mod stream_tests;
mod tile_plan;
