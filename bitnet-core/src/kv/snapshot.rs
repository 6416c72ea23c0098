//! A sequence's KV rows taken out of the cache ([`KvSnapshot`]): the tokens, and every
//! layer's and head's K and V rows for them, bytes as the cache stores them (no decode and
//! re-encode, so rows put back are bit for bit the rows taken). Rows are kept per layer and
//! head in position order, whatever the cache's block size, so a snapshot goes back into a
//! cache with other blocks. What it must match to go back is its [`KvLayout`]: element
//! formats and rotation of every layer, and the shape. Made and put back by the manager
//! (`manager/snapshot.rs`); written to and read from files by `snapshot_file.rs`.

use super::error::KvError;
use super::format::KvType;
use super::layer_types::counted;

/// One layer's part of a [`KvLayout`]: the formats and rotation of its K and V rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayerLayout {
    pub k_type: KvType,
    pub v_type: KvType,
    pub k_rotated: bool,
    pub v_rotated: bool,
}

impl KvLayerLayout {
    /// For messages: `K q8_0 (rotated), V f16`.
    pub fn describe(&self) -> String {
        format!(
            "K {}, V {}",
            side_name(self.k_type, self.k_rotated),
            side_name(self.v_type, self.v_rotated)
        )
    }
}

/// `q8_0` or `q8_0 (rotated)`.
fn side_name(t: KvType, rotated: bool) -> String {
    format!("{}{}", t.name(), if rotated { " (rotated)" } else { "" })
}

/// What a snapshot's bytes mean: the cache settings that must be equal for its rows to be
/// read by another cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvLayout {
    /// Each layer's formats and rotation, in layer order (one entry per layer).
    pub layers: Vec<KvLayerLayout>,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl KvLayout {
    pub fn n_layer(&self) -> usize {
        self.layers.len()
    }

    /// The layout every layer shares, when they all store the same formats and rotation.
    pub fn uniform(&self) -> Option<KvLayerLayout> {
        let first = *self.layers.first()?;
        self.layers.iter().all(|&l| l == first).then_some(first)
    }

    /// Bytes of one head's K (`is_k`) or V row in `layer` (`None`: the head dimension does
    /// not fit the format).
    pub fn head_bytes(&self, is_k: bool, layer: usize) -> Option<usize> {
        let l = &self.layers[layer];
        let t = if is_k { l.k_type } else { l.v_type };
        (t.format().row_bytes)(self.head_dim)
    }

    /// Bytes of K and of V for `n` positions, every layer (`None` on overflow or a bad head
    /// dimension).
    pub fn side_bytes(&self, n: usize) -> Option<(usize, usize)> {
        let per = self.n_kv_heads.checked_mul(n)?;
        let (mut k, mut v) = (0usize, 0usize);
        for layer in 0..self.n_layer() {
            k = k.checked_add(per.checked_mul(self.head_bytes(true, layer)?)?)?;
            v = v.checked_add(per.checked_mul(self.head_bytes(false, layer)?)?)?;
        }
        Some((k, v))
    }

    /// For messages: `K q8_0 (rotated), V f16, 30 layers x 5 KV heads x 128`, or with
    /// formats per layer `per layer: K q8_0 x20, q4_0 (rotated) x10; V f16 x30, ...`.
    pub fn describe(&self) -> String {
        let shape = format!(
            "{} layers x {} KV heads x {}",
            self.n_layer(),
            self.n_kv_heads,
            self.head_dim
        );
        if let Some(l) = self.uniform() {
            return format!("{}, {shape}", l.describe());
        }
        let k = counted(self.layers.iter().map(|l| side_name(l.k_type, l.k_rotated)));
        let v = counted(self.layers.iter().map(|l| side_name(l.v_type, l.v_rotated)));
        format!("per layer: K {k}; V {v}; {shape}")
    }

    /// The error for a snapshot of this layout offered to a cache of layout `cache` (which
    /// differs): the first layer that differs, when the shapes agree.
    pub(crate) fn mismatch(&self, cache: &KvLayout) -> KvError {
        let same_shape = self.n_layer() == cache.n_layer()
            && self.n_kv_heads == cache.n_kv_heads
            && self.head_dim == cache.head_dim;
        let differs = self
            .layers
            .iter()
            .zip(&cache.layers)
            .position(|(a, b)| a != b);
        match differs {
            Some(l) if same_shape && (self.uniform().is_none() || cache.uniform().is_none()) => {
                let n = self.n_layer();
                KvError::OtherLayout {
                    snapshot: format!("{} in layer {l} of {n}", self.layers[l].describe()),
                    cache: format!("{} in layer {l}", cache.layers[l].describe()),
                }
            }
            _ => KvError::OtherLayout {
                snapshot: self.describe(),
                cache: cache.describe(),
            },
        }
    }
}

/// A prefix's rows; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvSnapshot {
    pub(crate) layout: KvLayout,
    pub(crate) tokens: Vec<u32>,
    /// K rows: `[layer][head][position]`, each of its layer's K head bytes.
    pub(crate) k: Vec<u8>,
    /// V rows, laid out as K.
    pub(crate) v: Vec<u8>,
}

impl KvSnapshot {
    /// A snapshot from its parts, checked: the byte counts must be what the layout and
    /// the token count make.
    pub(crate) fn from_parts(
        layout: KvLayout,
        tokens: Vec<u32>,
        k: Vec<u8>,
        v: Vec<u8>,
    ) -> Option<KvSnapshot> {
        let (kb, vb) = layout.side_bytes(tokens.len())?;
        (k.len() == kb && v.len() == vb).then_some(KvSnapshot {
            layout,
            tokens,
            k,
            v,
        })
    }

    pub fn layout(&self) -> &KvLayout {
        &self.layout
    }

    /// The tokens whose rows the snapshot holds, in position order.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Bytes of K and V rows.
    pub fn row_bytes(&self) -> usize {
        self.k.len() + self.v.len()
    }

    /// The first `n` positions only (no-op past the end).
    pub fn truncate(&mut self, n: usize) {
        let len = self.tokens.len();
        if n >= len {
            return;
        }
        let layout = &self.layout;
        for (data, is_k) in [(&mut self.k, true), (&mut self.v, false)] {
            let row_sizes = || {
                (0..layout.n_layer()).map(move |l| {
                    layout
                        .head_bytes(is_k, l)
                        .expect("a snapshot's layout has valid rows")
                })
            };
            let kept_bytes: usize = row_sizes().map(|row| layout.n_kv_heads * n * row).sum();
            let mut kept = Vec::with_capacity(kept_bytes);
            let mut at = 0;
            for row in row_sizes() {
                for _ in 0..layout.n_kv_heads {
                    kept.extend_from_slice(&data[at..at + n * row]);
                    at += len * row;
                }
            }
            *data = kept;
        }
        self.tokens.truncate(n);
    }

    /// Head `head`'s K (`is_k`) or V rows of `layer`, every position.
    pub(crate) fn rows(&self, is_k: bool, layer: usize, head: usize) -> &[u8] {
        let l = &self.layout;
        let data = if is_k { &self.k } else { &self.v };
        let n = self.tokens.len();
        let run = |layer: usize| n * l.head_bytes(is_k, layer).expect("valid layout");
        let layer_start: usize = (0..layer).map(|p| l.n_kv_heads * run(p)).sum();
        let start = layer_start + head * run(layer);
        &data[start..start + run(layer)]
    }

    /// Every K (`is_k`) or V row, as a file stores them.
    pub(crate) fn side(&self, is_k: bool) -> &[u8] {
        if is_k { &self.k } else { &self.v }
    }
}
