//! The head's activations: the final normed hidden states as the head's kernel reads them,
//! made once per row that wants logits. A float head reads the f32 states themselves; a Q8_0
//! head ([`Head::Q8`]) and a Q4_0 one ([`Head::Q4`]: a file's Q4_0 head or `--head q4_0`)
//! their Q8_0 rows, a Q6_K one ([`Head::Q6`]: a file's Q6_K head or `--head q6_k`) their Q8_K
//! rows, for the integer products that read those heads at memory speed.
//! Allocated with the workspace, and only for the head that needs them.

use bitnet_kernels::float::{self, Q8_0_BLOCK_BYTES, Q8Acts, Q8KActs, QK8_0};

use crate::model::Head;

/// See the module docs.
#[derive(Debug)]
pub(super) enum HeadActs {
    /// A float-product head: the f32 states are its input.
    Float,
    /// A Q8_0 or Q4_0 head: one Q8_0 row at a time (`row`) on its way into `acts`.
    Q8 { row: Vec<u8>, acts: Q8Acts },
    /// A Q6_K head.
    Q8K(Q8KActs),
}

impl HeadActs {
    /// The activations `head` reads, `n_embd` wide, room for `rows` rows.
    pub(super) fn for_head(head: &Head, n_embd: usize, rows: usize) -> HeadActs {
        match head {
            Head::Q8(_) | Head::Q4(_) => HeadActs::Q8 {
                row: vec![0; n_embd.div_ceil(QK8_0) * Q8_0_BLOCK_BYTES],
                acts: Q8Acts::new(n_embd, rows),
            },
            // A Q6_K row is whole blocks of 256, so its width suits Q8_K.
            Head::Q6(_) => HeadActs::Q8K(Q8KActs::new(n_embd, rows)),
            Head::Rows(_) => HeadActs::Float,
        }
    }

    /// Row `j` from the normed hidden state `h` (nothing for a float head).
    pub(super) fn set_row(&mut self, j: usize, h: &[f32]) {
        match self {
            HeadActs::Float => {}
            HeadActs::Q8 { row, acts } => {
                float::quantize_row_q8_0(h, row);
                acts.set_row(j, row);
            }
            HeadActs::Q8K(acts) => acts.quantize_row(j, h),
        }
    }
}
