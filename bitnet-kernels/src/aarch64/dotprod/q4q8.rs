//! NEON + DotProd Q4_0 x Q8_0 products (`crate::aarch64::int_walk::q4q8`): four consecutive
//! code x activation products per i32 lane in one `SDOT`.

use std::ops::Range;

use crate::aarch64::int_dot::SdotStep;
use crate::aarch64::int_walk::q4q8;

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support NEON and DotProd. Shapes are checked here.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn matmul_q4_0_q8_0(
    w: &[u8],
    row_len: usize,
    xq: &[u8],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    // SAFETY: this function enables NEON and DotProd, the step's features; the walk checks shapes.
    unsafe { q4q8::matmul_q4_0_q8_0::<SdotStep>(w, row_len, xq, n_tok, rows, out) }
}
