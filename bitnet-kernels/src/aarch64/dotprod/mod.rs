//! The dot-product kernel set (NEON + ARMv8.2 FEAT_DotProd: Apple M1 and later, Cortex-A76
//! as in the Raspberry Pi 5, Neoverse N1 and later). [`Dotprod`] is the proof that the CPU
//! has it. The files here are the integer products that `SDOT` (four int8 products summed
//! into each i32 lane, one instruction) speeds up, under the names of `scalar/`: `ternary`,
//! `binary` (1-bit weights x int8), `q8q8` and `kv_int8`. Every other op is the NEON kernel:
//! the `reuse_neon!` list below forwards it to the [`Neon`] token, the one link to that tree.

use std::ops::Range;
use std::sync::OnceLock;

use crate::aarch64::neon::Neon;
use crate::layout::binary::BinaryMatrix;
use crate::layout::rows::RowFormat;
use crate::layout::kv::KvQuant;
use crate::isa::Isa;
use crate::layout::ternary::TernaryMatrix;

mod binary;
mod kv_int8;
mod q8q8;
mod ternary;

/// Proof that NEON and FEAT_DotProd were detected.
#[derive(Copy, Clone, Debug)]
pub struct Dotprod {
    _proof: (),
}

impl Dotprod {
    /// `Some` if this CPU runs the dot-product kernel set (detected once per process).
    #[inline]
    pub fn new() -> Option<Self> {
        static OK: OnceLock<bool> = OnceLock::new();
        OK.get_or_init(|| Isa::Dotprod.is_available())
            .then_some(Dotprod { _proof: () })
    }

    /// # Safety
    /// The CPU must support NEON and FEAT_DotProd.
    pub(crate) unsafe fn new_unchecked() -> Self {
        Dotprod { _proof: () }
    }

    /// The NEON set, which every CPU with this one also runs.
    #[inline]
    pub fn neon(self) -> Neon {
        // SAFETY: `Isa::Dotprod::missing_feature` checks NEON first, so a `Dotprod` value
        // proves it too.
        unsafe { Neon::new_unchecked() }
    }

    pub fn ternary_raw_dots(
        self,
        w: &TernaryMatrix,
        q: &[i8],
        rows: Range<usize>,
        blocks: Range<usize>,
        out: &mut [i32],
    ) {
        crate::layout::ternary::check_raw_dots(w, q, 1, &rows, &blocks, out);
        // SAFETY: `self` proves the target features; shapes checked above.
        unsafe { ternary::raw_dots(w, q, rows, blocks, out) }
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

    pub fn binary_raw_dots_multi(
        self,
        w: &BinaryMatrix,
        q: &[i8],
        n_tok: usize,
        rows: Range<usize>,
        words: Range<usize>,
        out: &mut [i32],
    ) {
        crate::layout::binary::check_raw_dots(w, q.len(), n_tok, &rows, &words, out);
        // SAFETY: `self` proves the target features; shapes checked above.
        unsafe { binary::raw_dots_multi(w, q, n_tok, rows, words, out) }
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

    #[allow(clippy::too_many_arguments)]
    pub fn attn_scores_kv_int8_query(
        self,
        fmt: KvQuant,
        codes: &[i8],
        scales: &[f32],
        n_q: usize,
        k: &[u8],
        kv_stride: usize,
        n_pos: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        crate::layout::kv::check_int8_query(fmt, codes, scales, n_q, k, kv_stride, n_pos, out);
        // SAFETY: `self` proves the target features; shapes checked above.
        unsafe {
            kv_int8::attn_scores_int8_query(
                fmt, codes, scales, n_q, k, kv_stride, n_pos, scale, out,
            )
        }
    }
}

/// The ops `SDOT` does not speed up: a `Dotprod` calls the [`Neon`] token's method of the
/// same name (its proof covers NEON, see [`Dotprod::neon`]).
macro_rules! reuse_neon {
    ($( fn $name:ident(self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?; )*) => {
        impl Dotprod {
            $(
                /// The NEON kernel.
                #[inline]
                #[allow(clippy::too_many_arguments)]
                pub fn $name(self $(, $arg: $ty)*) $(-> $ret)? {
                    self.neon().$name($($arg),*)
                }
            )*
        }
    };
}

reuse_neon! {
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
