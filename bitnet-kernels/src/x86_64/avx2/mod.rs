//! AVX2 + FMA kernels. [`Avx2`] is the proof that the CPU has AVX2/FMA/F16C: it can only be
//! built after detection, so its methods are safe.

use std::ops::Range;
use std::sync::OnceLock;

use crate::binary::BinaryMatrix;
use crate::isa::Isa;
use crate::ternary::TernaryMatrix;

pub mod act;
pub mod binary;
pub mod float;
mod q8q8;
pub mod ternary;

/// Proof that AVX2, FMA and F16C were detected.
#[derive(Copy, Clone, Debug)]
pub struct Avx2 {
    _proof: (),
}

impl Avx2 {
    /// `Some` if this CPU runs the AVX2 kernel set (detected once per process).
    #[inline]
    pub fn new() -> Option<Self> {
        static OK: OnceLock<bool> = OnceLock::new();
        OK.get_or_init(|| Isa::Avx2.is_available())
            .then_some(Avx2 { _proof: () })
    }

    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    pub(crate) unsafe fn new_unchecked() -> Self {
        Avx2 { _proof: () }
    }

    pub fn absmax(self, x: &[f32]) -> f32 {
        // SAFETY: `self` proves the target features.
        unsafe { act::absmax(x) }
    }

    pub fn quantize_i8(self, x: &[f32], scale: f32, q: &mut [i8]) -> i32 {
        assert!(q.len() >= x.len());
        // SAFETY: `self` proves the target features; lengths checked above.
        unsafe { act::quantize_i8(x, scale, q) }
    }

    pub fn sum_bytes(self, data: &[u8]) -> u64 {
        // SAFETY: `self` proves the target features.
        unsafe { act::sum_bytes(data) }
    }

    pub fn sign_bits(self, x: &[f32], bits: &mut [u64]) {
        assert!(bits.len() >= x.len().div_ceil(64));
        // SAFETY: `self` proves the target features; lengths checked above.
        unsafe { act::sign_bits(x, bits) }
    }

    pub fn ternary_raw_dots(
        self,
        w: &TernaryMatrix,
        q: &[i8],
        rows: Range<usize>,
        blocks: Range<usize>,
        out: &mut [i32],
    ) {
        crate::ternary::check_raw_dots(w, q, 1, &rows, &blocks, out);
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
        crate::ternary::check_raw_dots(w, q, n_tok, &rows, &blocks, out);
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
        crate::binary::check_raw_dots(w, q.len(), n_tok, &rows, &words, out);
        // SAFETY: `self` proves the target features; shapes checked above.
        unsafe { binary::raw_dots_multi(w, q, n_tok, rows, words, out) }
    }

    pub fn binary_xor_popcounts(
        self,
        w: &BinaryMatrix,
        x: &[u64],
        rows: Range<usize>,
        words: Range<usize>,
        out: &mut [i32],
    ) {
        crate::binary::check_raw_dots(w, x.len() * 64, 1, &rows, &words, out);
        // SAFETY: `self` proves the target features; shapes checked above.
        unsafe { binary::xor_popcounts(w, x, rows, words, out) }
    }
}
