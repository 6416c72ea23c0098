//! NEON scoring of integer-coded keys against an int8 query
//! (`crate::aarch64::int_walk::kv_int8`): a unit's block dot is `SMULL` + `SMLAL2` (two
//! products of at most 128 x 127 per 16-bit lane) and `SADALP` into four i32 lanes, per 16
//! values.

use crate::aarch64::int_dot::NeonStep;
use crate::aarch64::int_walk::kv_int8::{self, ScoresEntry};
use crate::layout::kv::KvQuant;

/// The shared scores compiled with NEON.
struct NeonScores;

impl ScoresEntry for NeonScores {
    #[target_feature(enable = "neon")]
    unsafe fn scores_g<const F: u8, const G: usize, const P: usize>(
        codes: &[i8],
        scales: &[f32],
        k: &[u8],
        kv_stride: usize,
        n_pos: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        // SAFETY: this function enables NEON, the step's only feature; the shapes are the
        // caller's.
        unsafe {
            kv_int8::scores_g::<NeonStep, F, G, P>(codes, scales, k, kv_stride, n_pos, scale, out)
        }
    }
}

/// `attn_scores_int8_query` of `scalar/kv_int8.rs`.
///
/// # Safety
/// The CPU must support NEON; `fmt` has integer codes; shapes checked by the safe API.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn attn_scores_int8_query(
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
    // SAFETY: forwarded from the caller.
    unsafe {
        kv_int8::attn_scores_int8_query::<NeonScores>(
            fmt, codes, scales, n_q, k, kv_stride, n_pos, scale, out,
        )
    }
}
