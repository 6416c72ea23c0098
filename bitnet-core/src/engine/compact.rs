//! Removing positions from the middle of a sequence while its later positions stay usable:
//! [`Engine::shift`] removes a contiguous range (llama.cpp's context shift, StreamingLLM's
//! window), [`Engine::evict`] any set of positions (H2O's heavy-hitter eviction). Both move
//! every kept position after the first removed one down to close the gaps, re-rotating each
//! moved key by its own distance (RoPE rotations compose, so a key rotated from `p` to
//! `p - d` equals having been evaluated at `p - d`), and give blocks no longer needed back
//! to the pool (the KV manager keeps the sequence's bookkeeping in step, its attention mass
//! included: [`crate::kv::KvManager::track_attention_mass`]).

use super::Engine;
use crate::config::RopeStyle;
use crate::error::CoreError;
use crate::kv::SeqId;

/// A run of moves over one distance: its first move, the distance, and the rotation (the
/// cos and sin rows) that carries a key down by it.
type Run = (usize, usize, (Vec<f32>, Vec<f32>));

impl Engine {
    /// Removes positions `keep..keep + discard` of sequence `id`: the positions after them
    /// move down by `discard`, their keys re-rotated to their new positions, and blocks no
    /// longer needed go back to the pool. The model then sees one contiguous context of the
    /// first `keep` tokens and the rest, which is what llama.cpp's context shift and
    /// StreamingLLM's window with attention sinks do. Each move rounds the moved rows to the
    /// cache's format once, so callers discard in large chunks rather than token by token.
    /// The sequence leaves the prefix cache for good: its rows no longer hold a prefix of
    /// text.
    pub fn shift(&mut self, id: SeqId, keep: usize, discard: usize) -> Result<(), CoreError> {
        let n = self.kv.sequence(id)?.len();
        if discard == 0 {
            return Ok(());
        }
        if keep.checked_add(discard).is_none_or(|end| end > n) {
            return Err(CoreError::InvalidOption {
                option: "shift",
                reason: format!(
                    "cannot remove {discard} positions from {keep} of a sequence of {n}"
                ),
            });
        }
        let remove: Vec<usize> = (keep..keep + discard).collect();
        self.compact(id, &remove)
    }

    /// Removes the positions listed in `remove` (strictly increasing, each below the
    /// sequence's length) from sequence `id`: every kept position after the first removed
    /// one moves down by the number of removed positions before it, its key re-rotated by
    /// that distance, and emptied blocks go back to the pool, as [`Engine::shift`] does for
    /// one range. The result equals a sequence that evaluated the kept tokens at their new,
    /// compacted positions, up to one rounding of each moved row to the cache's format per
    /// call (so callers evict in batches, not a token at a time).
    pub fn evict(&mut self, id: SeqId, remove: &[usize]) -> Result<(), CoreError> {
        let n = self.kv.sequence(id)?.len();
        if remove.is_empty() {
            return Ok(());
        }
        let ordered = remove.windows(2).all(|w| w[0] < w[1]);
        if !ordered || remove[remove.len() - 1] >= n {
            return Err(CoreError::InvalidOption {
                option: "evict",
                reason: format!(
                    "positions to remove must be strictly increasing and below the sequence's \
                     {n} (got {} positions, last {})",
                    remove.len(),
                    remove[remove.len() - 1]
                ),
            });
        }
        self.compact(id, remove)
    }

    /// The work of [`Engine::shift`] and [`Engine::evict`]: `remove` is non-empty, strictly
    /// increasing and in range.
    fn compact(&mut self, id: SeqId, remove: &[usize]) -> Result<(), CoreError> {
        let n = self.kv.sequence(id)?.len();
        let bt = self.kv.block_tokens();
        let first = remove[0];
        // Every block from the first one written on must be the sequence's own.
        let blocks = self.kv.own_blocks_from(id, first)?;
        // The moves `(from, to)`, in increasing order, cut into runs of one distance (the
        // distance only grows at a removed position), each with its rotation.
        let mut moves: Vec<(usize, usize)> = Vec::with_capacity(n - first);
        let mut runs: Vec<Run> = Vec::new();
        let mut gone = 0;
        for from in first..n {
            if gone < remove.len() && remove[gone] == from {
                gone += 1;
                continue;
            }
            if runs.last().is_none_or(|run| run.1 != gone) {
                let delta = -i64::try_from(gone).unwrap_or(i64::MAX);
                runs.push((moves.len(), gone, self.work.rope.shift_row(delta)));
            }
            moves.push((from, from - gone));
        }
        let cfg = &self.model.config;
        let (hd, n_kv) = (cfg.head_dim, cfg.n_head_kv);
        let style = cfg.rope;
        let isa = self.model.isa;
        let rope = &self.work.rope;
        let kv = self.kv.storage_mut();
        let mut k = vec![0.0f32; hd * n_kv];
        let mut v = vec![0.0f32; hd * n_kv];
        for layer in 0..cfg.n_layer {
            for (r, (start, _, (c, s))) in runs.iter().enumerate() {
                let end = runs.get(r + 1).map_or(moves.len(), |x| x.0);
                // A move only ever goes down, onto a removed row or one already read.
                for &(from, to) in &moves[*start..end] {
                    let (fb, fs) = (blocks[from / bt], from % bt);
                    kv.read_row(layer, fb, fs, true, &mut k);
                    kv.read_row(layer, fb, fs, false, &mut v);
                    match style {
                        RopeStyle::Neox => rope.apply_neox_row(isa, &mut k, hd, n_kv, (c, s)),
                        RopeStyle::Normal => rope.apply_normal_row(isa, &mut k, hd, n_kv, (c, s)),
                    }
                    kv.write_rows(layer, blocks[to / bt], to % bt, &k, &v);
                }
            }
        }
        Ok(self.kv.remove_positions(id, remove)?)
    }
}
