//! The bytes of the KV cache: every layer's K and V rows for a fixed number of blocks of
//! `block_tokens` positions, allocated once (64-byte aligned) and never grown, with the row
//! encoders and decoders of the chosen formats. Which block belongs to whom is not known
//! here (`blocks.rs` and `manager.rs` keep that).
//!
//! Layout: `k[layer][kv head][block][position in block][head_dim]` in K's format's bytes
//! (V the same in V's format: the two are chosen independently), each head's part of a
//! block padded to a multiple of 64 bytes. One head's rows are what attention reads for a
//! query group, so they lie next to each other, [`KvStorage::k_head_bytes`] apart, and a
//! run of consecutive blocks is one stretch of them ([`KvStorage::k_run`]). Rows of all
//! heads side by side (position-major) would put other heads' rows between two rows of one
//! head: the head-major layout was measured faster (`bench/2026-11-23-f0840eb-kv-layout.md`).

use bitnet_kernels::{AlignedVec, Isa, float};

use super::error::KvError;
use super::format::{KvFormat, KvType};

/// Block ids are `u32`, with `u32::MAX` kept free as "no block".
pub(crate) const MAX_BLOCKS: usize = u32::MAX as usize;

/// The K or the V half of the storage: its format and the sizes that follow from it.
#[derive(Debug)]
struct Side {
    fmt: &'static KvFormat,
    /// Bytes of one head's part of a row.
    head_bytes: usize,
    n_kv_heads: usize,
    /// Bytes of one head's rows in one block of one layer (padded to a multiple of 64).
    block_bytes: usize,
    /// Rows are stored Hadamard-rotated (`H / sqrt(head_dim)` applied to each head's row
    /// before encoding; see [`KvStorage::set_rotation`]).
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
    ) -> Result<Side, KvError> {
        let fmt = kv_type.format();
        let head_bytes = (fmt.row_bytes)(head_dim).ok_or(KvError::HeadDim {
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

/// The storage; see the module docs.
#[derive(Debug)]
pub struct KvStorage {
    isa: Isa,
    n_layer: usize,
    n_blocks: usize,
    block_tokens: usize,
    head_dim: usize,
    k: Side,
    v: Side,
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

    /// Storage with room for `n_tokens` tokens (rounded up to whole blocks of
    /// `block_tokens`), K stored as `k_type` and V as `v_type`, every byte allocated now.
    pub fn new(
        n_layer: usize,
        n_kv_heads: usize,
        head_dim: usize,
        (k_type, v_type): (KvType, KvType),
        n_tokens: usize,
        block_tokens: usize,
        isa: Isa,
    ) -> Result<KvStorage, KvError> {
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
        for t in [k_type, v_type] {
            let fmt = t.format();
            if (fmt.row_bytes)(head_dim).is_none() {
                return Err(KvError::HeadDim {
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
        let side = |t| Side::new(t, n_layer, n_kv_heads, head_dim, n_blocks, block_tokens);
        let (k, v) = (side(k_type)?, side(v_type)?);
        Ok(KvStorage {
            isa,
            n_layer,
            n_blocks,
            block_tokens,
            head_dim,
            k,
            v,
            rot_scratch: Vec::new(),
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

    pub fn v_type(&self) -> KvType {
        self.v.fmt.kind
    }

    /// Stores K (`k`) and V (`v`) rows Hadamard-rotated from now on: each head's row `x` is
    /// kept as `H x / sqrt(head_dim)` (encoded in the side's format), which spreads a row's
    /// outliers over all its values before a low-bit format scales them. The transform is
    /// orthonormal and its own inverse, so attention stays exact: scores need the query
    /// rotated the same way ([`KvStorage::k_rotated`]), and a weighted sum of rotated values
    /// is rotated back once per head ([`KvStorage::v_rotated`]). [`KvStorage::write_rows`]
    /// takes and [`KvStorage::read_row`] gives plain rows either way. Chosen once, before
    /// any row is written (the KV manager refuses it later), so the rows of every sequence
    /// (and of the prefix cache) agree.
    pub fn set_rotation(&mut self, k: bool, v: bool) -> Result<(), KvError> {
        if (k || v) && !float::hadamard_supported(self.head_dim) {
            return Err(KvError::RotateHeadDim {
                head_dim: self.head_dim,
            });
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

    pub fn n_layer(&self) -> usize {
        self.n_layer
    }

    pub fn n_kv_heads(&self) -> usize {
        self.k.n_kv_heads
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
    /// slice (rows of one block at a time unless [`KvStorage::blocks_are_contiguous`]).
    pub fn k_run(&self, layer: usize, head: usize, first: u32, count: usize) -> &[u8] {
        let start = self.k.at(self.n_blocks, layer, head, first);
        &self.k.data[start..start + count * self.k.block_bytes]
    }

    /// As [`KvStorage::k_run`] for V.
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
        let side = if is_k { &self.k } else { &self.v };
        let start = side.at(self.n_blocks, layer, head, b);
        &side.data[start..start + n_rows * side.head_bytes]
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
        let n_blocks = self.n_blocks;
        let bt = self.block_tokens;
        let side = if is_k { &mut self.k } else { &mut self.v };
        // A real check: past the block, the rows would land in the next block of this head.
        assert!(
            bytes.len().is_multiple_of(side.head_bytes) && bytes.len() <= bt * side.head_bytes,
            "rows past the block"
        );
        let start = side.at(n_blocks, layer, head, b);
        side.data[start..start + bytes.len()].copy_from_slice(bytes);
    }

    /// Copies the first `n_rows` rows of block `src` to block `dst`, every layer and head, K
    /// and V (a block copied before its first write, see `KvManager::make_writable`).
    pub(crate) fn copy_rows(&mut self, src: u32, dst: u32, n_rows: usize) {
        for side in [&mut self.k, &mut self.v] {
            let len = n_rows * side.head_bytes;
            for layer in 0..self.n_layer {
                for h in 0..side.n_kv_heads {
                    let from = side.at(self.n_blocks, layer, h, src);
                    let to = side.at(self.n_blocks, layer, h, dst);
                    side.data.copy_within(from..from + len, to);
                }
            }
        }
    }
}
