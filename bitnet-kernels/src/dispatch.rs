//! The one place a kernel set named by an [`Isa`] becomes kernels, and the public home of
//! that mechanism: [`token`] and [`Simd`] (tests and benches call one set's methods through
//! them; the rest of the workspace uses the safe API modules).
//!
//! [`token`] turns an `Isa` into a proof token: a value that can only be built once the CPU
//! features of its set were detected (once per process, each behind a `OnceLock`), so its
//! methods are safe. A set this CPU cannot run is lowered to the best one it can (AVX-512 to
//! AVX-VNNI to AVX2, I8MM to dotprod to NEON, any to scalar): a wrong `Isa` argument costs speed, never
//! soundness. `None` means
//! the scalar reference kernels (`crate::scalar`).
//!
//! The safe API modules (`crate::act`, `crate::ternary`, `crate::float`, ...) check shapes,
//! then call `token(isa)` and the op's method on [`Simd`], which forwards to the token of the
//! detected set; only those token methods call `#[target_feature]` code. A method returning
//! `bool` may decline an input it has no kernel for (`false`, nothing written): the API then
//! takes another path, the set's one-head kernels for a GQA group size without a group
//! kernel, the scalar reference for rows too far apart for a kernel's gathers. No SIMD tree
//! calls `crate::scalar`.
//!
//! Adding an instruction set is a variant of [`Simd`] holding its token type (with the same
//! method names), cfg-gated to its architecture, an arm in [`token`], and the set's arm in
//! `forward!` below.

use std::ops::Range;

#[cfg(target_arch = "aarch64")]
use crate::aarch64::{dotprod::Dotprod, i8mm::I8mm, neon::Neon};
use crate::binary::BinaryMatrix;
use crate::float::RowFormat;
use crate::float::kv::KvQuant;
use crate::isa::Isa;
use crate::ternary::TernaryMatrix;
#[cfg(target_arch = "x86_64")]
use crate::x86_64::{avx2::Avx2, avx512::Avx512, avxvnni::AvxVnni};

/// A SIMD kernel set this CPU runs, holding the proof token of that set. On a target with no
/// SIMD kernels it has no values, and [`token`] always gives `None`.
#[derive(Copy, Clone, Debug)]
pub enum Simd {
    #[cfg(target_arch = "x86_64")]
    Avx2(Avx2),
    #[cfg(target_arch = "x86_64")]
    AvxVnni(AvxVnni),
    #[cfg(target_arch = "x86_64")]
    Avx512(Avx512),
    #[cfg(target_arch = "aarch64")]
    Neon(Neon),
    #[cfg(target_arch = "aarch64")]
    Dotprod(Dotprod),
    #[cfg(target_arch = "aarch64")]
    I8mm(I8mm),
}

/// The SIMD set to run for `isa`: the set itself if this CPU runs it, else the best set below
/// it that it runs; `None` for scalar (asked for, or all this CPU has).
#[inline]
pub fn token(isa: Isa) -> Option<Simd> {
    match isa {
        Isa::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => Avx2::new().map(Simd::Avx2),
        #[cfg(target_arch = "x86_64")]
        Isa::AvxVnni => AvxVnni::new()
            .map(Simd::AvxVnni)
            .or_else(|| Avx2::new().map(Simd::Avx2)),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => Avx512::new()
            .map(Simd::Avx512)
            .or_else(|| AvxVnni::new().map(Simd::AvxVnni))
            .or_else(|| Avx2::new().map(Simd::Avx2)),
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 => None,
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => Neon::new().map(Simd::Neon),
        #[cfg(target_arch = "aarch64")]
        Isa::Dotprod => Dotprod::new()
            .map(Simd::Dotprod)
            .or_else(|| Neon::new().map(Simd::Neon)),
        #[cfg(target_arch = "aarch64")]
        Isa::I8mm => I8mm::new()
            .map(Simd::I8mm)
            .or_else(|| Dotprod::new().map(Simd::Dotprod))
            .or_else(|| Neon::new().map(Simd::Neon)),
        #[cfg(not(target_arch = "aarch64"))]
        Isa::Neon | Isa::Dotprod | Isa::I8mm => None,
    }
}

/// Methods of [`Simd`] that call the method of the same name on the token it holds.
macro_rules! forward {
    ($( fn $name:ident(self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?; )*) => {
        impl Simd {
            $(
                #[inline]
                #[allow(clippy::too_many_arguments)]
                #[cfg_attr(
                    not(any(target_arch = "x86_64", target_arch = "aarch64")),
                    allow(unused_variables)
                )]
                pub fn $name(self $(, $arg: $ty)*) $(-> $ret)? {
                    match self {
                        #[cfg(target_arch = "x86_64")]
                        Simd::Avx2(k) => k.$name($($arg),*),
                        #[cfg(target_arch = "x86_64")]
                        Simd::AvxVnni(k) => k.$name($($arg),*),
                        #[cfg(target_arch = "x86_64")]
                        Simd::Avx512(k) => k.$name($($arg),*),
                        #[cfg(target_arch = "aarch64")]
                        Simd::Neon(k) => k.$name($($arg),*),
                        #[cfg(target_arch = "aarch64")]
                        Simd::Dotprod(k) => k.$name($($arg),*),
                        #[cfg(target_arch = "aarch64")]
                        Simd::I8mm(k) => k.$name($($arg),*),
                    }
                }
            )*
        }
    };
}

forward! {
    // Activations (`crate::act`, `crate::probe`).
    fn absmax(self, x: &[f32]) -> f32;
    fn quantize_i8(self, x: &[f32], scale: f32, q: &mut [i8]) -> i32;
    fn sign_bits(self, x: &[f32], bits: &mut [u64]);
    fn sum_bytes(self, data: &[u8]) -> u64;
    // Ternary and 1-bit products (`crate::ternary`, `crate::binary`).
    fn ternary_raw_dots(self, w: &TernaryMatrix, q: &[i8], rows: Range<usize>, blocks: Range<usize>, out: &mut [i32]);
    fn ternary_raw_dots_multi(self, w: &TernaryMatrix, q: &[i8], n_tok: usize, rows: Range<usize>, blocks: Range<usize>, out: &mut [i32]);
    fn binary_raw_dots_multi(self, w: &BinaryMatrix, q: &[i8], n_tok: usize, rows: Range<usize>, words: Range<usize>, out: &mut [i32]);
    fn binary_xor_popcounts(self, w: &BinaryMatrix, x: &[u64], rows: Range<usize>, words: Range<usize>, out: &mut [i32]);
    // Dense float (`crate::float`).
    fn f16_to_f32_slice(self, src: &[u16], dst: &mut [f32]);
    fn f32_to_f16_slice(self, src: &[f32], dst: &mut [u16]);
    fn dot_f32(self, a: &[f32], b: &[f32]) -> f32;
    fn matmul_f32(self, fmt: RowFormat, data: &[u8], row_len: usize, x: &[f32], n_tok: usize, rows: Range<usize>, out: &mut [f32]);
    fn matmul_q8_0_q8_0(self, w: &[u8], row_len: usize, xq: &[u8], n_tok: usize, rows: Range<usize>, out: &mut [f32]);
    fn rmsnorm(self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]);
    fn softmax_inplace(self, x: &mut [f32]) -> (f32, f32);
    fn silu(self, x: &mut [f32]);
    fn silu_mul(self, gate: &mut [f32], up: &[f32]);
    fn relu2(self, x: &mut [f32]);
    fn relu2_mul(self, gate: &mut [f32], up: &[f32]);
    fn add_inplace(self, dst: &mut [f32], src: &[f32]);
    fn mul_inplace(self, dst: &mut [f32], src: &[f32]);
    fn scale_inplace(self, x: &mut [f32], s: f32);
    // RoPE (`crate::float::RopeTable`).
    fn rope_neox(self, x: &mut [f32], head_dim: usize, n_heads: usize, rope_dim: usize, cos: &[f32], sin: &[f32]);
    fn rope_normal(self, x: &mut [f32], head_dim: usize, n_heads: usize, rope_dim: usize, cos: &[f32], sin: &[f32]);
    // Attention over an f16, f32 or Q8_0 cache (`crate::float`'s `attn_*`).
    fn attn_scores_f16(self, q: &[f32], k: &[u16], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    fn attn_weighted_sum_f16(self, w: &[f32], v: &[u16], kv_stride: usize, n_pos: usize, out: &mut [f32]);
    fn attn_scores_f32(self, q: &[f32], k: &[f32], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    fn attn_weighted_sum_f32(self, w: &[f32], v: &[f32], kv_stride: usize, n_pos: usize, out: &mut [f32]);
    fn attn_scores_q8_0(self, q: &[f32], k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    fn attn_weighted_sum_q8_0(self, w: &[f32], v: &[u8], kv_stride: usize, n_pos: usize, out: &mut [f32]);
    fn attn_scores_f16_group(self, q: &[f32], n_q: usize, k: &[u16], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]) -> bool;
    fn attn_weighted_sum_f16_group(self, w: &[f32], n_q: usize, v: &[u16], kv_stride: usize, n_pos: usize, out: &mut [f32]) -> bool;
    // Low-bit KV cache attention (`crate::float::kv`).
    fn attn_scores_kv(self, fmt: KvQuant, q: &[f32], n_q: usize, k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    fn attn_weighted_sum_kv(self, fmt: KvQuant, w: &[f32], n_q: usize, v: &[u8], kv_stride: usize, n_pos: usize, out: &mut [f32]) -> bool;
    fn attn_scores_kv_int8_query(self, fmt: KvQuant, codes: &[i8], scales: &[f32], n_q: usize, k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    fn attn_scores_b1_xnor(self, qbits: &[u32], qscales: &[f32], n_q: usize, k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]) -> bool;
    // Rotation and load-time re-encoding (`crate::float::hadamard`, `crate::float::requant`).
    fn hadamard_rows(self, d: usize, x: &mut [f32]);
    fn requantize_f16_q8_0(self, src: &[u8], out: &mut [u8]);
}
