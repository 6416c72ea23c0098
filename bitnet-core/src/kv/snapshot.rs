//! A sequence's KV rows taken out of the cache ([`KvSnapshot`]): the tokens, and every
//! layer's and head's K and V rows for them, bytes as the cache stores them (no decode and
//! re-encode, so rows put back are bit for bit the rows taken). Rows are kept per layer and
//! head in position order, whatever the cache's block size, so a snapshot goes back into a
//! cache with other blocks. What it must match to go back is its [`KvLayout`]: element
//! formats, rotation and shape. Made and put back by the manager
//! (`manager/snapshot.rs`); written to and read from files by `snapshot_file.rs`.

use super::format::KvType;

/// What a snapshot's bytes mean: the cache settings that must be equal for its rows to be
/// read by another cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    pub k_type: KvType,
    pub v_type: KvType,
    pub k_rotated: bool,
    pub v_rotated: bool,
    pub n_layer: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl KvLayout {
    /// Bytes of one head's K row (`None`: the head dimension does not fit the format).
    pub fn k_head_bytes(&self) -> Option<usize> {
        (self.k_type.format().row_bytes)(self.head_dim)
    }

    /// Bytes of one head's V row.
    pub fn v_head_bytes(&self) -> Option<usize> {
        (self.v_type.format().row_bytes)(self.head_dim)
    }

    /// Bytes of K and of V for `n` positions (`None` on overflow or a bad head dimension).
    pub fn side_bytes(&self, n: usize) -> Option<(usize, usize)> {
        let per = self.n_layer.checked_mul(self.n_kv_heads)?.checked_mul(n)?;
        Some((
            per.checked_mul(self.k_head_bytes()?)?,
            per.checked_mul(self.v_head_bytes()?)?,
        ))
    }

    /// For messages: `K q8_0 (rotated), V f16, 30 layers x 5 heads x 128`.
    pub fn describe(&self) -> String {
        let side =
            |t: KvType, r: bool| format!("{}{}", t.name(), if r { " (rotated)" } else { "" });
        format!(
            "K {}, V {}, {} layers x {} KV heads x {}",
            side(self.k_type, self.k_rotated),
            side(self.v_type, self.v_rotated),
            self.n_layer,
            self.n_kv_heads,
            self.head_dim
        )
    }
}

/// A prefix's rows; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvSnapshot {
    pub(crate) layout: KvLayout,
    pub(crate) tokens: Vec<u32>,
    /// K rows: `[layer][head][position]`, each `k_head_bytes`.
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
        for (data, row) in [
            (&mut self.k, self.layout.k_head_bytes()),
            (&mut self.v, self.layout.v_head_bytes()),
        ] {
            let row = row.expect("a snapshot's layout has valid rows");
            let runs = self.layout.n_layer * self.layout.n_kv_heads;
            let mut kept = Vec::with_capacity(runs * n * row);
            for run in data.chunks_exact(len * row) {
                kept.extend_from_slice(&run[..n * row]);
            }
            *data = kept;
        }
        self.tokens.truncate(n);
    }

    /// Head `head`'s K (`is_k`) or V rows of `layer`, every position.
    pub(crate) fn rows(&self, is_k: bool, layer: usize, head: usize) -> &[u8] {
        let (data, row) = self.side(is_k);
        let n = self.tokens.len() * row;
        let start = (layer * self.layout.n_kv_heads + head) * n;
        &data[start..start + n]
    }

    pub(crate) fn side(&self, is_k: bool) -> (&[u8], usize) {
        let l = &self.layout;
        if is_k {
            (&self.k, l.k_head_bytes().expect("valid layout"))
        } else {
            (&self.v, l.v_head_bytes().expect("valid layout"))
        }
    }
}
