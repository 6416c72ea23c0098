//! The operations every kernel set offers, declared once: `for_each_op!` lists each op's
//! signature and the scalar reference it binds, and everything else is generated from that
//! list, the [`Kernels`] trait and its [`Scalar`] level here, the dispatching
//! [`crate::dispatch::Level`] in `dispatch.rs`.
//!
//! [`Kernels`] is a ladder of levels. Every level names the level below it
//! ([`Kernels::Lower`]) and every op has a default body that runs the level below's, so a
//! level writes only the ops it speeds up: `Avx2` and `Neon` sit on [`Scalar`], `AvxVnni` and
//! `Avx512` on `Avx2` (AVX-512 CPUs such as Zen 4 lack AVX-VNNI), `Dotprod` on `Neon`, `I8mm`
//! on `Dotprod`. [`Scalar`] is the bottom: it binds every op to its reference kernel in
//! `crate::scalar`, so an op without one does not compile.
//!
//! A value of a SIMD level is a proof token: it exists only once its CPU features were
//! detected, so its methods are safe, and they are the only code that calls
//! `#[target_feature]` kernels (each `unsafe` block says why it is sound). An op returning
//! `bool` may decline an input its kernel cannot take (`false`, nothing written); the safe
//! API then takes another path. [`Scalar`] never declines.
//!
//! Adding an op: its reference kernel in `crate::scalar` (with the op's argument list), one
//! line in `for_each_op!`, and a method in the `impl Kernels` of each level that speeds it
//! up (the crate docs have an example).

use std::ops::Range;

use crate::layout::binary::BinaryMatrix;
use crate::layout::kv::KvQuant;
use crate::layout::q4r::Q4R;
use crate::layout::q6kr::Q6KR;
use crate::layout::q8k::Q8KActs;
use crate::layout::q8r::{Q8Acts, Q8R};
use crate::layout::rows::RowFormat;
use crate::layout::ternary::TernaryMatrix;

/// Calls the macro `$then` with the list of ops: `fn op(self, args) -> ret => module::func;`,
/// `crate::scalar::module::func` being the op's reference (same arguments, same result).
/// The types in the list must be in scope where `$then` expands.
macro_rules! for_each_op {
    ($then:ident) => {
        $then! {
            // Activations (`crate::act`, `crate::probe`).
            fn absmax(self, x: &[f32]) -> f32 => act::absmax;
            fn quantize_i8(self, x: &[f32], scale: f32, q: &mut [i8]) -> i32 => act::quantize_i8;
            fn sign_bits(self, x: &[f32], bits: &mut [u64]) => act::sign_bits;
            fn sum_bytes(self, data: &[u8]) -> u64 => act::sum_bytes;
            // Ternary and 1-bit products (`crate::ternary`, `crate::binary`).
            fn ternary_raw_dots(self, w: &TernaryMatrix, q: &[i8], rows: Range<usize>, blocks: Range<usize>, out: &mut [i32]) => ternary::raw_dots;
            fn ternary_raw_dots_multi(self, w: &TernaryMatrix, q: &[i8], n_tok: usize, rows: Range<usize>, blocks: Range<usize>, out: &mut [i32]) => ternary::raw_dots_multi;
            fn binary_raw_dots_multi(self, w: &BinaryMatrix, q: &[i8], n_tok: usize, rows: Range<usize>, words: Range<usize>, out: &mut [i32]) => binary::raw_dots_multi;
            fn binary_xor_popcounts(self, w: &BinaryMatrix, x: &[u64], rows: Range<usize>, words: Range<usize>, out: &mut [i32]) => binary::xor_popcounts;
            // Dense float (`crate::float`).
            fn f16_to_f32_slice(self, src: &[u16], dst: &mut [f32]) => float::f16_to_f32_slice;
            fn f32_to_f16_slice(self, src: &[f32], dst: &mut [u16]) => float::f32_to_f16_slice;
            fn dot_f32(self, a: &[f32], b: &[f32]) -> f32 => float::dot_f32;
            fn matmul_f32(self, fmt: RowFormat, data: &[u8], row_len: usize, x: &[f32], n_tok: usize, rows: Range<usize>, out: &mut [f32]) => float::matmul_f32;
            fn matmul_q8_0_q8_0(self, w: &[u8], row_len: usize, xq: &[u8], n_tok: usize, rows: Range<usize>, out: &mut [f32]) => q8q8::matmul_q8_0_q8_0;
            fn matmul_q4_0_q8_0(self, w: &[u8], row_len: usize, xq: &[u8], n_tok: usize, rows: Range<usize>, out: &mut [f32]) => q4q8::matmul_q4_0_q8_0;
            fn matmul_q8r(self, w: &Q8R, x: &Q8Acts, n_tok: usize, rows: Range<usize>, out: &mut [f32]) => q8r::matmul_q8r;
            fn matmul_q4r(self, w: &Q4R, x: &Q8Acts, n_tok: usize, rows: Range<usize>, out: &mut [f32]) => q4r::matmul_q4r;
            fn matmul_q6k_q8k(self, w: &[u8], row_len: usize, x: &Q8KActs, n_tok: usize, rows: Range<usize>, out: &mut [f32]) => q6k_q8k::matmul_q6k_q8k;
            fn matmul_q6kr(self, w: &Q6KR, x: &Q8KActs, n_tok: usize, rows: Range<usize>, out: &mut [f32]) => q6kr::matmul_q6kr;
            fn rmsnorm(self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) => float::rmsnorm;
            fn softmax_inplace(self, x: &mut [f32]) -> (f32, f32) => float::softmax_inplace;
            fn silu(self, x: &mut [f32]) => float::silu;
            fn silu_mul(self, gate: &mut [f32], up: &[f32]) => float::silu_mul;
            fn relu2(self, x: &mut [f32]) => float::relu2;
            fn relu2_mul(self, gate: &mut [f32], up: &[f32]) => float::relu2_mul;
            fn gelu_tanh_mul(self, gate: &mut [f32], up: &[f32]) => float::gelu_tanh_mul;
            fn add_inplace(self, dst: &mut [f32], src: &[f32]) => float::add_inplace;
            fn mul_inplace(self, dst: &mut [f32], src: &[f32]) => float::mul_inplace;
            fn scale_inplace(self, x: &mut [f32], s: f32) => float::scale_inplace;
            // RoPE (`crate::float::RopeTable`).
            fn rope_neox(self, x: &mut [f32], head_dim: usize, n_heads: usize, rope_dim: usize, cos: &[f32], sin: &[f32]) => rope::rope_neox;
            fn rope_normal(self, x: &mut [f32], head_dim: usize, n_heads: usize, rope_dim: usize, cos: &[f32], sin: &[f32]) => rope::rope_normal;
            // Attention over an f16, f32 or Q8_0 cache (`crate::float`'s `attn_*`).
            fn attn_scores_f16(self, q: &[f32], k: &[u16], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]) => attn::attn_scores_f16;
            fn attn_weighted_sum_f16(self, w: &[f32], v: &[u16], kv_stride: usize, n_pos: usize, out: &mut [f32]) => attn::attn_weighted_sum_f16;
            fn attn_scores_f32(self, q: &[f32], k: &[f32], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]) => attn::attn_scores_f32;
            fn attn_weighted_sum_f32(self, w: &[f32], v: &[f32], kv_stride: usize, n_pos: usize, out: &mut [f32]) => attn::attn_weighted_sum_f32;
            fn attn_scores_q8_0(self, q: &[f32], k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]) => attn::attn_scores_q8_0;
            fn attn_weighted_sum_q8_0(self, w: &[f32], v: &[u8], kv_stride: usize, n_pos: usize, out: &mut [f32]) => attn::attn_weighted_sum_q8_0;
            fn attn_scores_f16_group(self, q: &[f32], n_q: usize, k: &[u16], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]) -> bool => attn_group::scores_group;
            fn attn_weighted_sum_f16_group(self, w: &[f32], n_q: usize, v: &[u16], kv_stride: usize, n_pos: usize, out: &mut [f32]) -> bool => attn_group::wsum_group;
            // Low-bit KV cache attention (`crate::float::kv`).
            fn attn_scores_kv(self, fmt: KvQuant, q: &[f32], n_q: usize, k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]) => kv::attn_scores;
            fn attn_weighted_sum_kv(self, fmt: KvQuant, w: &[f32], n_q: usize, v: &[u8], kv_stride: usize, n_pos: usize, out: &mut [f32]) -> bool => kv::attn_weighted_sum;
            fn attn_scores_kv_int8_query(self, fmt: KvQuant, codes: &[i8], scales: &[f32], n_q: usize, k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]) => kv_int8::attn_scores_int8_query;
            fn attn_scores_b1_xnor(self, qbits: &[u32], qscales: &[f32], n_q: usize, k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]) -> bool => kv_b1_xnor::attn_scores_b1_xnor;
            // Rotation and load-time re-encoding (`crate::float::hadamard`, `crate::float::requant`).
            fn hadamard_rows(self, d: usize, x: &mut [f32]) => hadamard::rows;
            fn requantize_f16_q8_0(self, src: &[u8], out: &mut [u8]) => requant::f16_q8_0;
        }
    };
}

pub(crate) use for_each_op;

/// The bottom level: the reference kernels of `crate::scalar`, on every CPU. The only level
/// a target without SIMD kernels has.
#[derive(Copy, Clone, Debug, Default)]
pub struct Scalar;

/// Makes [`Kernels`], every op defaulting to the level below, and binds [`Scalar`]'s ops to
/// their references.
macro_rules! declare_kernels {
    ($( fn $name:ident(self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)? => $module:ident::$func:ident; )*) => {
        /// The ops of a kernel level (see the module docs): each one runs the level below's
        /// unless the level speeds it up.
        pub trait Kernels: Copy {
            /// The level whose kernels this one runs where it has none of its own.
            type Lower: Kernels;

            /// The level below, which every CPU running this one also runs.
            fn lower(self) -> Self::Lower;

            $(
                #[inline]
                #[allow(clippy::too_many_arguments)]
                fn $name(self $(, $arg: $ty)*) $(-> $ret)? {
                    self.lower().$name($($arg),*)
                }
            )*
        }

        impl Kernels for Scalar {
            type Lower = Scalar;

            #[inline]
            fn lower(self) -> Scalar {
                self
            }

            $(
                #[inline]
                fn $name(self $(, $arg: $ty)*) $(-> $ret)? {
                    crate::scalar::$module::$func($($arg),*)
                }
            )*
        }
    };
}

for_each_op!(declare_kernels);
