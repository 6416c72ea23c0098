//! The AVX-512 kernel set (F/BW/VL/DQ + VNNI; VPOPCNTDQ used where present; Ice Lake,
//! Sapphire Rapids, Zen 4 and later). [`Avx512`] is the proof that the CPU has them: it can
//! only be built after detection, so its `Kernels` methods are safe. They are the one place
//! this tree's `#[target_feature]` kernels are called from: the ops both full x86 trees have
//! come from `src/token_entries.rs` (they call the kernel of the same name in this tree's
//! files).
//!
//! The files have the names of `x86_64/avx2/` for the op families with 512-bit kernels
//! (`act`, `ternary`, `binary`, `float`, `qrows`, `q8q8`, `q8r`, `q6kr`, `rope`, `attn`,
//! `attn_group`).
//! The others (the low-bit KV kernels, Hadamard, F16 -> Q8_0 re-encoding) have no 512-bit
//! version yet: they run the kernels of [`Avx2`], the level below this one, as
//! `binary_xor_popcounts` does on a CPU without VPOPCNTDQ. That token-level lowering is the
//! only link to the AVX2 tree: no file here imports an AVX2 file (the helpers both sets
//! use are in `x86_64/`: `f16c.rs`, `q6k.rs`, `rows.rs`, `exp.rs`).

use std::ops::Range;
use std::sync::OnceLock;

use crate::isa::Isa;
use crate::layout::binary::BinaryMatrix;
use crate::ops::Kernels;
use crate::x86_64::avx2::Avx2;

mod act;
mod attn;
mod attn_group;
mod binary;
mod float;
mod q4q8;
mod q4r;
mod q6kr;
mod q8q8;
mod q8r;
mod qrows;
mod rope;
pub(super) mod ternary;

/// Proof that AVX-512 F/BW/VL/DQ/VNNI (and everything [`Avx2`] needs) were detected.
#[derive(Copy, Clone, Debug)]
pub struct Avx512 {
    _proof: (),
}

impl Avx512 {
    /// `Some` if this CPU runs the AVX-512 kernel set (detected once per process).
    #[inline]
    pub fn new() -> Option<Self> {
        static OK: OnceLock<bool> = OnceLock::new();
        OK.get_or_init(|| Isa::Avx512.is_available())
            .then_some(Avx512 { _proof: () })
    }
}

/// The ops with 512-bit kernels; the others (the low-bit KV kernels, Hadamard, F16 -> Q8_0
/// re-encoding) are [`Avx2`]'s. AVX-VNNI is not below this level: AVX-512 CPUs such as Zen 4
/// lack it.
impl Kernels for Avx512 {
    type Lower = Avx2;

    /// The AVX2 set, which every AVX-512 CPU we accept also runs.
    #[inline]
    fn lower(self) -> Avx2 {
        // SAFETY: `Isa::Avx512::missing_feature` checks every AVX2 feature first, so an
        // `Avx512` value proves them too.
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

    // The ops every full SIMD tree has (`src/token_entries.rs`).
    crate::token_entries::token_entries!();

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

    fn binary_xor_popcounts(
        self,
        w: &BinaryMatrix,
        x: &[u64],
        rows: Range<usize>,
        words: Range<usize>,
        out: &mut [i32],
    ) {
        if !crate::isa::has_avx512_vpopcntdq() {
            return self.lower().binary_xor_popcounts(w, x, rows, words, out);
        }
        crate::layout::binary::check_raw_dots(w, x.len() * 64, 1, &rows, &words, out);
        // SAFETY: `self` proves the AVX-512 set and VPOPCNTDQ was detected just above;
        // shapes checked above.
        unsafe { binary::xor_popcounts(w, x, rows, words, out) }
    }
}
