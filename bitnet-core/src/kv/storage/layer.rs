//! One layer's KV bytes ([`KvLayer`]): its K side and its V side, each in its own format,
//! with the row size, padded block size and rotation that follow from it, and its own
//! allocation. Layers may differ in all of these (a calibration picks a format per layer);
//! within a layer the layout is the one `storage.rs` describes, head-major, each head's part
//! of a block padded to a multiple of 64 bytes.
//!
//! Attention takes one layer's [`KvLayer`] once per pass, so the per-layer lookup is paid
//! once per layer, not per row or per block.

use bitnet_kernels::{AlignedVec, Isa, float};

use crate::kv::format::{KvFormat, KvType};

/// The K or the V half of one layer: its format and the sizes that follow from it.
#[derive(Debug)]
pub(super) struct Side {
    fmt: &'static KvFormat,
    /// Bytes of one head's part of a row.
    head_bytes: usize,
    n_kv_heads: usize,
    n_blocks: usize,
    /// Bytes of one head's rows in one block (padded to a multiple of 64).
    block_bytes: usize,
    /// Rows are stored Hadamard-rotated (`H / sqrt(head_dim)` applied to each head's row
    /// before encoding; see `KvStorage::set_rotation`).
    rotated: bool,
    /// `[kv head][block][position][head row]`.
    data: AlignedVec<u8>,
}

/// Bytes of one head's rows of a block: `block_tokens` rows of `head_bytes`, padded to a
/// multiple of 64 (the sizes `KvStorage::bytes_for` counts with).
fn padded_block_bytes(block_tokens: usize, head_bytes: usize) -> usize {
    (block_tokens * head_bytes).div_ceil(64) * 64
}

impl Side {
    /// `None` when `head_dim` is not a whole number of the format's blocks.
    fn new(
        kv_type: KvType,
        n_kv_heads: usize,
        head_dim: usize,
        n_blocks: usize,
        block_tokens: usize,
    ) -> Option<Side> {
        let fmt = kv_type.format();
        let head_bytes = (fmt.row_bytes)(head_dim)?;
        let block_bytes = padded_block_bytes(block_tokens, head_bytes);
        Some(Side {
            fmt,
            head_bytes,
            n_kv_heads,
            n_blocks,
            block_bytes,
            rotated: false,
            data: AlignedVec::zeroed(n_kv_heads * n_blocks * block_bytes),
        })
    }

    /// Where head `head`'s rows of block `b` start.
    fn at(&self, head: usize, b: u32) -> usize {
        (head * self.n_blocks + b as usize) * self.block_bytes
    }

    /// Head `head`'s rows of the `count` blocks `first..first + count`.
    fn run(&self, head: usize, first: u32, count: usize) -> &[u8] {
        let start = self.at(head, first);
        &self.data[start..start + count * self.block_bytes]
    }

    /// Encodes `n` rows of `x` (`n * n_kv_heads * hd` floats, position-major) into block `b`
    /// from position `slot` on; `scratch` holds one head's rows while they are gathered and
    /// rotated.
    pub(super) fn write_rows(
        &mut self,
        isa: Isa,
        hd: usize,
        (b, slot, block_tokens): (u32, usize, usize),
        x: &[f32],
        scratch: &mut Vec<f32>,
    ) {
        let nh = self.n_kv_heads;
        let n = x.len() / (nh * hd);
        // A real check: past the block, the rows would land in the next block of this head,
        // which may be shared or cached.
        assert!(slot + n <= block_tokens, "rows past the block");
        for h in 0..nh {
            scratch.clear();
            scratch.extend(
                x.chunks_exact(nh * hd)
                    .flat_map(|row| &row[h * hd..(h + 1) * hd]),
            );
            if self.rotated {
                float::hadamard_rows(isa, hd, scratch);
            }
            let start = self.at(h, b) + slot * self.head_bytes;
            (self.fmt.encode)(
                isa,
                hd,
                scratch,
                &mut self.data[start..start + n * self.head_bytes],
            );
        }
    }

    /// Decodes row `slot` of block `b` (every head: `n_kv_heads * hd` floats) into `out`.
    pub(super) fn read_row(&self, isa: Isa, hd: usize, b: u32, slot: usize, out: &mut [f32]) {
        for (h, o) in out.chunks_exact_mut(hd).enumerate() {
            let start = self.at(h, b) + slot * self.head_bytes;
            (self.fmt.decode)(isa, &self.data[start..start + self.head_bytes], o);
            if self.rotated {
                // H is its own inverse: this gives the plain row back.
                float::hadamard_rows(isa, hd, o);
            }
        }
    }

    /// Head `head`'s first `n_rows` rows of block `b`, as stored.
    pub(super) fn stored_rows(&self, head: usize, b: u32, n_rows: usize) -> &[u8] {
        let start = self.at(head, b);
        &self.data[start..start + n_rows * self.head_bytes]
    }

    /// Puts whole stored rows at the start of head `head`'s part of block `b`.
    pub(super) fn put_stored_rows(
        &mut self,
        head: usize,
        b: u32,
        bytes: &[u8],
        block_tokens: usize,
    ) {
        // A real check: past the block, the rows would land in the next block of this head.
        assert!(
            bytes.len().is_multiple_of(self.head_bytes)
                && bytes.len() <= block_tokens * self.head_bytes,
            "rows past the block"
        );
        let start = self.at(head, b);
        self.data[start..start + bytes.len()].copy_from_slice(bytes);
    }

    /// Copies the first `n_rows` rows of block `src` to block `dst`, every head.
    pub(super) fn copy_rows(&mut self, src: u32, dst: u32, n_rows: usize) {
        let len = n_rows * self.head_bytes;
        for h in 0..self.n_kv_heads {
            let (from, to) = (self.at(h, src), self.at(h, dst));
            self.data.copy_within(from..from + len, to);
        }
    }
}

/// One layer's K and V rows; see the module docs.
#[derive(Debug)]
pub struct KvLayer {
    k: Side,
    v: Side,
    /// Neither side pads a block's rows (see [`KvLayer::blocks_are_contiguous`]).
    contiguous: bool,
}

impl KvLayer {
    /// A layer storing K as `k_type` and V as `v_type`, zeroed. `Err` names the type
    /// whose blocks do not divide `head_dim`.
    pub(super) fn new(
        (k_type, v_type): (KvType, KvType),
        n_kv_heads: usize,
        head_dim: usize,
        n_blocks: usize,
        block_tokens: usize,
    ) -> Result<KvLayer, KvType> {
        let side = |t| Side::new(t, n_kv_heads, head_dim, n_blocks, block_tokens).ok_or(t);
        let (k, v) = (side(k_type)?, side(v_type)?);
        let contiguous = [&k, &v]
            .iter()
            .all(|s| s.block_bytes == block_tokens * s.head_bytes);
        Ok(KvLayer { k, v, contiguous })
    }

    pub(super) fn side(&self, is_k: bool) -> &Side {
        if is_k { &self.k } else { &self.v }
    }

    pub(super) fn side_mut(&mut self, is_k: bool) -> &mut Side {
        if is_k { &mut self.k } else { &mut self.v }
    }

    /// Both sides, K first, for writes that touch both.
    pub(super) fn sides_mut(&mut self) -> [&mut Side; 2] {
        [&mut self.k, &mut self.v]
    }

    pub(super) fn set_rotation(&mut self, k: bool, v: bool) {
        self.k.rotated = k;
        self.v.rotated = v;
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

    /// Whether K rows are stored rotated (queries must be rotated before scoring them).
    pub fn k_rotated(&self) -> bool {
        self.k.rotated
    }

    /// Whether V rows are stored rotated (attention outputs are rotated back per head).
    pub fn v_rotated(&self) -> bool {
        self.v.rotated
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

    /// Bytes of this layer's K and V for every block.
    pub fn bytes(&self) -> u64 {
        (self.k.data.len() + self.v.data.len()) as u64
    }

    /// Whether one head's rows of blocks with consecutive ids are consecutive in memory (no
    /// padding after a block's rows, in K and in V), so a run of blocks reads as one
    /// stretch of rows.
    pub fn blocks_are_contiguous(&self) -> bool {
        self.contiguous
    }

    /// Head `head`'s K rows of the `count` blocks `first..first + count` as one slice (rows
    /// of one block at a time unless [`KvLayer::blocks_are_contiguous`]).
    pub fn k_run(&self, head: usize, first: u32, count: usize) -> &[u8] {
        self.k.run(head, first, count)
    }

    /// As [`KvLayer::k_run`] for V.
    pub fn v_run(&self, head: usize, first: u32, count: usize) -> &[u8] {
        self.v.run(head, first, count)
    }
}
