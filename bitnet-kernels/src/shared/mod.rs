//! Definitions every kernel set shares, below all of them (beside [`crate::layout`], which
//! holds the data layouts): the shapes the SIMD methods check before their kernels index raw
//! pointers, and the portable per-value steps (the rounding of one activation, the Hadamard
//! scale, the reference path of an F16 block holding an infinity) that make every set give
//! the reference's bits. Nothing here dispatches or imports a kernel tree.

pub(crate) mod act;
pub(crate) mod attn;
pub(crate) mod group_sums;
pub(crate) mod group_walk;
pub(crate) mod hadamard;
pub(crate) mod q8k;
pub(crate) mod q8r;
pub(crate) mod requant;
pub(crate) mod rope;
pub(crate) mod rows;
