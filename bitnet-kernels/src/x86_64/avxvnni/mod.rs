//! The AVX-VNNI kernel set: AVX2 + FMA + F16C + the VEX-encoded `vpdpbusd` (Intel's client
//! cores since Alder Lake, 2021: Alder, Raptor, Meteor, Arrow and Lunar Lake; Sierra Forest,
//! Sapphire Rapids and later servers; AMD Zen 5 also has it, beside AVX-512). [`AvxVnni`] is
//! the proof that the CPU has it.
//!
//! The files here are the products `vpdpbusd` speeds up, under the names of `scalar/`:
//! `ternary`, the register tile of prefill, batched decode and speculative verification, which
//! AVX2 runs at a `maddubs` and an `add` per 32 multiply-adds (`examples/madd_ceiling.rs`),
//! and `q8q8`, the Q8_0 head of batched decode. Every other op is the AVX2 kernel: the
//! `reuse_avx2!` list below forwards it to the [`Avx2`] token, the one link to that tree.
//! Single-token decode, at the memory bandwidth wall, gains nothing from fewer instructions
//! and keeps the AVX2 kernels too (as do ternary products of one or two token rows, whose
//! 4-row group kernel keeps each weight block in registers for both).

use std::ops::Range;
use std::sync::OnceLock;

use crate::layout::binary::BinaryMatrix;
use crate::layout::rows::RowFormat;
use crate::layout::kv::KvQuant;
use crate::isa::Isa;
use crate::layout::ternary::TernaryMatrix;
use crate::x86_64::avx2::Avx2;

mod q8q8;
mod ternary;

/// Token rows from which `ternary_raw_dots_multi` takes the VNNI tile (fewer: AVX2's group
/// kernel).
const VNNI_TILE_MIN_TOKENS: usize = 3;

/// Proof that AVX-VNNI (and everything [`Avx2`] needs) was detected.
#[derive(Copy, Clone, Debug)]
pub struct AvxVnni {
    _proof: (),
}

impl AvxVnni {
    /// `Some` if this CPU runs the AVX-VNNI kernel set (detected once per process).
    #[inline]
    pub fn new() -> Option<Self> {
        static OK: OnceLock<bool> = OnceLock::new();
        OK.get_or_init(|| Isa::AvxVnni.is_available())
            .then_some(AvxVnni { _proof: () })
    }

    /// The AVX2 set, which every CPU with this one also runs.
    #[inline]
    pub fn avx2(self) -> Avx2 {
        // SAFETY: `Isa::AvxVnni::missing_feature` checks every AVX2 feature first, so an
        // `AvxVnni` value proves them too.
        unsafe { Avx2::new_unchecked() }
    }

    pub fn ternary_raw_dots_multi(
        self,
        w: &TernaryMatrix,
        q: &[i8],
        n_tok: usize,
        rows: Range<usize>,
        blocks: Range<usize>,
        out: &mut [i32],
    ) {
        if n_tok < VNNI_TILE_MIN_TOKENS {
            return self
                .avx2()
                .ternary_raw_dots_multi(w, q, n_tok, rows, blocks, out);
        }
        crate::layout::ternary::check_raw_dots(w, q, n_tok, &rows, &blocks, out);
        // SAFETY: `self` proves AVX2 and AVX-VNNI; shapes checked above.
        unsafe { ternary::raw_dots_multi(w, q, n_tok, rows, blocks, out) }
    }

    pub fn matmul_q8_0_q8_0(
        self,
        w: &[u8],
        row_len: usize,
        xq: &[u8],
        n_tok: usize,
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        if n_tok < 2 {
            return self
                .avx2()
                .matmul_q8_0_q8_0(w, row_len, xq, n_tok, rows, out);
        }
        // SAFETY: `self` proves AVX2/FMA/F16C and AVX-VNNI; the kernel checks the shapes.
        unsafe { q8q8::matmul_q8_0_q8_0_tokens(w, row_len, xq, n_tok, rows, out) }
    }
}

/// The ops `vpdpbusd` does not speed up (or not yet): an `AvxVnni` calls the [`Avx2`] token's
/// method of the same name (its proof covers AVX2, see [`AvxVnni::avx2`]).
macro_rules! reuse_avx2 {
    ($( fn $name:ident(self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?; )*) => {
        impl AvxVnni {
            $(
                /// The AVX2 kernel.
                #[inline]
                #[allow(clippy::too_many_arguments)]
                pub fn $name(self $(, $arg: $ty)*) $(-> $ret)? {
                    self.avx2().$name($($arg),*)
                }
            )*
        }
    };
}

reuse_avx2! {
    fn absmax(self, x: &[f32]) -> f32;
    fn quantize_i8(self, x: &[f32], scale: f32, q: &mut [i8]) -> i32;
    fn sign_bits(self, x: &[f32], bits: &mut [u64]);
    fn sum_bytes(self, data: &[u8]) -> u64;
    fn ternary_raw_dots(self, w: &TernaryMatrix, q: &[i8], rows: Range<usize>, blocks: Range<usize>, out: &mut [i32]);
    fn binary_raw_dots_multi(self, w: &BinaryMatrix, q: &[i8], n_tok: usize, rows: Range<usize>, words: Range<usize>, out: &mut [i32]);
    fn binary_xor_popcounts(self, w: &BinaryMatrix, x: &[u64], rows: Range<usize>, words: Range<usize>, out: &mut [i32]);
    fn f16_to_f32_slice(self, src: &[u16], dst: &mut [f32]);
    fn f32_to_f16_slice(self, src: &[f32], dst: &mut [u16]);
    fn dot_f32(self, a: &[f32], b: &[f32]) -> f32;
    fn matmul_f32(self, fmt: RowFormat, data: &[u8], row_len: usize, x: &[f32], n_tok: usize, rows: Range<usize>, out: &mut [f32]);
    fn rmsnorm(self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]);
    fn softmax_inplace(self, x: &mut [f32]) -> (f32, f32);
    fn silu(self, x: &mut [f32]);
    fn silu_mul(self, gate: &mut [f32], up: &[f32]);
    fn relu2(self, x: &mut [f32]);
    fn relu2_mul(self, gate: &mut [f32], up: &[f32]);
    fn add_inplace(self, dst: &mut [f32], src: &[f32]);
    fn mul_inplace(self, dst: &mut [f32], src: &[f32]);
    fn scale_inplace(self, x: &mut [f32], s: f32);
    fn rope_neox(self, x: &mut [f32], head_dim: usize, n_heads: usize, rope_dim: usize, cos: &[f32], sin: &[f32]);
    fn rope_normal(self, x: &mut [f32], head_dim: usize, n_heads: usize, rope_dim: usize, cos: &[f32], sin: &[f32]);
    fn attn_scores_f16(self, q: &[f32], k: &[u16], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    fn attn_weighted_sum_f16(self, w: &[f32], v: &[u16], kv_stride: usize, n_pos: usize, out: &mut [f32]);
    fn attn_scores_f32(self, q: &[f32], k: &[f32], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    fn attn_weighted_sum_f32(self, w: &[f32], v: &[f32], kv_stride: usize, n_pos: usize, out: &mut [f32]);
    fn attn_scores_q8_0(self, q: &[f32], k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    fn attn_weighted_sum_q8_0(self, w: &[f32], v: &[u8], kv_stride: usize, n_pos: usize, out: &mut [f32]);
    fn attn_scores_f16_group(self, q: &[f32], n_q: usize, k: &[u16], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]) -> bool;
    fn attn_weighted_sum_f16_group(self, w: &[f32], n_q: usize, v: &[u16], kv_stride: usize, n_pos: usize, out: &mut [f32]) -> bool;
    fn attn_scores_kv(self, fmt: KvQuant, q: &[f32], n_q: usize, k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    fn attn_weighted_sum_kv(self, fmt: KvQuant, w: &[f32], n_q: usize, v: &[u8], kv_stride: usize, n_pos: usize, out: &mut [f32]) -> bool;
    fn attn_scores_kv_int8_query(self, fmt: KvQuant, codes: &[i8], scales: &[f32], n_q: usize, k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    fn attn_scores_b1_xnor(self, qbits: &[u32], qscales: &[f32], n_q: usize, k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]) -> bool;
    fn hadamard_rows(self, d: usize, x: &mut [f32]);
    fn requantize_f16_q8_0(self, src: &[u8], out: &mut [u8]);
}
