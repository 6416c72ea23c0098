//! Floats of attention scratch: a thread's own working space (scores, run copies, a
//! chunk's output and statistics, the quantized query) and its share of the partial
//! results chunks leave for merging.

use bitnet_kernels::float::QK_KV;

use super::chunks::{ATTN_CHUNKS_MAX, PARTIALS_PER_THREAD, partial_len};

/// Floats of attention scratch per thread a quantized query takes: for the XNOR path a
/// group's sign words and block scales; for int8 query scoring (`int8`, keys with integer
/// codes) the group's codes (four to a float) and block scales.
pub(super) fn query_scratch(xnor: bool, int8: bool, group: usize, head_dim: usize) -> usize {
    let nb = head_dim.div_ceil(QK_KV);
    if xnor {
        2 * group * nb
    } else if int8 {
        group * nb * (QK_KV / 4 + 1)
    } else {
        0
    }
}

/// Floats of attention scratch one thread works in (scores, run copies, a chunk's output,
/// chunk statistics and the quantized query).
pub(super) fn thread_scratch(
    group: usize,
    head_dim: usize,
    max_pos: usize,
    block_tokens: usize,
    query: usize,
) -> usize {
    group * (2 * max_pos + block_tokens)
        + group * head_dim
        + 2 * group * (ATTN_CHUNKS_MAX + 1)
        + query
}

/// Floats of attention scratch to allocate per thread: its own working space and its
/// share of the partial results that chunks of one row leave for merging.
pub(in crate::engine) fn attention_scratch(
    group: usize,
    head_dim: usize,
    max_pos: usize,
    block_tokens: usize,
    xnor: bool,
    int8: bool,
) -> usize {
    let query = query_scratch(xnor, int8, group, head_dim);
    thread_scratch(group, head_dim, max_pos, block_tokens, query)
        + PARTIALS_PER_THREAD * partial_len(group, head_dim)
}
