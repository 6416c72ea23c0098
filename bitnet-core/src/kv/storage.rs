//! The bytes of the KV cache: every layer's K and V rows for a fixed number of blocks of
//! `block_tokens` positions, allocated once (64-byte aligned) and never grown, with the row
//! encoders and decoders of the chosen formats. Which block belongs to whom is not known
//! here (`blocks.rs` and `manager.rs` keep that).
//!
//! Each layer has a K side and a V side ([`KvLayer`], `storage/layer.rs`), each in its own
//! format: K and V are chosen independently, and so may each layer be (one pair for all
//! layers is the usual case, [`KvStorage::new`]; [`KvStorage::with_layers`] takes one pair
//! per layer). Layout of one side: `[kv head][block][position in block][head_dim]` in the
//! side's format's bytes, each head's part of a block padded to a multiple of 64 bytes. One
//! head's rows are what attention reads for a query group, so they lie next to each other,
//! [`KvLayer::k_head_bytes`] apart, and a run of consecutive blocks is one stretch of them
//! ([`KvLayer::k_run`]). Rows of all heads side by side (position-major) would put other
//! heads' rows between two rows of one head: the head-major layout was measured faster
//! (`bench/2026-11-23-f0840eb-kv-layout.md`).

use bitnet_kernels::{Isa, float};

use super::error::KvError;
use super::format::{KvFormat, KvType};

mod layer;

pub use layer::KvLayer;

/// Block ids are `u32`, with `u32::MAX` kept free as "no block".
pub(crate) const MAX_BLOCKS: usize = u32::MAX as usize;

/// The storage; see the module docs.
#[derive(Debug)]
pub struct KvStorage {
    isa: Isa,
    n_kv_heads: usize,
    n_blocks: usize,
    block_tokens: usize,
    head_dim: usize,
    /// Every layer's K and V, each pair in its own formats.
    layers: Vec<KvLayer>,
    /// Rows being rotated before they are encoded (grown to the largest write, then kept).
    rot_scratch: Vec<f32>,
}

/// RAM plus the page file where the OS tells (Windows: the commit limit).
#[cfg(windows)]
pub(crate) fn physical_memory_bytes() -> Option<u64> {
    crate::windows_memory::commit_limit_bytes()
}

/// RAM plus swap where the OS tells (Linux `/proc/meminfo`).
#[cfg(not(windows))]
pub(crate) fn physical_memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = info.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        kb.checked_mul(1024)
    };
    field("MemTotal:")?.checked_add(field("SwapTotal:").unwrap_or(0))
}

impl KvStorage {
    /// Bytes a cache of `n_tokens` tokens (rounded up to whole blocks) takes with K stored
    /// as `k_type` and V as `v_type` in every layer.
    pub fn bytes_for(
        n_layer: usize,
        n_kv_heads: usize,
        head_dim: usize,
        types: (KvType, KvType),
        n_tokens: usize,
        block_tokens: usize,
    ) -> u128 {
        layer_bytes(n_kv_heads, head_dim, types, n_tokens, block_tokens)
            .saturating_mul(n_layer as u128)
    }

    /// Bytes a cache of `n_tokens` tokens (rounded up to whole blocks) takes with layer `l`
    /// storing K and V as `layer_types[l]`: the sum of [`KvStorage::bytes_for`] of one
    /// layer over the list.
    pub fn bytes_for_layers(
        n_kv_heads: usize,
        head_dim: usize,
        layer_types: &[(KvType, KvType)],
        n_tokens: usize,
        block_tokens: usize,
    ) -> u128 {
        layer_types.iter().fold(0u128, |sum, &t| {
            sum.saturating_add(layer_bytes(n_kv_heads, head_dim, t, n_tokens, block_tokens))
        })
    }

    /// Storage with room for `n_tokens` tokens (rounded up to whole blocks of
    /// `block_tokens`), K stored as `k_type` and V as `v_type` in every layer, every byte
    /// allocated now.
    pub fn new(
        n_layer: usize,
        n_kv_heads: usize,
        head_dim: usize,
        (k_type, v_type): (KvType, KvType),
        n_tokens: usize,
        block_tokens: usize,
        isa: Isa,
    ) -> Result<KvStorage, KvError> {
        check_dimensions(n_layer, n_kv_heads, head_dim, n_tokens, block_tokens)?;
        for t in [k_type, v_type] {
            if t.row_bytes(head_dim).is_none() {
                return Err(head_dim_error(t, head_dim));
            }
        }
        let total = Self::bytes_for(
            n_layer,
            n_kv_heads,
            head_dim,
            (k_type, v_type),
            n_tokens,
            block_tokens,
        );
        let types = vec![(k_type, v_type); n_layer];
        Self::allocate(
            n_kv_heads,
            head_dim,
            &types,
            n_tokens,
            block_tokens,
            total,
            isa,
        )
    }

    /// As [`KvStorage::new`], with layer `l` storing K and V as `layer_types[l]` (the
    /// list's length is the number of layers). A format whose blocks do not divide
    /// `head_dim` is refused naming its first layer.
    pub fn with_layers(
        n_kv_heads: usize,
        head_dim: usize,
        layer_types: &[(KvType, KvType)],
        n_tokens: usize,
        block_tokens: usize,
        isa: Isa,
    ) -> Result<KvStorage, KvError> {
        let n_layer = layer_types.len();
        check_dimensions(n_layer, n_kv_heads, head_dim, n_tokens, block_tokens)?;
        for (layer, &(k, v)) in layer_types.iter().enumerate() {
            if let Some(t) = [k, v].into_iter().find(|t| t.row_bytes(head_dim).is_none()) {
                let fmt = t.format();
                return Err(KvError::LayerHeadDim {
                    layer,
                    format: fmt.name,
                    block: fmt.block_len,
                    head_dim,
                });
            }
        }
        let total =
            Self::bytes_for_layers(n_kv_heads, head_dim, layer_types, n_tokens, block_tokens);
        Self::allocate(
            n_kv_heads,
            head_dim,
            layer_types,
            n_tokens,
            block_tokens,
            total,
            isa,
        )
    }

    /// The storage of checked sizes and formats, `total` bytes in all: refused when it does
    /// not fit the address space or the machine.
    fn allocate(
        n_kv_heads: usize,
        head_dim: usize,
        layer_types: &[(KvType, KvType)],
        n_tokens: usize,
        block_tokens: usize,
        total: u128,
        isa: Isa,
    ) -> Result<KvStorage, KvError> {
        if total > isize::MAX as u128 / 2 {
            return Err(KvError::Overflow { bytes: total });
        }
        if let Some(limit) = physical_memory_bytes()
            && total > limit as u128
        {
            return Err(KvError::TooLarge {
                tokens: n_tokens,
                bytes: total as u64,
                limit,
            });
        }
        let n_blocks = n_tokens.div_ceil(block_tokens);
        if n_blocks >= MAX_BLOCKS {
            return Err(KvError::Overflow { bytes: total });
        }
        let layers = layer_types
            .iter()
            .map(|&t| {
                KvLayer::new(t, n_kv_heads, head_dim, n_blocks, block_tokens)
                    .map_err(|t| head_dim_error(t, head_dim))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(KvStorage {
            isa,
            n_kv_heads,
            n_blocks,
            block_tokens,
            head_dim,
            layers,
            rot_scratch: Vec::new(),
        })
    }

    /// Layer `layer`'s K and V rows and formats (what one layer's attention reads).
    pub fn layer(&self, layer: usize) -> &KvLayer {
        &self.layers[layer]
    }

    /// K's format in `layer`.
    pub fn k_format(&self, layer: usize) -> &'static KvFormat {
        self.layers[layer].k_format()
    }

    /// V's format in `layer`.
    pub fn v_format(&self, layer: usize) -> &'static KvFormat {
        self.layers[layer].v_format()
    }

    pub fn k_type(&self, layer: usize) -> KvType {
        self.layers[layer].k_type()
    }

    pub fn v_type(&self, layer: usize) -> KvType {
        self.layers[layer].v_type()
    }

    /// The K and V formats of every layer, in layer order.
    pub fn layer_types(&self) -> Vec<(KvType, KvType)> {
        self.layers
            .iter()
            .map(|l| (l.k_type(), l.v_type()))
            .collect()
    }

    /// Stores K and V rows of layer `l` Hadamard-rotated from now on where `sides[l]` says
    /// so (`(k, v)`; one entry per layer): each head's row `x` is kept as `H x /
    /// sqrt(head_dim)` (encoded in the side's format), which spreads a row's outliers over
    /// all its values before a low-bit format scales them. The transform is orthonormal and
    /// its own inverse, so attention stays exact: scores need the query rotated the same way
    /// ([`KvLayer::k_rotated`]), and a weighted sum of rotated values is rotated back once
    /// per head ([`KvLayer::v_rotated`]). [`KvStorage::write_rows`] takes and
    /// [`KvStorage::read_row`] gives plain rows either way. Chosen once, before any row is
    /// written (the KV manager refuses it later), so the rows of every sequence (and of the
    /// prefix cache) agree.
    pub fn set_rotation(&mut self, sides: &[(bool, bool)]) -> Result<(), KvError> {
        if sides.len() != self.layers.len() {
            return Err(KvError::LayerCount {
                what: "rotation",
                given: sides.len(),
                n_layer: self.layers.len(),
            });
        }
        if sides.iter().any(|&(k, v)| k || v) && !float::hadamard_supported(self.head_dim) {
            return Err(KvError::RotateHeadDim {
                head_dim: self.head_dim,
            });
        }
        for (layer, &(k, v)) in self.layers.iter_mut().zip(sides) {
            layer.set_rotation(k, v);
        }
        Ok(())
    }

    /// Whether K rows of `layer` are stored rotated (queries must be rotated before scoring
    /// them).
    pub fn k_rotated(&self, layer: usize) -> bool {
        self.layers[layer].k_rotated()
    }

    /// Whether V rows of `layer` are stored rotated (attention outputs are rotated back per
    /// head).
    pub fn v_rotated(&self, layer: usize) -> bool {
        self.layers[layer].v_rotated()
    }

    pub fn n_layer(&self) -> usize {
        self.layers.len()
    }

    pub fn n_kv_heads(&self) -> usize {
        self.n_kv_heads
    }

    pub fn block_tokens(&self) -> usize {
        self.block_tokens
    }

    pub fn n_blocks(&self) -> usize {
        self.n_blocks
    }

    /// Tokens the storage holds at most.
    pub fn capacity_tokens(&self) -> usize {
        self.n_blocks * self.block_tokens
    }

    /// Bytes of one head's part of a K row of `layer`: the distance between two positions
    /// of one head's rows.
    pub fn k_head_bytes(&self, layer: usize) -> usize {
        self.layers[layer].k_head_bytes()
    }

    /// Bytes of one head's part of a V row of `layer`.
    pub fn v_head_bytes(&self, layer: usize) -> usize {
        self.layers[layer].v_head_bytes()
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Bytes of K and V for every block of every layer.
    pub fn bytes(&self) -> u64 {
        self.layers.iter().map(KvLayer::bytes).sum()
    }

    /// Head `head`'s K rows of block `b` in `layer`.
    pub fn k_block(&self, layer: usize, head: usize, b: u32) -> &[u8] {
        self.k_run(layer, head, b, 1)
    }

    /// Head `head`'s V rows of block `b` in `layer`.
    pub fn v_block(&self, layer: usize, head: usize, b: u32) -> &[u8] {
        self.v_run(layer, head, b, 1)
    }

    /// Whether one head's rows of blocks with consecutive ids are consecutive in memory in
    /// `layer` (see [`KvLayer::blocks_are_contiguous`]).
    pub fn blocks_are_contiguous(&self, layer: usize) -> bool {
        self.layers[layer].blocks_are_contiguous()
    }

    /// Head `head`'s K rows of the `count` blocks `first..first + count` of `layer` as one
    /// slice (see [`KvLayer::k_run`]).
    pub fn k_run(&self, layer: usize, head: usize, first: u32, count: usize) -> &[u8] {
        self.layers[layer].k_run(head, first, count)
    }

    /// As [`KvStorage::k_run`] for V.
    pub fn v_run(&self, layer: usize, head: usize, first: u32, count: usize) -> &[u8] {
        self.layers[layer].v_run(head, first, count)
    }

    /// Encodes `n` consecutive K and V rows (`n * kv_dim` floats each, position-major as
    /// the projections give them) into block `b` of `layer` from position `slot` on (the
    /// caller makes sure the block is writable). Each head's `n` rows are gathered, rotated
    /// if the side is, and encoded in one call into their stretch of the block.
    pub fn write_rows(&mut self, layer: usize, b: u32, slot: usize, k: &[f32], v: &[f32]) {
        let (isa, hd, bt) = (self.isa, self.head_dim, self.block_tokens);
        let [ks, vs] = self.layers[layer].sides_mut();
        ks.write_rows(isa, hd, (b, slot, bt), k, &mut self.rot_scratch);
        vs.write_rows(isa, hd, (b, slot, bt), v, &mut self.rot_scratch);
    }

    /// Decodes K (or V) row `slot` of block `b` in `layer` (`kv_dim` floats).
    pub fn read_row(&self, layer: usize, b: u32, slot: usize, is_k: bool, out: &mut [f32]) {
        self.layers[layer]
            .side(is_k)
            .read_row(self.isa, self.head_dim, b, slot, out);
    }

    /// Head `head`'s first `n_rows` K (`is_k`) or V rows of block `b` in `layer`, as stored
    /// (a snapshot takes them without decoding).
    pub(crate) fn stored_rows(
        &self,
        is_k: bool,
        layer: usize,
        head: usize,
        b: u32,
        n_rows: usize,
    ) -> &[u8] {
        self.layers[layer].side(is_k).stored_rows(head, b, n_rows)
    }

    /// Puts rows taken with [`KvStorage::stored_rows`] (`bytes`, whole rows) at the start of
    /// head `head`'s part of block `b` in `layer` (the caller makes sure the block is
    /// writable).
    pub(crate) fn put_stored_rows(
        &mut self,
        is_k: bool,
        layer: usize,
        head: usize,
        b: u32,
        bytes: &[u8],
    ) {
        let bt = self.block_tokens;
        self.layers[layer]
            .side_mut(is_k)
            .put_stored_rows(head, b, bytes, bt);
    }

    /// Copies the first `n_rows` rows of block `src` to block `dst`, every layer and head, K
    /// and V (a block copied before its first write, see `KvManager::make_writable`).
    pub(crate) fn copy_rows(&mut self, src: u32, dst: u32, n_rows: usize) {
        for layer in &mut self.layers {
            for side in layer.sides_mut() {
                side.copy_rows(src, dst, n_rows);
            }
        }
    }
}

/// Refuses sizes that make no cache.
fn check_dimensions(
    n_layer: usize,
    n_kv_heads: usize,
    head_dim: usize,
    n_tokens: usize,
    block_tokens: usize,
) -> Result<(), KvError> {
    if n_layer == 0 || n_kv_heads == 0 || head_dim == 0 || n_tokens == 0 || block_tokens == 0 {
        return Err(KvError::ZeroDimension {
            n_layer,
            n_kv_heads,
            head_dim,
            n_tokens,
            block_tokens,
        });
    }
    if !block_tokens.is_power_of_two() || block_tokens > 1024 {
        return Err(KvError::BlockSize(block_tokens));
    }
    Ok(())
}

fn head_dim_error(t: KvType, head_dim: usize) -> KvError {
    let fmt = t.format();
    KvError::HeadDim {
        format: fmt.name,
        block: fmt.block_len,
        head_dim,
    }
}

/// Bytes of one layer's K and V for `n_tokens` tokens in whole blocks (a format whose
/// blocks do not divide `head_dim` counts as too large to make).
fn layer_bytes(
    n_kv_heads: usize,
    head_dim: usize,
    (k_type, v_type): (KvType, KvType),
    n_tokens: usize,
    block_tokens: usize,
) -> u128 {
    let bt = block_tokens.max(1) as u128;
    let blocks = (n_tokens as u128).div_ceil(bt);
    let side = |t: KvType| {
        let head = t.row_bytes(head_dim).unwrap_or(u64::MAX) as u128;
        let block = bt.saturating_mul(head).div_ceil(64).saturating_mul(64);
        (n_kv_heads as u128)
            .saturating_mul(blocks)
            .saturating_mul(block)
    };
    side(k_type).saturating_add(side(v_type))
}
