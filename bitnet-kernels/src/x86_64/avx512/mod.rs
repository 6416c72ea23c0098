//! The AVX-512 kernel set (F/BW/VL/DQ + VNNI; VPOPCNTDQ used where present; Ice Lake,
//! Sapphire Rapids, Zen 4 and later). [`Avx512`] is the proof that the CPU has them: it can
//! only be built after detection, so its methods are safe. They are the one place this
//! tree's `#[target_feature]` kernels are called from: the methods both x86 sets have come
//! from `src/token_entries.rs` (they call the kernel of the same name in this tree's files).
//!
//! The files have the names of `x86_64/avx2/` for the op families with 512-bit kernels
//! (`act`, `ternary`, `binary`, `float`, `qrows`, `q8q8`, `rope`, `attn`, `attn_group`).
//! The others (the low-bit KV kernels, Hadamard, F16 -> Q8_0 re-encoding) have no 512-bit
//! version yet: the `reuse_avx2!` list below forwards them to the [`Avx2`] token, and
//! `binary_xor_popcounts` does so on a CPU without VPOPCNTDQ. That token-level forwarding is
//! the only link to the AVX2 tree: no file here imports an AVX2 file (the helpers both sets
//! use are in `x86_64/`: `f16c.rs`, `q6k.rs`, `rows.rs`, `exp.rs`).

use std::ops::Range;
use std::sync::OnceLock;

use crate::layout::binary::BinaryMatrix;
use crate::layout::kv::KvQuant;
use crate::isa::Isa;
use crate::x86_64::avx2::Avx2;

mod act;
mod attn;
mod attn_group;
mod binary;
mod float;
mod q8q8;
mod qrows;
mod rope;
mod ternary;

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

    // The methods every SIMD token has (`src/token_entries.rs`).
    crate::token_entries::token_entries!();

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
        crate::layout::binary::check_raw_dots(w, x.len() * 64, 1, &rows, &words, out);
        // SAFETY: `self` proves the AVX-512 set and VPOPCNTDQ was detected just above;
        // shapes checked above.
        unsafe { binary::xor_popcounts(w, x, rows, words, out) }
    }
}

/// The op families with no 512-bit kernels yet: an `Avx512` calls the [`Avx2`] token's method
/// of the same name (its proof covers AVX2, see [`Avx512::avx2`]). This list is the one place
/// AVX-512 reuses whole AVX2 kernels (besides [`Avx512::binary_xor_popcounts`] on a CPU
/// without VPOPCNTDQ).
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
    fn attn_weighted_sum_kv(self, fmt: KvQuant, w: &[f32], n_q: usize, v: &[u8], kv_stride: usize, n_pos: usize, out: &mut [f32]) -> bool;
    fn attn_scores_kv_int8_query(self, fmt: KvQuant, codes: &[i8], scales: &[f32], n_q: usize, k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]);
    fn attn_scores_b1_xnor(self, qbits: &[u32], qscales: &[f32], n_q: usize, k: &[u8], kv_stride: usize, n_pos: usize, scale: f32, out: &mut [f32]) -> bool;
    fn hadamard_rows(self, d: usize, x: &mut [f32]);
    fn requantize_f16_q8_0(self, src: &[u8], out: &mut [u8]);
}
