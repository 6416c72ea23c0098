//! The attention key/value cache: allocated once for the whole context, never grown.
//!
//! Per layer, K and V each hold `n_ctx` rows of `kv_dim = n_kv_heads * head_dim` elements,
//! position-major (`[pos][head][dim]`), so the attention kernels read head `h` of position
//! `p` at `p * kv_dim + h * head_dim` with `kv_stride = kv_dim`. Rows are stored as f16 bits
//! ([`KvType::F16`], what the engine uses) or as ggml Q8_0 blocks ([`KvType::Q8_0`], 34 bytes
//! per 32 elements, about half the memory).
//!
//! The cache tracks how many leading positions hold valid data (`len`): a forward step
//! writes the rows of its positions layer by layer, then commits them with
//! [`KvCache::set_len`]; [`KvCache::truncate`] and [`KvCache::rollback`] drop a suffix
//! (e.g. rejected speculative tokens or an edited prompt) without touching the memory.

#![forbid(unsafe_code)]

use bitnet_kernels::Isa;
use bitnet_kernels::float::{
    Q8_0_BLOCK_BYTES, QK8_0, RowFormat, dequantize_row, f16_to_f32_slice, f32_to_f16_slice,
    quantize_row_q8_0,
};
use thiserror::Error;

/// Errors of the KV cache.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KvCacheError {
    #[error(
        "KV cache dimensions must be non-zero: n_layer {n_layer}, n_ctx {n_ctx}, \
         n_kv_heads {n_kv_heads}, head_dim {head_dim}"
    )]
    ZeroDimension {
        n_layer: usize,
        n_ctx: usize,
        n_kv_heads: usize,
        head_dim: usize,
    },
    #[error("KV cache of {bytes} bytes is too large for this machine")]
    TooLarge { bytes: u64 },
    #[error("could not allocate {bytes} bytes for the KV cache")]
    AllocFailed { bytes: u64 },
    #[error("a Q8 KV cache needs head_dim to be a multiple of {QK8_0}, got {head_dim}")]
    Q8HeadDim { head_dim: usize },
    #[error("layer {layer} is out of range (the cache has {n_layer} layers)")]
    LayerOutOfRange { layer: usize, n_layer: usize },
    #[error("position {pos} (+{count} rows) is past the context size {n_ctx}")]
    PositionOutOfRange {
        pos: usize,
        count: usize,
        n_ctx: usize,
    },
    #[error("{what} has {got} elements, expected {expected}")]
    RowLength {
        what: &'static str,
        got: usize,
        expected: usize,
    },
    #[error("length {len} exceeds the cache capacity {capacity}")]
    LengthOutOfRange { len: usize, capacity: usize },
    #[error("cannot roll back {n_tokens} tokens: the cache holds {len}")]
    RollbackTooFar { n_tokens: usize, len: usize },
    #[error("the cache stores {actual:?}, not {wanted:?}")]
    WrongType { wanted: KvType, actual: KvType },
    #[error(
        "this single-sequence cache stores f16 or q8_0 rows, not {0:?} (the engine's paged pool takes every type)"
    )]
    UnsupportedType(KvType),
}

pub use crate::kv::KvType;

#[derive(Debug)]
enum Store {
    /// `n_layer` layers of `n_ctx * kv_dim` f16 bits, one allocation each for K and V.
    F16 { k: Vec<u16>, v: Vec<u16> },
    /// `n_layer` layers of `n_ctx` rows of `kv_dim / 32` Q8_0 blocks.
    Q8 { k: Vec<u8>, v: Vec<u8> },
}

/// A preallocated per-layer K/V cache; see the module docs.
#[derive(Debug)]
pub struct KvCache {
    n_layer: usize,
    n_ctx: usize,
    n_kv_heads: usize,
    head_dim: usize,
    kv_dim: usize,
    kv_type: KvType,
    len: usize,
    /// Elements (F16) or bytes (Q8) of one layer in `store`.
    layer_len: usize,
    isa: Isa,
    store: Store,
}

/// A zero-filled vector of `n` elements, or a typed error instead of an allocation abort.
fn alloc_zeroed<T: Copy + Default>(n: usize) -> Result<Vec<T>, KvCacheError> {
    let bytes = (n as u64).saturating_mul(std::mem::size_of::<T>() as u64);
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| KvCacheError::AllocFailed { bytes })?;
    v.resize(n, T::default());
    Ok(v)
}

impl KvCache {
    /// Allocates the cache for `n_ctx` positions of every layer (all of it, up front).
    pub fn new(
        n_layer: usize,
        n_ctx: usize,
        n_kv_heads: usize,
        head_dim: usize,
        kv_type: KvType,
    ) -> Result<KvCache, KvCacheError> {
        if n_layer == 0 || n_ctx == 0 || n_kv_heads == 0 || head_dim == 0 {
            return Err(KvCacheError::ZeroDimension {
                n_layer,
                n_ctx,
                n_kv_heads,
                head_dim,
            });
        }
        if !matches!(kv_type, KvType::F16 | KvType::Q8_0) {
            return Err(KvCacheError::UnsupportedType(kv_type));
        }
        if kv_type == KvType::Q8_0 && !head_dim.is_multiple_of(QK8_0) {
            return Err(KvCacheError::Q8HeadDim { head_dim });
        }
        let bytes = Self::bytes_for(n_layer, n_ctx, n_kv_heads, head_dim, kv_type);
        let too_large = KvCacheError::TooLarge { bytes };
        // Every index computed later (pos * row + offset) stays below the layer size,
        // which this bounds by isize::MAX.
        if bytes > isize::MAX as u64 {
            return Err(too_large);
        }
        if let Some(limit) = crate::kv::pool::physical_memory_bytes()
            && bytes > limit
        {
            return Err(too_large);
        }
        let kv_dim = n_kv_heads.checked_mul(head_dim).ok_or(too_large.clone())?;
        let row_bytes = usize::try_from(kv_type.row_bytes(kv_dim).ok_or(too_large.clone())?)
            .map_err(|_| too_large.clone())?;
        let per_row = match kv_type {
            KvType::F16 => kv_dim,
            _ => row_bytes,
        };
        let layer_len = n_ctx.checked_mul(per_row).ok_or(too_large.clone())?;
        let total = n_layer.checked_mul(layer_len).ok_or(too_large)?;
        // One allocation per buffer: a cache too large for the machine fails here, at once,
        // instead of after many layers were allocated and zeroed.
        let store = match kv_type {
            KvType::F16 => Store::F16 {
                k: alloc_zeroed(total)?,
                v: alloc_zeroed(total)?,
            },
            _ => Store::Q8 {
                k: alloc_zeroed(total)?,
                v: alloc_zeroed(total)?,
            },
        };
        Ok(KvCache {
            n_layer,
            n_ctx,
            n_kv_heads,
            head_dim,
            kv_dim,
            kv_type,
            len: 0,
            layer_len,
            isa: Isa::best(),
            store,
        })
    }

    /// Total bytes of K and V for every layer and position (saturating at `u64::MAX`).
    /// F16: 2 bytes per element; Q8: 34 bytes per block of 32 elements of a row.
    pub fn bytes_for(
        n_layer: usize,
        n_ctx: usize,
        n_kv_heads: usize,
        head_dim: usize,
        kv_type: KvType,
    ) -> u64 {
        let kv_dim = (n_kv_heads as u128) * (head_dim as u128);
        let row = match kv_type {
            KvType::F16 => kv_dim * 2,
            KvType::Q8_0 => kv_dim.div_ceil(QK8_0 as u128) * Q8_0_BLOCK_BYTES as u128,
            // The other types' sizes, for estimates (this cache does not store them).
            t => {
                let bytes_per_head = t.row_bytes(head_dim).map_or(u128::MAX, u128::from);
                (n_kv_heads as u128).saturating_mul(bytes_per_head)
            }
        };
        let total = 2u128
            .saturating_mul(n_layer as u128)
            .saturating_mul(n_ctx as u128)
            .saturating_mul(row);
        u64::try_from(total).unwrap_or(u64::MAX)
    }

    /// Bytes this cache holds.
    pub fn bytes(&self) -> u64 {
        Self::bytes_for(
            self.n_layer,
            self.n_ctx,
            self.n_kv_heads,
            self.head_dim,
            self.kv_type,
        )
    }

    /// Kernel set used to convert rows (default [`Isa::best`]; conversion is bit-exact on
    /// every set, this only picks the speed).
    pub fn set_isa(&mut self, isa: Isa) {
        self.isa = isa;
    }

    /// Number of positions holding committed data.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is committed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The context size: positions the cache can ever hold.
    pub fn capacity(&self) -> usize {
        self.n_ctx
    }

    /// Positions still free.
    pub fn remaining(&self) -> usize {
        self.n_ctx - self.len
    }

    pub fn n_layer(&self) -> usize {
        self.n_layer
    }

    pub fn n_kv_heads(&self) -> usize {
        self.n_kv_heads
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Elements per position and layer (`n_kv_heads * head_dim`): the attention `kv_stride`.
    pub fn kv_dim(&self) -> usize {
        self.kv_dim
    }

    pub fn kv_type(&self) -> KvType {
        self.kv_type
    }

    /// Keeps only the first `n` positions (no-op if `n >= len`).
    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }

    /// Drops the last `n_tokens` positions.
    pub fn rollback(&mut self, n_tokens: usize) -> Result<(), KvCacheError> {
        if n_tokens > self.len {
            return Err(KvCacheError::RollbackTooFar {
                n_tokens,
                len: self.len,
            });
        }
        self.len -= n_tokens;
        Ok(())
    }

    /// Forgets every position (the memory is kept).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Commits the first `n` positions as valid, after their rows were written for every
    /// layer.
    pub fn set_len(&mut self, n: usize) -> Result<(), KvCacheError> {
        if n > self.n_ctx {
            return Err(KvCacheError::LengthOutOfRange {
                len: n,
                capacity: self.n_ctx,
            });
        }
        self.len = n;
        Ok(())
    }

    fn check_rows(
        &self,
        layer: usize,
        pos: usize,
        k: &[f32],
        v: &[f32],
    ) -> Result<usize, KvCacheError> {
        if layer >= self.n_layer {
            return Err(KvCacheError::LayerOutOfRange {
                layer,
                n_layer: self.n_layer,
            });
        }
        let count = k.len() / self.kv_dim;
        if k.is_empty() || !k.len().is_multiple_of(self.kv_dim) {
            return Err(KvCacheError::RowLength {
                what: "k",
                got: k.len(),
                expected: self.kv_dim,
            });
        }
        if v.len() != k.len() {
            return Err(KvCacheError::RowLength {
                what: "v",
                got: v.len(),
                expected: k.len(),
            });
        }
        if pos >= self.n_ctx || count > self.n_ctx - pos {
            return Err(KvCacheError::PositionOutOfRange {
                pos,
                count,
                n_ctx: self.n_ctx,
            });
        }
        Ok(count)
    }

    /// Stores the K and V rows (`kv_dim` f32 each) of position `pos` in `layer`. Does not
    /// change `len`: see [`KvCache::set_len`].
    pub fn write(
        &mut self,
        layer: usize,
        pos: usize,
        k: &[f32],
        v: &[f32],
    ) -> Result<(), KvCacheError> {
        if k.len() != self.kv_dim {
            return Err(KvCacheError::RowLength {
                what: "k",
                got: k.len(),
                expected: self.kv_dim,
            });
        }
        self.write_rows(layer, pos, k, v)
    }

    /// Stores consecutive rows starting at `pos`: `k` and `v` hold `n * kv_dim` f32 for the
    /// positions `pos..pos + n` (a prompt batch).
    pub fn write_rows(
        &mut self,
        layer: usize,
        pos: usize,
        k: &[f32],
        v: &[f32],
    ) -> Result<(), KvCacheError> {
        let count = self.check_rows(layer, pos, k, v)?;
        let isa = self.isa;
        match &mut self.store {
            Store::F16 { k: kc, v: vc } => {
                let base = layer * self.layer_len;
                let span = base + pos * self.kv_dim..base + (pos + count) * self.kv_dim;
                f32_to_f16_slice(isa, k, &mut kc[span.clone()]);
                f32_to_f16_slice(isa, v, &mut vc[span]);
            }
            Store::Q8 { k: kc, v: vc } => {
                let row = self.kv_dim / QK8_0 * Q8_0_BLOCK_BYTES;
                let base = layer * self.layer_len;
                let span = base + pos * row..base + (pos + count) * row;
                // Rows are whole blocks, so a multi-row span encodes like the rows one by one.
                quantize_row_q8_0(k, &mut kc[span.clone()]);
                quantize_row_q8_0(v, &mut vc[span]);
            }
        }
        Ok(())
    }

    fn layer_check(&self, layer: usize) -> Result<(), KvCacheError> {
        if layer >= self.n_layer {
            return Err(KvCacheError::LayerOutOfRange {
                layer,
                n_layer: self.n_layer,
            });
        }
        Ok(())
    }

    fn layer_of<'a, T>(&self, buf: &'a [T], layer: usize) -> &'a [T] {
        &buf[layer * self.layer_len..][..self.layer_len]
    }

    fn wrong_type(&self, wanted: KvType) -> KvCacheError {
        KvCacheError::WrongType {
            wanted,
            actual: self.kv_type,
        }
    }

    /// The whole K buffer of `layer` (`n_ctx * kv_dim` f16 bits, positions past the written
    /// ones hold stale data), as the f16 attention kernels take it.
    pub fn try_k_layer(&self, layer: usize) -> Result<&[u16], KvCacheError> {
        self.layer_check(layer)?;
        match &self.store {
            Store::F16 { k, .. } => Ok(self.layer_of(k, layer)),
            Store::Q8 { .. } => Err(self.wrong_type(KvType::F16)),
        }
    }

    /// As [`KvCache::try_k_layer`] for V.
    pub fn try_v_layer(&self, layer: usize) -> Result<&[u16], KvCacheError> {
        self.layer_check(layer)?;
        match &self.store {
            Store::F16 { v, .. } => Ok(self.layer_of(v, layer)),
            Store::Q8 { .. } => Err(self.wrong_type(KvType::F16)),
        }
    }

    /// [`KvCache::try_k_layer`] for the engine's hot path.
    ///
    /// # Panics
    /// If `layer >= n_layer` or the cache is not [`KvType::F16`] (engine bugs, not input).
    pub fn k_layer(&self, layer: usize) -> &[u16] {
        self.try_k_layer(layer)
            .unwrap_or_else(|e| panic!("KvCache::k_layer: {e}"))
    }

    /// [`KvCache::try_v_layer`] for the engine's hot path.
    ///
    /// # Panics
    /// If `layer >= n_layer` or the cache is not [`KvType::F16`].
    pub fn v_layer(&self, layer: usize) -> &[u16] {
        self.try_v_layer(layer)
            .unwrap_or_else(|e| panic!("KvCache::v_layer: {e}"))
    }

    /// The whole K buffer of a Q8 cache's `layer`: `n_ctx` rows of `kv_dim / 32` Q8_0
    /// blocks (head `h` starts at block `h * head_dim / 32` of its row).
    pub fn k_layer_q8(&self, layer: usize) -> Result<&[u8], KvCacheError> {
        self.layer_check(layer)?;
        match &self.store {
            Store::Q8 { k, .. } => Ok(self.layer_of(k, layer)),
            Store::F16 { .. } => Err(self.wrong_type(KvType::Q8_0)),
        }
    }

    /// As [`KvCache::k_layer_q8`] for V.
    pub fn v_layer_q8(&self, layer: usize) -> Result<&[u8], KvCacheError> {
        self.layer_check(layer)?;
        match &self.store {
            Store::Q8 { v, .. } => Ok(self.layer_of(v, layer)),
            Store::F16 { .. } => Err(self.wrong_type(KvType::Q8_0)),
        }
    }

    fn row_dequant(
        &self,
        is_k: bool,
        layer: usize,
        pos: usize,
        out: &mut [f32],
    ) -> Result<(), KvCacheError> {
        self.layer_check(layer)?;
        if pos >= self.n_ctx {
            return Err(KvCacheError::PositionOutOfRange {
                pos,
                count: 1,
                n_ctx: self.n_ctx,
            });
        }
        if out.len() != self.kv_dim {
            return Err(KvCacheError::RowLength {
                what: "out",
                got: out.len(),
                expected: self.kv_dim,
            });
        }
        match &self.store {
            Store::F16 { k, v } => {
                let data = self.layer_of(if is_k { k } else { v }, layer);
                let row = &data[pos * self.kv_dim..][..self.kv_dim];
                f16_to_f32_slice(self.isa, row, out);
            }
            Store::Q8 { k, v } => {
                let data = self.layer_of(if is_k { k } else { v }, layer);
                let bytes = self.kv_dim / QK8_0 * Q8_0_BLOCK_BYTES;
                dequantize_row(RowFormat::Q8_0, &data[pos * bytes..][..bytes], out);
            }
        }
        Ok(())
    }

    /// Decodes the K row (`kv_dim` values) of `pos` in `layer` into `out`, for any type.
    pub fn k_row_dequant(
        &self,
        layer: usize,
        pos: usize,
        out: &mut [f32],
    ) -> Result<(), KvCacheError> {
        self.row_dequant(true, layer, pos, out)
    }

    /// Decodes the V row of `pos` in `layer` into `out`, for any type.
    pub fn v_row_dequant(
        &self,
        layer: usize,
        pos: usize,
        out: &mut [f32],
    ) -> Result<(), KvCacheError> {
        self.row_dequant(false, layer, pos, out)
    }
}
