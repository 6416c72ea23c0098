//! AVX-512 kernels (F/BW/VL/DQ + VNNI; VPOPCNTDQ used where present). [`Avx512`] is the
//! proof that the CPU has them: it can only be built after detection, so its methods are safe.

use std::ops::Range;
use std::sync::OnceLock;

use crate::binary::BinaryMatrix;
use crate::float::kv::KvQuant;
use crate::isa::Isa;
use crate::ternary::TernaryMatrix;
use crate::x86_64::avx2::Avx2;

pub mod act;
pub mod binary;
pub mod float;
pub mod ternary;

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

    /// The AVX2 set, which every AVX-512 CPU we accept also runs.
    #[inline]
    pub fn avx2(self) -> Avx2 {
        // SAFETY: `Isa::Avx512::missing_feature` checks every AVX2 feature first, so an
        // `Avx512` value proves them too.
        unsafe { Avx2::new_unchecked() }
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
        if !crate::isa::has_avx512_vpopcntdq() {
            return self.avx2().binary_xor_popcounts(w, x, rows, words, out);
        }
        crate::binary::check_raw_dots(w, x.len() * 64, 1, &rows, &words, out);
        // SAFETY: `self` proves the AVX-512 set and VPOPCNTDQ was detected just above;
        // shapes checked above.
        unsafe { binary::xor_popcounts(w, x, rows, words, out) }
    }
}

/// The op families with no 512-bit kernels yet: an `Avx512` runs the AVX2 kernels of the same
/// name (its proof covers AVX2, see [`Avx512::avx2`]). This list is the one place AVX-512
/// reuses an AVX2 kernel set.
macro_rules! reuse_avx2 {
    ($( fn $name:ident(self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?; )*) => {
        impl Avx512 {
            $(
                /// The AVX2 kernel (no 512-bit version yet).
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
    fn attn_scores_kv(self, fmt: KvQuant, q: &[f32], n_q: usize, k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    fn attn_weighted_sum_kv(self, fmt: KvQuant, w: &[f32], n_q: usize, v: &[u8], kv_stride: usize, n_pos: usize, out: &mut [f32]);
    fn attn_scores_kv_int8_query(self, fmt: KvQuant, codes: &[i8], scales: &[f32], n_q: usize, k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    fn attn_scores_b1_xnor(self, qbits: &[u32], qscales: &[f32], n_q: usize, k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    fn hadamard_rows(self, d: usize, x: &mut [f32]);
    fn requantize_f16_q8_0(self, src: &[u8], out: &mut [u8]);
}
