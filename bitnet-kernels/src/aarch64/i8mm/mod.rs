//! The int8 matrix-multiply kernel set (dotprod + ARMv8.6 FEAT_I8MM: Apple M2 and later,
//! Graviton 3, Neoverse V1/N2). [`I8mm`] is the proof that the CPU has it. `SMMLA` multiplies
//! a 2x8 int8 tile by an 8x2 one into a 2x2 i32 tile, so it pays where two rows meet two
//! tokens: the multi-token products of prefill and batched decode, `ternary` and `q8q8` here
//! (a single token runs the dot-product kernels). Every other op is the dot-product set's:
//! the `reuse_dotprod!` list below forwards it to the [`Dotprod`] token.

use std::ops::Range;
use std::sync::OnceLock;

use crate::aarch64::dotprod::Dotprod;
use crate::layout::binary::BinaryMatrix;
use crate::layout::rows::RowFormat;
use crate::layout::kv::KvQuant;
use crate::isa::Isa;
use crate::layout::ternary::TernaryMatrix;

mod q8q8;
mod ternary;

/// Proof that NEON, FEAT_DotProd and FEAT_I8MM were detected.
#[derive(Copy, Clone, Debug)]
pub struct I8mm {
    _proof: (),
}

impl I8mm {
    /// `Some` if this CPU runs the int8 matrix-multiply kernel set (detected once per process).
    #[inline]
    pub fn new() -> Option<Self> {
        static OK: OnceLock<bool> = OnceLock::new();
        OK.get_or_init(|| Isa::I8mm.is_available())
            .then_some(I8mm { _proof: () })
    }

    /// The dot-product set, which every CPU with this one also runs.
    #[inline]
    pub fn dotprod(self) -> Dotprod {
        // SAFETY: `Isa::I8mm::missing_feature` checks the dot-product set first, so an `I8mm`
        // value proves it too.
        unsafe { Dotprod::new_unchecked() }
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
        crate::layout::ternary::check_raw_dots(w, q, n_tok, &rows, &blocks, out);
        // SAFETY: `self` proves the target features; shapes checked above.
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
        // SAFETY: `self` proves the target features; the kernel checks the shapes.
        unsafe { q8q8::matmul_q8_0_q8_0(w, row_len, xq, n_tok, rows, out) }
    }
}

/// The ops `SMMLA` does not speed up: an `I8mm` calls the [`Dotprod`] token's method of the
/// same name (its proof covers that set, see [`I8mm::dotprod`]).
macro_rules! reuse_dotprod {
    ($( fn $name:ident(self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?; )*) => {
        impl I8mm {
            $(
                /// The dot-product set's kernel.
                #[inline]
                #[allow(clippy::too_many_arguments)]
                pub fn $name(self $(, $arg: $ty)*) $(-> $ret)? {
                    self.dotprod().$name($($arg),*)
                }
            )*
        }
    };
}

reuse_dotprod! {
    fn ternary_raw_dots(self, w: &TernaryMatrix, q: &[i8], rows: Range<usize>, blocks: Range<usize>, out: &mut [i32]);
    fn binary_raw_dots_multi(self, w: &BinaryMatrix, q: &[i8], n_tok: usize, rows: Range<usize>, words: Range<usize>, out: &mut [i32]);
    fn attn_scores_kv_int8_query(self, fmt: KvQuant, codes: &[i8], scales: &[f32], n_q: usize, k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    fn absmax(self, x: &[f32]) -> f32;
    fn quantize_i8(self, x: &[f32], scale: f32, q: &mut [i8]) -> i32;
    fn sign_bits(self, x: &[f32], bits: &mut [u64]);
    fn sum_bytes(self, data: &[u8]) -> u64;
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
    fn attn_scores_b1_xnor(self, qbits: &[u32], qscales: &[f32], n_q: usize, k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]) -> bool;
    fn hadamard_rows(self, d: usize, x: &mut [f32]);
    fn requantize_f16_q8_0(self, src: &[u8], out: &mut [u8]);
}
