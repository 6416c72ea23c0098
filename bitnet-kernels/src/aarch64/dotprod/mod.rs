//! The dot-product kernel set (NEON + ARMv8.2 FEAT_DotProd: Apple M1 and later, Cortex-A76
//! as in the Raspberry Pi 5, Neoverse N1 and later). [`Dotprod`] is the proof that the CPU
//! has it. The files here are the integer products that `SDOT` (four int8 products summed
//! into each i32 lane, one instruction) speeds up, under the names of `scalar/`: `ternary`,
//! `binary` (1-bit weights x int8), `q8q8`, `q4q8`, the grouped heads `q8r`, `q4r`
//! and `q6kr`, and `kv_int8`. Every other op is the NEON kernel: `Dotprod`'s level below is
//! [`Neon`], the one link to that tree.

use std::ops::Range;
use std::sync::OnceLock;

use crate::aarch64::neon::Neon;
use crate::isa::Isa;
use crate::layout::binary::BinaryMatrix;
use crate::layout::kv::KvQuant;
use crate::layout::q4r::Q4R;
use crate::layout::q6kr::Q6KR;
use crate::layout::q8k::Q8KActs;
use crate::layout::q8r::{Q8Acts, Q8R};
use crate::layout::ternary::TernaryMatrix;
use crate::ops::Kernels;

mod binary;
mod kv_int8;
mod q4q8;
mod q4r;
mod q6kr;
mod q8q8;
mod q8r;
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
}

/// The integer products `SDOT` speeds up; every other op is [`Neon`]'s.
impl Kernels for Dotprod {
    type Lower = Neon;

    /// The NEON set, which every CPU with this one also runs.
    #[inline]
    fn lower(self) -> Neon {
        // SAFETY: `Isa::Dotprod::missing_feature` checks NEON first, so a `Dotprod` value
        // proves it too.
        unsafe { Neon::new_unchecked() }
    }

    fn matmul_q4_0_q8_0(
        self,
        w: &[u8],
        row_len: usize,
        xq: &[u8],
        n_tok: usize,
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        // SAFETY: `self` proves the set's features; the kernel checks the shapes.
        unsafe { q4q8::matmul_q4_0_q8_0(w, row_len, xq, n_tok, rows, out) }
    }

    fn ternary_raw_dots(
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

    fn binary_raw_dots_multi(
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

    fn matmul_q8r(self, w: &Q8R, x: &Q8Acts, n_tok: usize, rows: Range<usize>, out: &mut [f32]) {
        crate::layout::q8r::check_matmul(w, x, n_tok, &rows, out);
        if rows.is_empty() || n_tok == 0 {
            return;
        }
        // SAFETY: `self` proves NEON and DotProd; shapes checked above, rows not empty.
        unsafe { q8r::matmul_q8r(w, x, n_tok, rows, out) }
    }

    fn matmul_q4r(self, w: &Q4R, x: &Q8Acts, n_tok: usize, rows: Range<usize>, out: &mut [f32]) {
        crate::layout::q4r::check_matmul(w, x, n_tok, &rows, out);
        if rows.is_empty() || n_tok == 0 {
            return;
        }
        // SAFETY: `self` proves NEON and DotProd; shapes checked above, rows not empty.
        unsafe { q4r::matmul_q4r(w, x, n_tok, rows, out) }
    }

    fn matmul_q6kr(self, w: &Q6KR, x: &Q8KActs, n_tok: usize, rows: Range<usize>, out: &mut [f32]) {
        crate::layout::q6kr::check_matmul(w, x, n_tok, &rows, out);
        if rows.is_empty() || n_tok == 0 {
            return;
        }
        // SAFETY: `self` proves NEON and DotProd; shapes checked above, rows not empty.
        unsafe { q6kr::matmul_q6kr(w, x, n_tok, rows, out) }
    }

    #[allow(clippy::too_many_arguments)]
    fn attn_scores_kv_int8_query(
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
