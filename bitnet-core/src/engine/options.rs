//! The run-time settings of an engine (threads, context, KV formats): none of them is part
//! of the model.

use crate::kv::{KvRotate, KvType};

/// Positions per KV block by default (`bitnet bench --kv-block` measures other sizes).
pub const DEFAULT_BLOCK_TOKENS: usize = 16;

/// Run-time settings of an [`super::Engine`]: none of them is part of the model.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Threads for the forward pass, the caller included; 0 = the physical cores.
    pub threads: usize,
    /// Pin pool threads to cores.
    pub pin: bool,
    /// Place the pool's threads by NUMA node (`--numa`; `None`: [`Self::pin`]'s order,
    /// distinct physical cores first). Pins even without `pin`.
    pub numa: Option<crate::numa::NumaMode>,
    /// KV tokens in total, shared by all sequences (llama.cpp's unified cache); 0 = the
    /// model's training context, at most 4096.
    pub n_ctx: usize,
    /// Tokens one forward pass evaluates at most (sizes the activation buffers; prompts
    /// longer than this are evaluated in chunks).
    pub batch: usize,
    /// Element format of the K cache (`-ctk`).
    pub k_type: KvType,
    /// Element format of the V cache (`-ctv`), chosen independently of K's.
    pub v_type: KvType,
    /// Which of K and V are stored Hadamard-rotated (`--kv-rotate`; see
    /// [`crate::kv::KvStorage::set_rotation`]). An explicit side with a head dimension that
    /// is not a power of two is an error; `Auto` then rotates nothing.
    pub kv_rotate: KvRotate,
    /// Score `b1` keys by XNOR/popcount against a sign-quantized query (`--kv-xnor`)
    /// instead of the float query; needs `k_type` B1.
    pub kv_xnor: bool,
    /// Positions per KV block (a power of two).
    pub block_tokens: usize,
    /// Sample the per-layer attention entropy every this many decode passes (see
    /// [`super::Engine::attention_entropy`]); 0 = off, at no cost.
    pub attn_entropy_every: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            threads: 0,
            pin: true,
            numa: None,
            n_ctx: 0,
            batch: 256,
            k_type: KvType::F16,
            v_type: KvType::F16,
            kv_rotate: KvRotate::Off,
            kv_xnor: false,
            block_tokens: DEFAULT_BLOCK_TOKENS,
            attn_entropy_every: 0,
        }
    }
}
