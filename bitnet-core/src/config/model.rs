//! The config itself: everything the forward pass needs to know about a model's shape and
//! semantics, and the sizes that follow from it.

use bitnet_gguf::TensorType;

use super::arch::{ActBits, Arch, FfnAct, RopeStyle};

/// Everything the forward pass needs to know about a model's shape and semantics.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// Architecture family.
    pub arch: Arch,
    /// `general.architecture` as written in the file.
    pub arch_name: String,
    /// Vocabulary size (rows of the embedding).
    pub n_vocab: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Number of transformer blocks.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (GQA).
    pub n_head_kv: usize,
    /// Dimension of one head.
    pub head_dim: usize,
    /// FFN inner size.
    pub n_ff: usize,
    /// Training context length.
    pub n_ctx_train: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Rope base frequency.
    pub rope_theta: f32,
    /// Linear rope scaling: positions are multiplied by this (1 / `rope.scaling.factor`).
    pub rope_freq_scale: f32,
    /// Dimensions rotated per head (the first `rope_dim` of each head).
    pub rope_dim: usize,
    /// Rope pairing.
    pub rope: RopeStyle,
    /// FFN gate activation.
    pub ffn_act: FfnAct,
    /// Whether `attn_sub_norm` / `ffn_sub_norm` are applied.
    pub sub_norms: bool,
    /// Every projection RMS-normalizes its own input first (`blk.N.<proj>_norm_in`: the
    /// BitNet embedding models' BitLinear), after the layer's norm.
    pub proj_norms: bool,
    /// q and k are RMS-normalized per head before rope (`attn_q_norm`, `attn_k_norm`).
    pub qk_norms: bool,
    /// The attention and FFN outputs are RMS-normalized before their residual adds
    /// (`post_attention_norm`, `post_ffw_norm`: Gemma3).
    pub post_norms: bool,
    /// The token embedding is multiplied by this (Gemma3: sqrt(n_embd)).
    pub embd_scale: Option<f32>,
    /// The output head is the token embedding (no `output.weight`).
    pub tied_head: bool,
    /// Activation precision for the projections.
    pub act_bits: ActBits,
    /// Storage type of the layer projections (of `blk.0.attn_q.weight`; others may differ).
    pub weight_type: TensorType,
    /// Storage type of the token embedding.
    pub embd_type: TensorType,
    /// Storage type of the untied head, if any.
    pub head_type: Option<TensorType>,
    /// The file carries one-element `.scale` tensors after the projections.
    pub has_proj_scales: bool,
    /// `{arch}.pooling_type`, how an embedding model pools its hidden states (llama.cpp's
    /// values: none 0, mean 1, cls 2, last 3, rank 4); `None` when the file does not say.
    pub pooling_type: Option<u32>,
}

impl ModelConfig {
    /// Width of the concatenated query heads.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Width of the concatenated key (or value) heads.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// Whether the file is an embedding model: it names a pooling type (as embedding
    /// converters write it), or its projections have their own input norms (the BitNet
    /// embedding models). Its head, if it has one, is not a language model's.
    pub fn is_embedding_model(&self) -> bool {
        self.pooling_type.is_some() || self.proj_norms
    }

    /// Query heads per key/value head.
    pub fn gqa_group(&self) -> usize {
        self.n_head / self.n_head_kv
    }

    /// Bytes of a K and V cache for `n_ctx` positions stored as `kv_type` (F32, F16, ...),
    /// over all layers. Saturates instead of overflowing.
    pub fn kv_bytes(&self, n_ctx: usize, kv_type: TensorType) -> u64 {
        let per_row = (self.kv_dim() as u64)
            .saturating_mul(kv_type.block_bytes())
            .div_ceil(kv_type.block_len().max(1));
        per_row
            .saturating_mul(n_ctx as u64)
            .saturating_mul(self.n_layer as u64)
            .saturating_mul(2)
    }
}
