//! The paged KV pool: every layer's K and V rows for a fixed number of blocks of
//! `block_tokens` positions, allocated once (64-byte aligned) and never grown. Blocks are
//! reference-counted so sequences can share them (a fork shares its parent's blocks; a
//! prompt that starts like a cached one shares the cached blocks), and a block that holds a
//! known token prefix stays registered in the prefix cache after its last user let go,
//! until the pool needs it back (least recently released first).
//!
//! Layout: `k[layer][kv head][block][position in block][head_dim]` in K's format's bytes
//! (V the same in V's format: the two are chosen independently), each head's part of a
//! block padded to a multiple of 64 bytes. One head's rows are what attention reads for a
//! query group, so they lie next to each other, [`KvPool::k_head_bytes`] apart, and a run of
//! consecutive blocks is one stretch of them ([`KvPool::k_run`]). Rows of all heads side by
//! side (position-major) put 1 KiB of other heads between two rows of one head on the 2B-4T
//! shape, and one KV head's scores and weighted sum over 4,096 f16 positions took 1.9x as
//! long (criterion `attention_f16_4096pos_group4`, 706 against 369 us).
//!
//! Rules that keep sharing safe: a block is written only by a sequence that holds it alone
//! and only if it is not registered (registered blocks are immutable: their rows are the
//! cache's promise); anything else is copied first ([`KvPool::make_writable`]).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use bitnet_kernels::{AlignedVec, Isa, float};
use thiserror::Error;

use super::format::{KvFormat, KvType};

/// No block / no node.
const NONE: u32 = u32::MAX;
/// The node id every sequence's first block hangs from.
pub(crate) const ROOT_NODE: u64 = 0;

/// Errors of the pool.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KvPoolError {
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

/// Occupancy of the pool.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PoolStats {
    pub n_blocks: usize,
    pub block_tokens: usize,
    /// Blocks no one holds and nothing caches.
    pub free: usize,
    /// Blocks no one holds that keep a cached prefix (reusable, evicted on demand).
    pub cached: usize,
    /// Blocks held by at least one sequence.
    pub used: usize,
    /// Bytes of K and V for all blocks.
    pub bytes: u64,
}

impl PoolStats {
    /// Blocks a new sequence can get (free, or evicted from the prefix cache).
    pub fn available(&self) -> usize {
        self.free + self.cached
    }
}

#[derive(Clone, Debug)]
struct BlockMeta {
    refs: u32,
    /// Prefix-cache node id while registered (0 = not registered).
    node: u64,
    /// The node of the block before this one in its sequence ([`ROOT_NODE`] for the first).
    parent: u64,
    /// Valid token rows of a registered block (a full block has `block_tokens`).
    n_tokens: u32,
    /// LRU links while registered and unheld.
    prev: u32,
    next: u32,
}

/// The K or the V half of the pool: its format and the sizes that follow from it.
#[derive(Debug)]
struct Side {
    fmt: &'static KvFormat,
    /// Bytes of one head's part of a row.
    head_bytes: usize,
    n_kv_heads: usize,
    /// Bytes of one head's rows in one block of one layer (padded to a multiple of 64).
    block_bytes: usize,
    /// Rows are stored Hadamard-rotated (`H / sqrt(head_dim)` applied to each head's row
    /// before encoding; see [`KvPool::set_rotation`]).
    rotated: bool,
    data: AlignedVec<u8>,
}

impl Side {
    fn new(
        kv_type: KvType,
        n_layer: usize,
        n_kv_heads: usize,
        head_dim: usize,
        n_blocks: usize,
        block_tokens: usize,
    ) -> Result<Side, KvPoolError> {
        let fmt = kv_type.format();
        let head_bytes = (fmt.row_bytes)(head_dim).ok_or(KvPoolError::HeadDim {
            format: fmt.name,
            block: fmt.block_len,
            head_dim,
        })?;
        let block_bytes = (block_tokens * head_bytes).div_ceil(64) * 64;
        Ok(Side {
            fmt,
            head_bytes,
            n_kv_heads,
            block_bytes,
            rotated: false,
            data: AlignedVec::zeroed(n_layer * n_kv_heads * n_blocks * block_bytes),
        })
    }

    /// Where head `head`'s rows of block `b` in `layer` start.
    fn at(&self, n_blocks: usize, layer: usize, head: usize, b: u32) -> usize {
        ((layer * self.n_kv_heads + head) * n_blocks + b as usize) * self.block_bytes
    }
}

/// The pool; see the module docs.
#[derive(Debug)]
pub struct KvPool {
    isa: Isa,
    n_layer: usize,
    n_blocks: usize,
    block_tokens: usize,
    head_dim: usize,
    k: Side,
    v: Side,
    /// Rows being rotated before they are encoded (grown to the largest write, then kept).
    rot_scratch: Vec<f32>,
    meta: Vec<BlockMeta>,
    /// The tokens of each registered block (`block_tokens` per block).
    tokens: Vec<u32>,
    free: Vec<u32>,
    lru_head: u32,
    lru_tail: u32,
    n_cached: usize,
    /// Full registered blocks by the hash of (parent node, tokens).
    by_key: HashMap<u64, u32>,
    next_node: u64,
    hasher: std::hash::RandomState,
}

/// RAM plus swap where the OS tells (Linux `/proc/meminfo`).
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

impl KvPool {
    /// Bytes a pool of `n_tokens` tokens (rounded up to whole blocks) takes with K stored
    /// as `k_type` and V as `v_type`.
    pub fn bytes_for(
        n_layer: usize,
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
            n_layer as u128 * n_kv_heads as u128 * blocks * (bt * head).div_ceil(64) * 64
        };
        side(k_type).saturating_add(side(v_type))
    }

    /// A pool with room for `n_tokens` tokens (rounded up to whole blocks of
    /// `block_tokens`), K stored as `k_type` and V as `v_type`, every byte allocated now.
    pub fn new(
        n_layer: usize,
        n_kv_heads: usize,
        head_dim: usize,
        (k_type, v_type): (KvType, KvType),
        n_tokens: usize,
        block_tokens: usize,
        isa: Isa,
    ) -> Result<KvPool, KvPoolError> {
        if n_layer == 0 || n_kv_heads == 0 || head_dim == 0 || n_tokens == 0 || block_tokens == 0 {
            return Err(KvPoolError::ZeroDimension {
                n_layer,
                n_kv_heads,
                head_dim,
                n_tokens,
                block_tokens,
            });
        }
        if !block_tokens.is_power_of_two() || block_tokens > 1024 {
            return Err(KvPoolError::BlockSize(block_tokens));
        }
        for t in [k_type, v_type] {
            let fmt = t.format();
            if (fmt.row_bytes)(head_dim).is_none() {
                return Err(KvPoolError::HeadDim {
                    format: fmt.name,
                    block: fmt.block_len,
                    head_dim,
                });
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
        if total > isize::MAX as u128 / 2 {
            return Err(KvPoolError::Overflow { bytes: total });
        }
        if let Some(limit) = physical_memory_bytes()
            && total > limit as u128
        {
            return Err(KvPoolError::TooLarge {
                tokens: n_tokens,
                bytes: total as u64,
                limit,
            });
        }
        let n_blocks = n_tokens.div_ceil(block_tokens);
        if n_blocks >= NONE as usize {
            return Err(KvPoolError::Overflow { bytes: total });
        }
        let side = |t| Side::new(t, n_layer, n_kv_heads, head_dim, n_blocks, block_tokens);
        let (k, v) = (side(k_type)?, side(v_type)?);
        let meta = BlockMeta {
            refs: 0,
            node: 0,
            parent: ROOT_NODE,
            n_tokens: 0,
            prev: NONE,
            next: NONE,
        };
        let mut by_key = HashMap::new();
        by_key.reserve(n_blocks);
        Ok(KvPool {
            isa,
            n_layer,
            n_blocks,
            block_tokens,
            head_dim,
            k,
            v,
            rot_scratch: Vec::new(),
            meta: vec![meta; n_blocks],
            tokens: vec![0; n_blocks * block_tokens],
            // Lowest ids first out, so a fresh pool fills from the start.
            free: (0..n_blocks as u32).rev().collect(),
            lru_head: NONE,
            lru_tail: NONE,
            n_cached: 0,
            by_key,
            next_node: ROOT_NODE + 1,
            hasher: std::hash::RandomState::new(),
        })
    }

    /// K's format.
    pub fn k_format(&self) -> &'static KvFormat {
        self.k.fmt
    }

    /// V's format.
    pub fn v_format(&self) -> &'static KvFormat {
        self.v.fmt
    }

    pub fn k_type(&self) -> KvType {
        self.k.fmt.kind
    }

    /// Stores K (`k`) and V (`v`) rows Hadamard-rotated from now on: each head's row `x` is
    /// kept as `H x / sqrt(head_dim)` (encoded in the side's format), which spreads a row's
    /// outliers over all its values before a low-bit format scales them. The transform is
    /// orthonormal and its own inverse, so attention stays exact: scores need the query
    /// rotated the same way ([`KvPool::k_rotated`]), and a weighted sum of rotated values
    /// is rotated back once per head ([`KvPool::v_rotated`]). [`KvPool::write_rows`] takes
    /// and [`KvPool::read_row`] gives plain rows either way. Chosen once, before any block
    /// is used, so the rows of every sequence (and of the prefix cache) agree.
    pub fn set_rotation(&mut self, k: bool, v: bool) -> Result<(), KvPoolError> {
        if (k || v) && !bitnet_kernels::float::hadamard_supported(self.head_dim) {
            return Err(KvPoolError::RotateHeadDim {
                head_dim: self.head_dim,
            });
        }
        if self.free.len() != self.n_blocks {
            return Err(KvPoolError::RotateInUse);
        }
        self.k.rotated = k;
        self.v.rotated = v;
        Ok(())
    }

    /// Whether K rows are stored rotated (queries must be rotated before scoring them).
    pub fn k_rotated(&self) -> bool {
        self.k.rotated
    }

    /// Whether V rows are stored rotated (attention outputs are rotated back per head).
    pub fn v_rotated(&self) -> bool {
        self.v.rotated
    }

    pub fn v_type(&self) -> KvType {
        self.v.fmt.kind
    }

    pub fn block_tokens(&self) -> usize {
        self.block_tokens
    }

    pub fn n_blocks(&self) -> usize {
        self.n_blocks
    }

    /// Tokens the pool holds at most.
    pub fn capacity_tokens(&self) -> usize {
        self.n_blocks * self.block_tokens
    }

    /// Bytes of one head's part of a K row: the distance between two positions of one
    /// head's rows.
    pub fn k_head_bytes(&self) -> usize {
        self.k.head_bytes
    }

    /// Bytes of one head's part of a V row.
    pub fn v_head_bytes(&self) -> usize {
        self.v.head_bytes
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Bytes of K and V for every block.
    pub fn bytes(&self) -> u64 {
        (self.k.data.len() + self.v.data.len()) as u64
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            n_blocks: self.n_blocks,
            block_tokens: self.block_tokens,
            free: self.free.len(),
            cached: self.n_cached,
            used: self.n_blocks - self.free.len() - self.n_cached,
            bytes: self.bytes(),
        }
    }

    /// Holders of block `b`.
    pub fn refs(&self, b: u32) -> u32 {
        self.meta[b as usize].refs
    }

    /// Whether block `b` keeps a cached prefix (and so must not be written).
    pub fn is_registered(&self, b: u32) -> bool {
        self.meta[b as usize].node != 0
    }

    /// Head `head`'s K rows of block `b` in `layer`.
    pub fn k_block(&self, layer: usize, head: usize, b: u32) -> &[u8] {
        self.k_run(layer, head, b, 1)
    }

    /// Head `head`'s V rows of block `b` in `layer`.
    pub fn v_block(&self, layer: usize, head: usize, b: u32) -> &[u8] {
        self.v_run(layer, head, b, 1)
    }

    /// Whether one head's rows of blocks with consecutive ids are consecutive in memory (no
    /// padding after a block's rows, in K and in V), so a run of blocks reads as one
    /// stretch of rows.
    pub fn blocks_are_contiguous(&self) -> bool {
        [&self.k, &self.v]
            .iter()
            .all(|s| s.block_bytes == self.block_tokens * s.head_bytes)
    }

    /// Head `head`'s K rows of the `count` blocks `first..first + count` of `layer` as one
    /// slice (rows of one block at a time unless [`KvPool::blocks_are_contiguous`]).
    pub fn k_run(&self, layer: usize, head: usize, first: u32, count: usize) -> &[u8] {
        let start = self.k.at(self.n_blocks, layer, head, first);
        &self.k.data[start..start + count * self.k.block_bytes]
    }

    /// As [`KvPool::k_run`] for V.
    pub fn v_run(&self, layer: usize, head: usize, first: u32, count: usize) -> &[u8] {
        let start = self.v.at(self.n_blocks, layer, head, first);
        &self.v.data[start..start + count * self.v.block_bytes]
    }

    /// Encodes `n` consecutive K and V rows (`n * kv_dim` floats each, position-major as
    /// the projections give them) into block `b` of `layer` from position `slot` on (the
    /// caller makes sure the block is writable). Each head's `n` rows are gathered, rotated
    /// if the side is, and encoded in one call into their stretch of the block.
    pub fn write_rows(&mut self, layer: usize, b: u32, slot: usize, k: &[f32], v: &[f32]) {
        let (n_blocks, isa, hd) = (self.n_blocks, self.isa, self.head_dim);
        let scratch = &mut self.rot_scratch;
        for (side, x) in [(&mut self.k, k), (&mut self.v, v)] {
            let nh = side.n_kv_heads;
            let n = x.len() / (nh * hd);
            // A real check: past the block, the rows would land in the next block of this head,
            // which may be shared or cached.
            assert!(slot + n <= self.block_tokens, "rows past the block");
            for h in 0..nh {
                scratch.clear();
                scratch.extend(
                    x.chunks_exact(nh * hd)
                        .flat_map(|row| &row[h * hd..(h + 1) * hd]),
                );
                if side.rotated {
                    float::hadamard_rows(isa, hd, scratch);
                }
                let start = side.at(n_blocks, layer, h, b) + slot * side.head_bytes;
                (side.fmt.encode)(
                    isa,
                    hd,
                    scratch,
                    &mut side.data[start..start + n * side.head_bytes],
                );
            }
        }
    }

    /// Decodes K (or V) row `slot` of block `b` in `layer` (`kv_dim` floats).
    pub fn read_row(&self, layer: usize, b: u32, slot: usize, is_k: bool, out: &mut [f32]) {
        let side = if is_k { &self.k } else { &self.v };
        for (h, o) in out.chunks_exact_mut(self.head_dim).enumerate() {
            let start = side.at(self.n_blocks, layer, h, b) + slot * side.head_bytes;
            (side.fmt.decode)(self.isa, &side.data[start..start + side.head_bytes], o);
            if side.rotated {
                // H is its own inverse: this gives the plain row back.
                float::hadamard_rows(self.isa, self.head_dim, o);
            }
        }
    }

    /// A block for a sequence to own (refs = 1): a free one, else the least recently
    /// released cached one (dropped from the cache). `None` when every block is held.
    pub fn alloc(&mut self) -> Option<u32> {
        let b = match self.free.pop() {
            Some(b) => b,
            None => {
                let b = self.lru_head;
                if b == NONE {
                    return None;
                }
                self.unregister(b);
                b
            }
        };
        self.meta[b as usize].refs = 1;
        Some(b)
    }

    /// One more holder of `b` (a fork, or a prefix-cache hit).
    pub fn retain(&mut self, b: u32) {
        let m = &self.meta[b as usize];
        if m.refs == 0 && m.node != 0 {
            self.lru_remove(b);
        }
        self.meta[b as usize].refs += 1;
    }

    /// One holder fewer: an unheld registered block joins the cache's LRU list, any other
    /// unheld block the free list.
    pub fn release(&mut self, b: u32) {
        let m = &mut self.meta[b as usize];
        debug_assert!(m.refs > 0, "release of an unheld block");
        m.refs = m.refs.saturating_sub(1);
        if m.refs > 0 {
            return;
        }
        if m.node != 0 {
            self.lru_push(b);
        } else {
            self.free.push(b);
        }
    }

    /// Makes `b` writable for a sequence holding it whose first `n_rows` rows are valid:
    /// `b` itself if the sequence holds it alone and it is not registered, else a copy of
    /// those rows in a fresh block (and `b` released); with no block for the copy, `b`
    /// itself taken out of the prefix cache if the sequence holds it alone. `None` when a
    /// shared block cannot be copied.
    pub fn make_writable(&mut self, b: u32, n_rows: usize) -> Option<u32> {
        let m = &self.meta[b as usize];
        if m.refs == 1 && m.node == 0 {
            return Some(b);
        }
        let sole = m.refs == 1;
        let Some(nb) = self.alloc() else {
            // No block for a copy: a block held by this sequence alone leaves the prefix
            // cache instead (its cached text is lost, the sequence goes on), so a sequence's
            // own cached tail never costs a block the pool does not have.
            if sole {
                self.unregister(b);
                return Some(b);
            }
            return None;
        };
        for side in [&mut self.k, &mut self.v] {
            let len = n_rows * side.head_bytes;
            for layer in 0..self.n_layer {
                for h in 0..side.n_kv_heads {
                    let src = side.at(self.n_blocks, layer, h, b);
                    let dst = side.at(self.n_blocks, layer, h, nb);
                    side.data.copy_within(src..src + len, dst);
                }
            }
        }
        self.release(b);
        Some(nb)
    }

    /// Like [`KvPool::make_writable`], for a sequence about to overwrite rows it already
    /// holds (a shift): a block it holds alone is taken out of the prefix cache and kept
    /// rather than copied, since the cached text will not be there any more.
    pub fn make_exclusive(&mut self, b: u32, n_rows: usize) -> Option<u32> {
        if self.meta[b as usize].refs == 1 {
            self.unregister(b);
            return Some(b);
        }
        self.make_writable(b, n_rows)
    }

    fn key(&self, parent: u64, tokens: &[u32]) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write_u64(parent);
        for &t in tokens {
            h.write_u32(t);
        }
        h.finish()
    }

    fn block_tokens_of(&self, b: u32) -> &[u32] {
        let n = self.meta[b as usize].n_tokens as usize;
        &self.tokens[b as usize * self.block_tokens..][..n]
    }

    /// The registered full block holding `tokens` after the prefix `parent`, if any.
    pub fn lookup_full(&self, parent: u64, tokens: &[u32]) -> Option<(u32, u64)> {
        debug_assert_eq!(tokens.len(), self.block_tokens);
        let b = *self.by_key.get(&self.key(parent, tokens))?;
        let m = &self.meta[b as usize];
        (m.node != 0 && m.parent == parent && self.block_tokens_of(b) == tokens)
            .then_some((b, m.node))
    }

    /// The registered block after prefix `parent` that shares the longest start with
    /// `tokens` (a full or a partial one), and how many of its rows match. A linear scan,
    /// run once per admitted prompt, not per token.
    pub fn lookup_partial(&self, parent: u64, tokens: &[u32]) -> Option<(u32, usize)> {
        let mut best: Option<(u32, usize)> = None;
        for (b, m) in self.meta.iter().enumerate() {
            if m.node == 0 || m.parent != parent {
                continue;
            }
            let have = self.block_tokens_of(b as u32);
            let n = have.iter().zip(tokens).take_while(|(a, b)| a == b).count();
            if n > 0 && best.is_none_or(|(_, bn)| n > bn) {
                best = Some((b as u32, n));
            }
        }
        best
    }

    /// Registers block `b`, which holds `tokens` (at most a block) after prefix `parent`,
    /// in the prefix cache; returns the node id the next block of the sequence hangs from.
    /// When an equal full block is registered already, `b` stays unregistered and that
    /// block's node is returned (the prefix is the same).
    pub fn register(&mut self, b: u32, parent: u64, tokens: &[u32]) -> u64 {
        let full = tokens.len() == self.block_tokens;
        if full && let Some((_, node)) = self.lookup_full(parent, tokens) {
            return node;
        }
        if self.meta[b as usize].node != 0 {
            return self.meta[b as usize].node;
        }
        let node = self.next_node;
        self.next_node += 1;
        let bt = self.block_tokens;
        self.tokens[b as usize * bt..][..tokens.len()].copy_from_slice(tokens);
        let m = &mut self.meta[b as usize];
        m.node = node;
        m.parent = parent;
        m.n_tokens = tokens.len() as u32;
        if full {
            let key = self.key(parent, tokens);
            // A 64-bit collision with another prefix: that one keeps the slot.
            self.by_key.entry(key).or_insert(b);
        }
        node
    }

    fn unregister(&mut self, b: u32) {
        let (node, refs, parent, n_tokens) = {
            let m = &self.meta[b as usize];
            (m.node, m.refs, m.parent, m.n_tokens)
        };
        if node == 0 {
            return;
        }
        if refs == 0 {
            self.lru_remove(b);
        }
        if n_tokens as usize == self.block_tokens {
            let key = self.key(parent, self.block_tokens_of(b));
            if self.by_key.get(&key) == Some(&b) {
                self.by_key.remove(&key);
            }
        }
        let m = &mut self.meta[b as usize];
        m.node = 0;
        m.n_tokens = 0;
    }

    /// Drops every cached prefix (their blocks become free).
    pub fn clear_cache(&mut self) {
        while self.lru_head != NONE {
            let b = self.lru_head;
            self.unregister(b);
            self.free.push(b);
        }
        for b in 0..self.n_blocks as u32 {
            self.unregister(b);
        }
    }

    fn lru_push(&mut self, b: u32) {
        let tail = self.lru_tail;
        {
            let m = &mut self.meta[b as usize];
            m.prev = tail;
            m.next = NONE;
        }
        if tail == NONE {
            self.lru_head = b;
        } else {
            self.meta[tail as usize].next = b;
        }
        self.lru_tail = b;
        self.n_cached += 1;
    }

    fn lru_remove(&mut self, b: u32) {
        let (prev, next) = {
            let m = &self.meta[b as usize];
            (m.prev, m.next)
        };
        if prev == NONE {
            self.lru_head = next;
        } else {
            self.meta[prev as usize].next = next;
        }
        if next == NONE {
            self.lru_tail = prev;
        } else {
            self.meta[next as usize].prev = prev;
        }
        let m = &mut self.meta[b as usize];
        m.prev = NONE;
        m.next = NONE;
        self.n_cached -= 1;
    }
}
