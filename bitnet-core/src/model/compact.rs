//! Removing positions from the middle of a sequence while its later positions stay usable:
//! [`Engine::shift`] removes a contiguous range (llama.cpp's context shift, StreamingLLM's
//! window), [`Engine::evict`] any set of positions (H2O's heavy-hitter eviction). Both move
//! every kept position after the first removed one down to close the gaps, re-rotating each
//! moved key by its own distance (RoPE rotations compose, so a key rotated from `p` to
//! `p - d` equals having been evaluated at `p - d`), and give blocks no longer needed back
//! to the pool. Also here: the per-position attention mass a sequence may track
//! ([`Engine::track_attention_mass`]), which every removal keeps in step with the tokens.

use super::engine::{Engine, SeqId};
use crate::config::RopeStyle;
use crate::error::CoreError;

/// A run of moves over one distance: its first move, the distance, and the rotation (the
/// cos and sin rows) that carries a key down by it.
type Run = (usize, usize, (Vec<f32>, Vec<f32>));

impl Engine {
    /// Starts (or stops) accumulating, for sequence `id`, the attention mass each of its
    /// positions receives: summed over layers, heads and every query row (prompt and
    /// decode) that reads it, read back with [`crate::kv::Sequence::attention_mass`].
    /// Positions already held start at zero. Off by default; while no sequence of a batch
    /// tracks, the attention pass does no extra work.
    pub fn track_attention_mass(&mut self, id: SeqId, on: bool) -> Result<(), CoreError> {
        let max = self.max_pos;
        let seq = self.sequence_mut(id)?;
        if !on {
            seq.mass = None;
        } else if seq.mass.is_none() {
            // Full capacity now, so evaluating tokens never grows it.
            let mut m = Vec::with_capacity(max);
            m.resize(seq.tokens.len(), 0.0);
            seq.mass = Some(m);
        }
        Ok(())
    }

    /// Removes positions `keep..keep + discard` of sequence `id`: the positions after them
    /// move down by `discard`, their keys re-rotated to their new positions, and blocks no
    /// longer needed go back to the pool. The model then sees one contiguous context of the
    /// first `keep` tokens and the rest, which is what llama.cpp's context shift and
    /// StreamingLLM's window with attention sinks do. Each move rounds the moved rows to the
    /// cache's format once, so callers discard in large chunks rather than token by token.
    /// The sequence leaves the prefix cache for good: its rows no longer hold a prefix of
    /// text.
    pub fn shift(&mut self, id: SeqId, keep: usize, discard: usize) -> Result<(), CoreError> {
        let n = self.sequence(id)?.len();
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
        let n = self.sequence(id)?.len();
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
        let n = self.sequence(id)?.len();
        let bt = self.kv.block_tokens();
        let first = remove[0];
        // Every block from the first one written on must be the sequence's own.
        for j in first / bt..n.div_ceil(bt) {
            let b = self.sequence(id)?.blocks[j];
            let rows = (n - j * bt).min(bt);
            let nb = self
                .kv
                .make_exclusive(b, rows)
                .ok_or_else(|| CoreError::KvFull {
                    needed: rows,
                    stats: self.kv.stats(),
                })?;
            self.sequence_mut(id)?.blocks[j] = nb;
        }
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
                runs.push((moves.len(), gone, self.rope.shift_row(delta)));
            }
            moves.push((from, from - gone));
        }
        let cfg = &self.model.config;
        let (hd, n_kv) = (cfg.head_dim, cfg.n_head_kv);
        let style = cfg.rope;
        let isa = self.isa;
        let blocks = self.sequence(id)?.blocks.clone();
        let mut k = vec![0.0f32; hd * n_kv];
        let mut v = vec![0.0f32; hd * n_kv];
        for layer in 0..cfg.n_layer {
            for (r, (start, _, (c, s))) in runs.iter().enumerate() {
                let end = runs.get(r + 1).map_or(moves.len(), |x| x.0);
                // A move only ever goes down, onto a removed row or one already read.
                for &(from, to) in &moves[*start..end] {
                    let (fb, fs) = (blocks[from / bt], from % bt);
                    self.kv.read_row(layer, fb, fs, true, &mut k);
                    self.kv.read_row(layer, fb, fs, false, &mut v);
                    match style {
                        RopeStyle::Neox => self.rope.apply_neox_row(isa, &mut k, hd, n_kv, (c, s)),
                        RopeStyle::Normal => {
                            self.rope.apply_normal_row(isa, &mut k, hd, n_kv, (c, s))
                        }
                    }
                    self.kv.write_rows(layer, blocks[to / bt], to % bt, &k, &v);
                }
            }
        }
        let seq = self.sequence_mut(id)?;
        let mut i = 0;
        let mut r = 0;
        seq.tokens.retain(|_| {
            let keep = r >= remove.len() || remove[r] != i;
            if !keep {
                r += 1;
            }
            i += 1;
            keep
        });
        if let Some(m) = &mut seq.mass {
            let (mut i, mut r) = (0, 0);
            m.retain(|_| {
                let keep = r >= remove.len() || remove[r] != i;
                if !keep {
                    r += 1;
                }
                i += 1;
                keep
            });
        }
        seq.nodes.truncate(first / bt);
        seq.shifted += remove.len();
        let want = seq.tokens.len().div_ceil(bt);
        let dropped: Vec<u32> = seq.blocks.drain(want..).collect();
        for b in dropped {
            self.kv.release(b);
        }
        Ok(())
    }
}
