//! What the KV cache refuses: sizes that make no cache, a cache larger than the machine, a
//! rotation the head dimension or the cache's state does not allow, a full pool, a stale
//! sequence handle.

use thiserror::Error;

use super::sequence::SeqId;
use super::stats::PoolStats;

/// Errors of the KV cache.
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
    /// As `HeadDim`, for one layer of a cache whose layers have their own formats.
    #[error(
        "layer {layer}'s {format} KV cache type stores blocks of {block} values: the model's \
         head dimension {head_dim} is not a multiple of {block} (choose another cache type)"
    )]
    LayerHeadDim {
        layer: usize,
        format: &'static str,
        block: usize,
        head_dim: usize,
    },
    /// A per-layer setting whose list is not one entry per layer.
    #[error("{given} per-layer KV {what} settings for a cache of {n_layer} layers")]
    LayerCount {
        what: &'static str,
        given: usize,
        n_layer: usize,
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
    /// No block is left for positions a sequence needs.
    #[error(
        "the KV cache is full: {needed} more positions need blocks, {} of {} blocks are \
         held by sequences (raise -c, run fewer sequences at once, or end kept conversations)",
        stats.used, stats.n_blocks
    )]
    Full { needed: usize, stats: PoolStats },
    /// A handle of a sequence that was freed (or never made here).
    #[error("no live sequence {0}")]
    NoSequence(SeqId),
    /// Reusing or sharing a prefix starts from an empty sequence.
    #[error("{action} needs an empty sequence, {seq} holds tokens")]
    NotEmpty { action: &'static str, seq: SeqId },
    /// A snapshot of a sequence whose rows no longer follow its tokens' text.
    #[error(
        "sequence {seq} lost {removed} positions to a context shift or eviction: its rows \
         are not a prefix of its text, so they are not saved"
    )]
    Shifted { seq: SeqId, removed: usize },
    /// A snapshot made by a cache with other formats, rotation or shape.
    #[error("the saved KV rows are {snapshot}; this cache stores {cache}")]
    OtherLayout { snapshot: String, cache: String },
    #[error(
        "the saved KV holds {n} positions, more than a sequence may hold here ({max}): raise -c"
    )]
    SnapshotTooLong { n: usize, max: usize },
    /// A row asked for that the cache does not hold.
    #[error(
        "no K/V row at layer {layer}, position {pos} (the cache has {n_layer} layers, the \
         sequence {len} positions) for {floats} floats"
    )]
    NoRow {
        layer: usize,
        pos: usize,
        n_layer: usize,
        len: usize,
        floats: usize,
    },
}
