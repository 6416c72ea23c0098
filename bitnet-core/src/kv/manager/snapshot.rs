//! Sequences out of the cache and back: a live sequence's rows copied into a
//! [`KvSnapshot`], the cached prefix of a token list copied the same way, and a snapshot
//! put back as a new sequence whose full blocks join the prefix cache as if its tokens had
//! been evaluated here.

use super::KvManager;
use crate::kv::error::KvError;
use crate::kv::sequence::SeqId;
use crate::kv::snapshot::{KvLayerLayout, KvLayout, KvSnapshot};

impl KvManager {
    /// What a snapshot of this cache holds, and what one must match to come back.
    pub fn layout(&self) -> KvLayout {
        let s = self.storage();
        KvLayout {
            layers: (0..s.n_layer())
                .map(|l| KvLayerLayout {
                    k_type: s.k_type(l),
                    v_type: s.v_type(l),
                    k_rotated: s.k_rotated(l),
                    v_rotated: s.v_rotated(l),
                })
                .collect(),
            n_kv_heads: s.n_kv_heads(),
            head_dim: s.head_dim(),
        }
    }

    /// The rows of the first `n` positions of sequence `id` (all of them when it holds
    /// fewer). Refused for a sequence that lost positions to a shift or an eviction: its
    /// rows no longer belong to a prefix of its tokens' text.
    pub fn export(&self, id: SeqId, n: usize) -> Result<KvSnapshot, KvError> {
        let seq = self.sequence(id)?;
        if seq.shifted > 0 {
            return Err(KvError::Shifted {
                seq: id,
                removed: seq.shifted,
            });
        }
        let n = n.min(seq.len());
        let layout = self.layout();
        let bt = self.block_tokens();
        let s = self.storage();
        let mut sides = [Vec::new(), Vec::new()];
        for (side, is_k) in sides.iter_mut().zip([true, false]) {
            let row = |layer| {
                if is_k {
                    s.k_head_bytes(layer)
                } else {
                    s.v_head_bytes(layer)
                }
            };
            let bytes: usize = (0..layout.n_layer()).map(row).sum();
            side.reserve_exact(layout.n_kv_heads * n * bytes);
            for layer in 0..layout.n_layer() {
                for head in 0..layout.n_kv_heads {
                    for (j, &b) in seq.blocks.iter().enumerate().take(n.div_ceil(bt)) {
                        let rows = (n - j * bt).min(bt);
                        side.extend_from_slice(s.stored_rows(is_k, layer, head, b, rows));
                    }
                }
            }
        }
        let [k, v] = sides;
        Ok(
            KvSnapshot::from_parts(layout, seq.tokens[..n].to_vec(), k, v)
                .expect("rows taken by the layout's own sizes"),
        )
    }

    /// The rows of the longest prefix of `tokens` the prefix cache holds (`None` when it
    /// holds none), taken without changing what the cache holds.
    pub fn export_cached(&mut self, tokens: &[u32]) -> Result<Option<KvSnapshot>, KvError> {
        let id = self.new_sequence();
        let taken = self
            .attach_cached(id, tokens, tokens.len())
            .and_then(|n| match n {
                0 => Ok(None),
                n => self.export(id, n).map(Some),
            });
        self.free_sequence(id)?;
        taken
    }

    /// Puts `snap` back as a new sequence holding its tokens and rows (bit for bit); its
    /// full blocks join the prefix cache, as after evaluating the tokens. Refused when
    /// its layout is not this cache's, it is longer than a sequence may be, or fewer
    /// than the blocks it needs are free or only cached (cached ones are reused, least
    /// recently used first).
    pub fn import(&mut self, snap: &KvSnapshot) -> Result<SeqId, KvError> {
        let ours = self.layout();
        if snap.layout != ours {
            return Err(snap.layout.mismatch(&ours));
        }
        let n = snap.len();
        if n > self.max_seq_len() {
            return Err(KvError::SnapshotTooLong {
                n,
                max: self.max_seq_len(),
            });
        }
        let bt = self.block_tokens();
        if n.div_ceil(bt) > self.available_blocks() {
            return Err(self.kv_full(n));
        }
        let id = self.new_sequence();
        if let Err(e) = self.reserve(id, n) {
            self.free_sequence(id)?;
            return Err(e);
        }
        let blocks = self.sequence(id)?.blocks.clone();
        for is_k in [true, false] {
            for layer in 0..ours.n_layer() {
                let row = ours.head_bytes(is_k, layer).expect("the cache's own rows");
                for head in 0..ours.n_kv_heads {
                    let rows = snap.rows(is_k, layer, head);
                    for (&b, chunk) in blocks.iter().zip(rows.chunks(bt * row)) {
                        self.storage_mut()
                            .put_stored_rows(is_k, layer, head, b, chunk);
                    }
                }
            }
        }
        self.commit(id, &snap.tokens, |_| {})?;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use bitnet_kernels::Isa;

    use crate::kv::{KvError, KvManager, KvType};

    fn cache(block_tokens: usize, k: KvType) -> KvManager {
        KvManager::new(2, 2, 32, (k, KvType::F16), 64, block_tokens, Isa::Scalar).unwrap()
    }

    /// Writes `n` positions of distinct rows into sequence `id` (position `p`, layer `l`:
    /// values depending on both), as a forward pass would.
    fn fill(kv: &mut KvManager, id: crate::kv::SeqId, tokens: &[u32]) {
        let start = kv.sequence(id).unwrap().len();
        kv.reserve(id, tokens.len()).unwrap();
        let bt = kv.block_tokens();
        let width = 2 * 32;
        for (i, _) in tokens.iter().enumerate() {
            let p = start + i;
            let b = kv.sequence(id).unwrap().blocks()[p / bt];
            for layer in 0..2 {
                let row: Vec<f32> = (0..width)
                    .map(|j| ((p * 7 + layer * 3 + j) % 23) as f32 / 7.0 - 1.5)
                    .collect();
                let v: Vec<f32> = row.iter().map(|x| -x * 0.5).collect();
                kv.storage_mut().write_rows(layer, b, p % bt, &row, &v);
            }
        }
        kv.commit(id, tokens, |_| {}).unwrap();
    }

    fn rows(kv: &KvManager, id: crate::kv::SeqId) -> Vec<f32> {
        let n = kv.sequence(id).unwrap().len();
        let mut all = Vec::new();
        let mut out = vec![0.0; 64];
        for layer in 0..2 {
            for pos in 0..n {
                for is_k in [true, false] {
                    kv.read_row(id, layer, pos, is_k, &mut out).unwrap();
                    all.extend_from_slice(&out);
                }
            }
        }
        all
    }

    #[test]
    fn a_snapshot_comes_back_bit_for_bit_into_other_blocks() {
        let tokens: Vec<u32> = (100..137).collect();
        let mut a = cache(8, KvType::Q8_0);
        let id = a.new_sequence();
        fill(&mut a, id, &tokens);
        let snap = a.export(id, usize::MAX).unwrap();
        assert_eq!(snap.tokens(), &tokens[..]);
        // Another cache, other block size, some blocks already taken.
        let mut b = cache(16, KvType::Q8_0);
        let other = b.new_sequence();
        fill(&mut b, other, &[1, 2, 3]);
        let back = b.import(&snap).unwrap();
        assert_eq!(b.sequence(back).unwrap().tokens(), &tokens[..]);
        assert_eq!(rows(&a, id), rows(&b, back));
        // Its full blocks are a cached prefix now.
        b.free_sequence(back).unwrap();
        let probe = b.new_sequence();
        let mut longer = tokens.clone();
        longer.push(9);
        assert_eq!(b.reuse_prefix(probe, &longer).unwrap(), 37);
    }

    #[test]
    fn the_cached_prefix_of_a_token_list_is_exported_without_changing_the_cache() {
        let tokens: Vec<u32> = (0..20).collect();
        let mut kv = cache(8, KvType::F16);
        let id = kv.new_sequence();
        fill(&mut kv, id, &tokens);
        let want = kv.export(id, usize::MAX).unwrap();
        kv.free_sequence(id).unwrap();
        let before = kv.pool_stats();
        let mut asked = tokens.clone();
        asked.extend([500, 501]);
        let got = kv.export_cached(&asked).unwrap().unwrap();
        assert_eq!(got, want);
        assert_eq!(kv.pool_stats(), before);
        assert!(kv.export_cached(&[77, 78]).unwrap().is_none());
        let mut short = want.clone();
        short.truncate(5);
        assert_eq!(short.tokens(), &tokens[..5]);
        assert_eq!(short.row_bytes() * 20, want.row_bytes() * 5);
    }

    #[test]
    fn snapshots_of_another_layout_or_too_long_or_shifted_are_refused() {
        let mut a = cache(8, KvType::Q8_0);
        let id = a.new_sequence();
        fill(&mut a, id, &[5; 10]);
        let snap = a.export(id, 10).unwrap();
        let mut f16 = cache(8, KvType::F16);
        assert!(matches!(
            f16.import(&snap),
            Err(KvError::OtherLayout { .. })
        ));
        let mut small =
            KvManager::new(2, 2, 32, (KvType::Q8_0, KvType::F16), 8, 8, Isa::Scalar).unwrap();
        assert!(matches!(
            small.import(&snap),
            Err(KvError::SnapshotTooLong { n: 10, max: 8 })
        ));
        // A full pool refuses, and leaves no sequence behind.
        let mut full = cache(8, KvType::Q8_0);
        let hog = full.new_sequence();
        fill(&mut full, hog, &[1; 60]);
        let stats = full.stats();
        assert!(matches!(full.import(&snap), Err(KvError::Full { .. })));
        assert_eq!(full.stats().sequences, stats.sequences);
        a.remove_positions(id, &[2]).unwrap();
        assert!(matches!(a.export(id, 9), Err(KvError::Shifted { .. })));
    }
}
