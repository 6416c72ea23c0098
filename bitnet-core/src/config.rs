//! Model hyper-parameters read from GGUF metadata, and the tensor list they imply.
//!
//! These modules own the rules that turn a file's keys (llama.cpp's names:
//! `general.architecture` = `A`, then `A.embedding_length`, `A.block_count`, ...) into a
//! [`ModelConfig`] (`metadata.rs`), and check the file's tensors (names, shapes, types)
//! against it before any weight byte is read (`tensors.rs`, the tensor schema). Everything
//! the forward pass needs to know about the architecture (gate activation, rope style,
//! sub-norms, tied head) is decided here, once (`arch.rs`, `model.rs`).
//!
//! Architecture rules (what llama.cpp and bitnet.cpp run for each name):
//! - `bitnet-b1.58`, `bitnet-25` (bitnet.cpp, BitNet b1.58 2B-4T): squared-ReLU gate,
//!   sub-norms before `attn_output` and `ffn_down`, NeoX rope.
//! - `bitnet` (upstream llama.cpp `build_bitnet`, the 1bitLLM models): SiLU gate, sub-norms,
//!   NeoX rope (`llama_model_rope_type` lists `LLM_ARCH_BITNET` with the NeoX archs).
//! - `llama` (ternary Llama-architecture models such as Falcon3-1.58bit): SiLU gate, no
//!   sub-norms, normal (interleaved-pair) rope.
//!
//! Our own optional keys (no converter writes them; `gen-model` may):
//! - `A.feed_forward_activation` = `"silu"` | `"relu2"` overrides the gate rule.
//! - `A.activation_bits` = 8 (default) | 1 selects int8 or binary activations.

mod arch;
mod error;
mod metadata;
mod model;
mod tensors;
#[cfg(test)]
mod tests;

pub use arch::{ActBits, Arch, FfnAct, RopeStyle};
pub use error::ConfigError;
pub use model::ModelConfig;
pub use tensors::{
    ExpectedTensor, OUTPUT, OUTPUT_NORM, Proj, TOKEN_EMBD, TensorRole, norm_name, proj_name,
    proj_norm_name, proj_scale_name,
};
