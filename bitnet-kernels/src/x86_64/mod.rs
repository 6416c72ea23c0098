//! x86-64 kernels. Each submodule mirrors the names in `scalar/`.
//!
//! [`token`] turns a requested [`Isa`] into a proof-of-feature value ([`Simd`]) that can only
//! be built once the CPU features were detected; its methods are therefore safe and forward to
//! the `#[target_feature]` kernels.

use std::ops::Range;

use crate::binary::BinaryMatrix;
use crate::isa::Isa;
use crate::ternary::TernaryMatrix;

pub mod avx2;
pub mod avx512;

/// A detected x86 kernel set.
#[derive(Copy, Clone, Debug)]
pub enum Simd {
    Avx2(avx2::Avx2),
    Avx512(avx512::Avx512),
}

/// The kernel set for `isa` if this CPU runs it (`None` for scalar or when unavailable).
#[inline]
pub fn token(isa: Isa) -> Option<Simd> {
    match isa {
        Isa::Scalar => None,
        Isa::Avx2 => avx2::Avx2::new().map(Simd::Avx2),
        Isa::Avx512 => avx512::Avx512::new().map(Simd::Avx512),
    }
}

macro_rules! forward {
    ($( fn $name:ident(self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?; )*) => {
        impl Simd {
            $(
                #[inline]
                pub fn $name(self $(, $arg: $ty)*) $(-> $ret)? {
                    match self {
                        Simd::Avx2(k) => k.$name($($arg),*),
                        Simd::Avx512(k) => k.$name($($arg),*),
                    }
                }
            )*
        }
    };
}

forward! {
    fn absmax(self, x: &[f32]) -> f32;
    fn quantize_i8(self, x: &[f32], scale: f32, q: &mut [i8]) -> i32;
    fn sign_bits(self, x: &[f32], bits: &mut [u64]);
    fn sum_bytes(self, data: &[u8]) -> u64;
    fn ternary_raw_dots(self, w: &TernaryMatrix, q: &[i8], rows: Range<usize>, blocks: Range<usize>, out: &mut [i32]);
    fn ternary_raw_dots_multi(self, w: &TernaryMatrix, q: &[i8], n_tok: usize, rows: Range<usize>, blocks: Range<usize>, out: &mut [i32]);
    fn binary_raw_dots_multi(self, w: &BinaryMatrix, q: &[i8], n_tok: usize, rows: Range<usize>, words: Range<usize>, out: &mut [i32]);
    fn binary_xor_popcounts(self, w: &BinaryMatrix, x: &[u64], rows: Range<usize>, words: Range<usize>, out: &mut [i32]);
}

/// Shape checks shared by the safe wrappers (the kernels index raw pointers from these).
pub(crate) fn check_ternary(
    w: &TernaryMatrix,
    q: &[i8],
    n_tok: usize,
    rows: &Range<usize>,
    blocks: &Range<usize>,
    out: &[i32],
) {
    assert!(
        rows.start <= rows.end
            && rows.end <= w.rows.div_ceil(crate::ternary::ROW_GROUP) * crate::ternary::ROW_GROUP
    );
    assert!(blocks.start <= blocks.end && blocks.end <= w.blocks);
    assert!(q.len() >= tokens_times(n_tok, w.padded_cols()));
    assert_eq!(out.len(), tokens_times(n_tok, rows.len()));
}

/// `n_tok * len`, refusing a product that wraps: a wrapped size would pass the length checks
/// the kernels' raw pointers rely on.
pub(crate) fn tokens_times(n_tok: usize, len: usize) -> usize {
    n_tok
        .checked_mul(len)
        .unwrap_or_else(|| panic!("{n_tok} token rows of {len} overflow usize"))
}

/// Shape checks for the 1-bit kernels; `act_cols` is the activation length in columns.
pub(crate) fn check_binary(
    w: &BinaryMatrix,
    act_cols: usize,
    n_tok: usize,
    rows: &Range<usize>,
    words: &Range<usize>,
    out: &[i32],
) {
    assert!(rows.start <= rows.end && rows.end <= w.rows);
    assert!(words.start <= words.end && words.end <= w.words);
    assert!(act_cols >= tokens_times(n_tok, w.padded_cols()));
    assert_eq!(out.len(), tokens_times(n_tok, rows.len()));
}
