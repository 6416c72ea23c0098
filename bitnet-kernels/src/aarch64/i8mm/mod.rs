//! The int8 matrix-multiply kernel set (dotprod + ARMv8.6 FEAT_I8MM: Apple M2 and later,
//! Graviton 3, Neoverse V1/N2). [`I8mm`] is the proof that the CPU has it. `SMMLA` multiplies
//! a 2x8 int8 tile by an 8x2 one into a 2x2 i32 tile, so it pays where two rows meet two
//! tokens: the multi-token products of prefill and batched decode, `ternary` and `q8q8` here
//! (a single token runs the dot-product kernels). Every other op is the dot-product set's:
//! `I8mm`'s level below is [`Dotprod`].

use std::ops::Range;
use std::sync::OnceLock;

use crate::aarch64::dotprod::Dotprod;
use crate::isa::Isa;
use crate::layout::ternary::TernaryMatrix;
use crate::ops::Kernels;

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
}

/// The multi-token products `SMMLA` speeds up; every other op is [`Dotprod`]'s.
impl Kernels for I8mm {
    type Lower = Dotprod;

    /// The dot-product set, which every CPU with this one also runs.
    #[inline]
    fn lower(self) -> Dotprod {
        // SAFETY: `Isa::I8mm::missing_feature` checks the dot-product set first, so an `I8mm`
        // value proves it too.
        unsafe { Dotprod::new_unchecked() }
    }

    fn ternary_raw_dots_multi(
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

    fn matmul_q8_0_q8_0(
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
