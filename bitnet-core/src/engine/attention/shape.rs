//! What one attention call is given besides its buffers: the shape of the heads and the
//! KV rows, and the layer of the cache it reads.

use crate::kv::KvLayer;

/// One layer of the KV cache's rows as attention reads them (its formats included: layers
/// may differ).
#[derive(Copy, Clone, Debug)]
pub(in crate::engine) struct KvView<'a> {
    pub(in crate::engine) rows: &'a KvLayer,
}

/// Shape of one attention call.
#[derive(Copy, Clone, Debug)]
pub(in crate::engine) struct AttnShape {
    pub(in crate::engine) n_head: usize,
    pub(in crate::engine) group: usize,
    pub(in crate::engine) head_dim: usize,
    /// Bytes between two positions of one KV head's K rows.
    pub(in crate::engine) k_stride: usize,
    /// As `k_stride` for V (K and V formats are chosen independently, and per layer).
    pub(in crate::engine) v_stride: usize,
    pub(in crate::engine) scale: f32,
    /// Positions a sequence holds at most (scores scratch: `group * max_pos` per thread).
    pub(in crate::engine) max_pos: usize,
    pub(in crate::engine) block_tokens: usize,
    /// V rows are stored rotated: each head's output is rotated back.
    pub(in crate::engine) v_rotated: bool,
    /// B1 keys are scored by XNOR/popcount against the sign-quantized query.
    pub(in crate::engine) xnor: bool,
}
