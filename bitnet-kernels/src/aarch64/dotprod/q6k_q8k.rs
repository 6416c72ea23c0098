//! NEON + DotProd Q6_K x Q8_K products (`crate::aarch64::int_walk::q6k_q8k`): a
//! sub-block's 16 byte products are one `SDOT` (four products summed into each of four i32
//! lanes).

use std::ops::Range;

use crate::aarch64::int_dot::SdotStep;
use crate::aarch64::int_walk::q6k_q8k;
use crate::layout::q8k::Q8KActs;

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support NEON and DotProd; the shapes were checked
/// (`crate::layout::q8k::check_matmul_q6k`).
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn matmul_q6k_q8k(
    w: &[u8],
    row_len: usize,
    x: &Q8KActs,
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    // SAFETY: this function enables NEON and DotProd, the step's features; the caller
    // checked the shapes.
    unsafe { q6k_q8k::matmul_q6k_q8k::<SdotStep>(w, row_len, x, n_tok, rows, out) }
}
