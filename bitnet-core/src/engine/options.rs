//! The run-time settings of an engine (threads, context, KV formats): none of them is part
//! of the model. The KV formats of every layer are checked here against the model's shape.

use crate::error::CoreError;
use crate::kv::{KvRotate, KvType, describe_layer_types};

/// The precision a layer's attention and FFN inputs are quantized to before their ternary
/// products (the inputs of q/k/v and of gate/up; the attention output and the FFN's
/// intermediate state stay int8, as BitNet a4.8 keeps them at 8 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ActPrecision {
    /// Per-token absmax to -127..=127 (BitNet b1.58).
    #[default]
    Int8,
    /// Per-token absmax to -7..=7 (BitNet a4.8's 4-bit inputs), run by the int8 kernels.
    Int4,
}

impl ActPrecision {
    pub const ALL: [ActPrecision; 2] = [ActPrecision::Int8, ActPrecision::Int4];

    pub fn name(self) -> &'static str {
        match self {
            ActPrecision::Int8 => "int8",
            ActPrecision::Int4 => "int4",
        }
    }

    pub fn parse(name: &str) -> Option<ActPrecision> {
        ActPrecision::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The largest magnitude a quantized value takes (127 or 7).
    pub fn levels(self) -> i32 {
        match self {
            ActPrecision::Int8 => 127,
            ActPrecision::Int4 => 7,
        }
    }
}

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
    /// distinct physical cores first). Pins even without `pin`. `distribute` and `isolate`
    /// also bind each node's share of every weight matrix to that node's memory, and the
    /// node's threads claim that share's chunks first (`crate::numa`).
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
    /// The K and V formats of each layer, `(k, v)` for layer `l` at index `l` (a
    /// calibration's choice). Empty: every layer uses `k_type` and `v_type`; otherwise it
    /// has one entry per layer of the model and overrides them.
    pub kv_layers: Vec<(KvType, KvType)>,
    /// Which of K and V are stored Hadamard-rotated (`--kv-rotate`; see
    /// [`crate::kv::KvStorage::set_rotation`]), decided per layer from that layer's
    /// formats ([`KvRotate::sides`]: `Auto` rotates the low-bit ones). An explicit side
    /// with a head dimension that is not a power of two is an error; `Auto` then rotates
    /// nothing.
    pub kv_rotate: KvRotate,
    /// Score `b1` keys by XNOR/popcount against a sign-quantized query (`--kv-xnor`)
    /// instead of the float query, in the layers whose K is B1; needs at least one.
    pub kv_xnor: bool,
    /// Per-layer precision of the attention and FFN inputs (`--plan`; empty: int8 on every
    /// layer, else one entry a layer).
    pub act_layers: Vec<ActPrecision>,
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
            kv_layers: Vec::new(),
            kv_rotate: KvRotate::Off,
            kv_xnor: false,
            act_layers: Vec::new(),
            block_tokens: DEFAULT_BLOCK_TOKENS,
            attn_entropy_every: 0,
        }
    }
}

impl EngineOptions {
    /// The K and V formats of each of `n_layer` layers: [`Self::kv_layers`], or
    /// `(k_type, v_type)` for every layer when it is empty. (A `kv_layers` of another
    /// length comes back as it is; [`super::Engine::new`] refuses it.)
    pub fn layer_kv_types(&self, n_layer: usize) -> Vec<(KvType, KvType)> {
        if self.kv_layers.is_empty() {
            vec![(self.k_type, self.v_type); n_layer]
        } else {
            self.kv_layers.clone()
        }
    }

    /// [`EngineOptions::layer_kv_types`] checked for a model of `n_layer` layers of head
    /// dimension `head_dim`: one entry per layer, each format's blocks dividing the head
    /// dimension, and b1 keys somewhere if XNOR scoring is asked for. Errors name the option
    /// (and the layer, for a per-layer list).
    pub(super) fn checked_layer_kv_types(
        &self,
        n_layer: usize,
        head_dim: usize,
    ) -> Result<Vec<(KvType, KvType)>, CoreError> {
        let per_layer = !self.kv_layers.is_empty();
        if per_layer && self.kv_layers.len() != n_layer {
            return Err(CoreError::InvalidOption {
                option: "kv_layers",
                reason: format!(
                    "{} per-layer K/V formats given, the model has {n_layer} layers",
                    self.kv_layers.len()
                ),
            });
        }
        let whole_blocks = |t: KvType| {
            let f = t.format();
            if head_dim.is_multiple_of(f.block_len) {
                return Ok(());
            }
            Err(format!(
                "the {} KV cache type stores blocks of {} values: the model's head dimension \
                 {head_dim} is not a multiple of {} (choose another cache type)",
                f.name, f.block_len, f.block_len
            ))
        };
        if per_layer {
            for (l, &(k, v)) in self.kv_layers.iter().enumerate() {
                for (side, t) in [("K", k), ("V", v)] {
                    whole_blocks(t).map_err(|reason| CoreError::InvalidOption {
                        option: "kv_layers",
                        reason: format!("layer {l} {side}: {reason}"),
                    })?;
                }
            }
        } else {
            for (option, t) in [("k_type", self.k_type), ("v_type", self.v_type)] {
                whole_blocks(t).map_err(|reason| CoreError::InvalidOption { option, reason })?;
            }
        }
        let types = self.layer_kv_types(n_layer);
        if self.kv_xnor && !types.iter().any(|(k, _)| k.format().xnor_scores.is_some()) {
            let keys = if per_layer {
                format!("no layer's K is b1: {}", describe_layer_types(&types))
            } else {
                format!("K is {}", self.k_type.name())
            };
            return Err(CoreError::InvalidOption {
                option: "kv_xnor",
                reason: format!(
                    "XNOR/popcount scoring reads sign-bit keys: it needs the b1 K cache type \
                     ({keys})"
                ),
            });
        }
        Ok(types)
    }
}

impl EngineOptions {
    /// Which layers quantize their attention and FFN inputs to 4 bits, one entry a layer of
    /// `n_layer`: [`Self::act_layers`] checked (empty: none).
    pub(super) fn checked_int4_layers(&self, n_layer: usize) -> Result<Vec<bool>, CoreError> {
        if self.act_layers.is_empty() {
            return Ok(vec![false; n_layer]);
        }
        if self.act_layers.len() != n_layer {
            return Err(CoreError::InvalidOption {
                option: "act_layers",
                reason: format!(
                    "{} per-layer activation precisions given, the model has {n_layer} layers",
                    self.act_layers.len()
                ),
            });
        }
        Ok(self
            .act_layers
            .iter()
            .map(|&a| a == ActPrecision::Int4)
            .collect())
    }
}
