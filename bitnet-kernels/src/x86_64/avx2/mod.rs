//! The AVX2 + FMA + F16C kernel set (Haswell and later, Zen). [`Avx2`] is the proof that the
//! CPU has those features: it can only be built after detection, so its `Kernels` methods are
//! safe. They are the one place this tree's `#[target_feature]` kernels are called from: the
//! ops both full x86 trees have come from `src/token_entries.rs` (they call the kernel of the
//! same name in this tree's files), the AVX2-only ones are written out below. Its level below
//! is the scalar reference, which no op reaches today but short Hadamard rows.
//!
//! One file per op family, the same names as `scalar/` and `x86_64/avx512/`: `act`,
//! `ternary`, `binary` (integer), `float` (dense float), `qrows` (quantized rows), `q8q8`,
//! `q8r` and `q6kr` (the grouped Q8_0 and Q6_K heads), `rope`, `attn`, `attn_group`, and the AVX2-only `kv`,
//! `kv_int8`, `kv_q4_wsum`, `kv_b1_xnor`, `hadamard`, `requant` (which the AVX-512 level
//! runs from this one). The
//! files are private to this tree: what both x86 sets use is in `x86_64/`. Where a kernel
//! cannot take an input (rows too far apart for its i32 gather offsets), its method returns
//! `false` and the safe API runs the scalar reference.

use std::ops::Range;
use std::sync::OnceLock;

use crate::isa::Isa;
use crate::layout::binary::BinaryMatrix;
use crate::layout::kv::KvQuant;
use crate::ops::{Kernels, Scalar};

mod act;
mod attn;
mod attn_group;
mod binary;
mod float;
mod hadamard;
mod kv;
mod kv_b1_xnor;
mod kv_int8;
mod kv_q4_wsum;
mod q4q8;
mod q4r;
mod q6kr;
mod q8q8;
mod q8r;
mod qrows;
mod requant;
mod rope;
pub(super) mod ternary;

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
}

impl Kernels for Avx2 {
    type Lower = Scalar;

    #[inline]
    fn lower(self) -> Scalar {
        Scalar
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
        crate::layout::binary::check_raw_dots(w, x.len() * 64, 1, &rows, &words, out);
        // SAFETY: `self` proves the target features; shapes checked above.
        unsafe { binary::xor_popcounts(w, x, rows, words, out) }
    }

    #[allow(clippy::too_many_arguments)]
    fn attn_scores_kv(
        self,
        fmt: KvQuant,
        q: &[f32],
        n_q: usize,
        k: &[u8],
        kv_stride: usize,
        n_pos: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        let (ql, kl, ol) = (q.len(), k.len(), out.len());
        crate::layout::kv::check("attn_scores_kv", fmt, ql, n_q, kl, kv_stride, n_pos, ol);
        // SAFETY: `self` proves the target features; shapes checked above.
        unsafe { kv::attn_scores(fmt, q, n_q, k, kv_stride, n_pos, scale, out) }
    }

    /// `false` (and nothing done) for Q4_0 rows more than `i32::MAX / 15` bytes apart (the
    /// integer-weighted sum gathers a tile's scales with i32 offsets): the safe API then runs
    /// the reference, whose bits that kernel gives.
    #[allow(clippy::too_many_arguments)]
    fn attn_weighted_sum_kv(
        self,
        fmt: KvQuant,
        w: &[f32],
        n_q: usize,
        v: &[u8],
        kv_stride: usize,
        n_pos: usize,
        out: &mut [f32],
    ) -> bool {
        let (ol, vl, wl) = (out.len(), v.len(), w.len());
        crate::layout::kv::check(
            "attn_weighted_sum_kv",
            fmt,
            ol,
            n_q,
            vl,
            kv_stride,
            n_pos,
            wl,
        );
        if fmt == KvQuant::Q4_0 && !kv_q4_wsum::gather_reaches(kv_stride) {
            return false;
        }
        // SAFETY: `self` proves the target features; shapes checked above, and Q4_0 rows
        // are near enough for the scale gathers.
        unsafe { kv::attn_weighted_sum(fmt, w, n_q, v, kv_stride, n_pos, out) };
        true
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

    /// `false` (and nothing done) for rows more than `i32::MAX / 8` bytes apart (the kernel
    /// gathers eight rows with i32 offsets): the safe API then runs the reference, whose bits
    /// the kernel gives.
    #[allow(clippy::too_many_arguments)]
    fn attn_scores_b1_xnor(
        self,
        qbits: &[u32],
        qscales: &[f32],
        n_q: usize,
        k: &[u8],
        kv_stride: usize,
        n_pos: usize,
        scale: f32,
        out: &mut [f32],
    ) -> bool {
        crate::layout::kv::check_b1_xnor(qbits, qscales, n_q, k, kv_stride, n_pos, out);
        if kv_stride > i32::MAX as usize / 8 {
            return false;
        }
        // SAFETY: `self` proves the target features; shapes checked above, and eight strides
        // fit the gathers' i32 offsets.
        unsafe {
            kv_b1_xnor::attn_scores_b1_xnor(qbits, qscales, n_q, k, kv_stride, n_pos, scale, out)
        };
        true
    }

    fn hadamard_rows(self, d: usize, x: &mut [f32]) {
        crate::shared::hadamard::check_rows(d, x);
        if d < crate::shared::hadamard::SIMD_MIN_ROW {
            // Shorter than one vector: the reference, whose bits the kernel gives anyway.
            return self.lower().hadamard_rows(d, x);
        }
        for row in x.chunks_exact_mut(d) {
            // SAFETY: `self` proves the target features; the row is a power of two >= 8.
            unsafe { hadamard::fwht(row) };
        }
    }

    fn requantize_f16_q8_0(self, src: &[u8], out: &mut [u8]) {
        crate::shared::requant::check_f16_q8_0(src, out);
        // SAFETY: `self` proves the target features; lengths checked above.
        unsafe { requant::f16_q8_0(src, out) }
    }
}
