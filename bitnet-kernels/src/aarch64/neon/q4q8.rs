//! NEON Q4_0 x Q8_0 products (`crate::aarch64::int_walk::q4q8`): four consecutive code x
//! activation products per i32 lane from `SMULL`/`SMULL2`, `ADDP` and `SADDLP`.

use std::ops::Range;

use crate::aarch64::int_dot::NeonStep;
use crate::aarch64::int_walk::q4q8;

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support NEON. Shapes are checked here.
#[target_feature(enable = "neon")]
pub unsafe fn matmul_q4_0_q8_0(
    w: &[u8],
    row_len: usize,
    xq: &[u8],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    // SAFETY: this function enables NEON, the step's only feature; the walk checks shapes.
    unsafe { q4q8::matmul_q4_0_q8_0::<NeonStep>(w, row_len, xq, n_tok, rows, out) }
}
