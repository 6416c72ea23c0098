//! The AVX-VNNI kernel set: AVX2 + FMA + F16C + the VEX-encoded `vpdpbusd` (Intel's client
//! cores since Alder Lake, 2021: Alder, Raptor, Meteor, Arrow and Lunar Lake; Sierra Forest,
//! Sapphire Rapids and later servers; AMD Zen 5 also has it, beside AVX-512). [`AvxVnni`] is
//! the proof that the CPU has it.
//!
//! The files here are the products `vpdpbusd` speeds up, under the names of `scalar/`:
//! `ternary`, the register tile of prefill, batched decode and speculative verification, which
//! AVX2 runs at a `maddubs` and an `add` per 32 multiply-adds (`examples/madd_ceiling.rs`),
//! `q8q8` and `q8r`, the Q8_0 head of batched decode, and `q6kr`, the grouped Q6_K head. Every other op is the AVX2 kernel: `AvxVnni`'s
//! level below is [`Avx2`], the one link to that tree.
//! Single-token ternary decode has its own kernel here too (`ternary::raw_dots`): on Zen 5
//! one core reads 38 GB/s, more than AVX2's unpacking reaches (0.75 of a plain read on one
//! thread; with `vpdpbusd` 0.85, `bench/2026-12-07-issue50-zen5.md`). Products of two token
//! rows keep AVX2's 4-row group kernel, which keeps each weight block in registers for both.

use std::ops::Range;
use std::sync::OnceLock;

use crate::isa::Isa;
use crate::layout::q6kr::Q6KR;
use crate::layout::q8k::Q8KActs;
use crate::layout::q8r::{Q8Acts, Q8R};
use crate::layout::ternary::TernaryMatrix;
use crate::ops::Kernels;
use crate::x86_64::avx2::Avx2;

mod q4q8;
mod q4r;
mod q6kr;
mod q8q8;
mod q8r;
pub(super) mod ternary;

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
}

/// The products `vpdpbusd` speeds up; every other op is [`Avx2`]'s.
impl Kernels for AvxVnni {
    type Lower = Avx2;

    /// The AVX2 set, which every CPU with this one also runs.
    #[inline]
    fn lower(self) -> Avx2 {
        // SAFETY: `Isa::AvxVnni::missing_feature` checks every AVX2 feature first, so an
        // `AvxVnni` value proves them too.
        unsafe { Avx2::new_unchecked() }
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
        // SAFETY: `self` proves AVX2 and AVX-VNNI; shapes checked above.
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
        if n_tok < VNNI_TILE_MIN_TOKENS {
            return self
                .lower()
                .ternary_raw_dots_multi(w, q, n_tok, rows, blocks, out);
        }
        crate::layout::ternary::check_raw_dots(w, q, n_tok, &rows, &blocks, out);
        // SAFETY: `self` proves AVX2 and AVX-VNNI; shapes checked above.
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
        if n_tok < 2 {
            return self
                .lower()
                .matmul_q8_0_q8_0(w, row_len, xq, n_tok, rows, out);
        }
        // SAFETY: `self` proves AVX2/FMA/F16C and AVX-VNNI; the kernel checks the shapes.
        unsafe { q8q8::matmul_q8_0_q8_0_tokens(w, row_len, xq, n_tok, rows, out) }
    }

    fn matmul_q6kr(self, w: &Q6KR, x: &Q8KActs, n_tok: usize, rows: Range<usize>, out: &mut [f32]) {
        crate::layout::q6kr::check_matmul(w, x, n_tok, &rows, out);
        if rows.is_empty() || n_tok == 0 {
            return;
        }
        // SAFETY: `self` proves AVX2/FMA/F16C and AVX-VNNI; shapes checked above, rows not
        // empty.
        unsafe { q6kr::matmul_q6kr(w, x, n_tok, rows, out) }
    }

    fn matmul_q8r(self, w: &Q8R, x: &Q8Acts, n_tok: usize, rows: Range<usize>, out: &mut [f32]) {
        crate::layout::q8r::check_matmul(w, x, n_tok, &rows, out);
        if rows.is_empty() || n_tok == 0 {
            return;
        }
        // SAFETY: `self` proves AVX2/FMA/F16C and AVX-VNNI; shapes checked above, rows not
        // empty.
        unsafe { q8r::matmul_q8r(w, x, n_tok, rows, out) }
    }

    fn matmul_q4r(
        self,
        w: &crate::layout::q4r::Q4R,
        x: &crate::layout::q8r::Q8Acts,
        n_tok: usize,
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        crate::layout::q4r::check_matmul(w, x, n_tok, &rows, out);
        if rows.is_empty() || n_tok == 0 {
            return;
        }
        // SAFETY: `self` proves the set's features; shapes checked above, rows not empty.
        unsafe { q4r::matmul_q4r(w, x, n_tok, rows, out) }
    }
}
