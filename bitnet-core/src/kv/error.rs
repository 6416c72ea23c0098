//! What the KV cache refuses: sizes that make no cache, a cache larger than the machine, a
//! rotation the head dimension or the cache's state does not allow.

use thiserror::Error;

/// Errors of the KV cache's set-up.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KvError {
    #[error(
        "the KV cache needs non-zero sizes: {n_layer} layers, {n_kv_heads} KV heads of \
         dimension {head_dim}, {n_tokens} tokens in blocks of {block_tokens}"
    )]
    ZeroDimension {
        n_layer: usize,
        n_kv_heads: usize,
        head_dim: usize,
        n_tokens: usize,
        block_tokens: usize,
    },
    #[error("KV block size {0} is not a power of two in 1..=1024")]
    BlockSize(usize),
    #[error(
        "the {format} KV cache type stores blocks of {block} values: the model's head \
         dimension {head_dim} is not a multiple of {block} (choose another cache type)"
    )]
    HeadDim {
        format: &'static str,
        block: usize,
        head_dim: usize,
    },
    #[error(
        "a KV cache of {tokens} tokens needs {bytes} bytes, more than this machine's memory \
         ({limit} bytes): lower -c"
    )]
    TooLarge {
        tokens: usize,
        bytes: u64,
        limit: u64,
    },
    #[error("a KV cache of {bytes} bytes does not fit the address space")]
    Overflow { bytes: u128 },
    #[error(
        "--kv-rotate applies a Hadamard transform to head rows of a power-of-two length: the \
         model's head dimension {head_dim} is not one (leave the rotation off)"
    )]
    RotateHeadDim { head_dim: usize },
    #[error(
        "the KV cache's rotation is chosen before it holds any rows (rotated and plain rows \
         cannot be mixed)"
    )]
    RotateInUse,
}
