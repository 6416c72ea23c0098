//! What a forward pass and a shift do to a sequence's blocks: blocks are reserved (and
//! made writable, copied when shared) before rows are written, the evaluated tokens are
//! committed after (full blocks join the prefix cache), and before rows move down every
//! block from the first moved one becomes the sequence's own.

use super::KvManager;
use crate::kv::blocks::ROOT_NODE;
use crate::kv::error::KvError;
use crate::kv::sequence::SeqId;

impl KvManager {
    /// Makes `b` writable for a sequence holding it whose first `n_rows` rows are valid:
    /// `b` itself if the sequence holds it alone and it is not registered, else a copy of
    /// those rows in a fresh block (and `b` released); with no block for the copy, `b`
    /// itself taken out of the prefix cache if the sequence holds it alone. `None` when a
    /// shared block cannot be copied.
    fn make_writable(&mut self, b: u32, n_rows: usize) -> Option<u32> {
        let (refs, registered) = (self.blocks.refs(b), self.blocks.is_registered(b));
        if refs == 1 && !registered {
            return Some(b);
        }
        let sole = refs == 1;
        let Some(nb) = self.blocks.alloc() else {
            // No block for a copy: a block held by this sequence alone leaves the prefix
            // cache instead (its cached text is lost, the sequence goes on), so a sequence's
            // own cached tail never costs a block the pool does not have.
            if sole {
                self.blocks.unregister(b);
                return Some(b);
            }
            return None;
        };
        self.storage.copy_rows(b, nb, n_rows);
        self.blocks.release(b);
        Some(nb)
    }

    /// Like [`KvManager::make_writable`], for a sequence about to overwrite rows it already
    /// holds (a shift): a block it holds alone is taken out of the prefix cache and kept
    /// rather than copied, since the cached text will not be there any more.
    fn make_exclusive(&mut self, b: u32, n_rows: usize) -> Option<u32> {
        if self.blocks.refs(b) == 1 {
            self.blocks.unregister(b);
            return Some(b);
        }
        self.make_writable(b, n_rows)
    }

    /// Gives sequence `id` writable blocks for positions `len..len + n` (before a forward
    /// pass writes their rows).
    pub(crate) fn reserve(&mut self, id: SeqId, n: usize) -> Result<(), KvError> {
        let bt = self.block_tokens();
        let (len, blocks_now) = {
            let s = self.sequence(id)?;
            (s.tokens.len(), s.blocks.len())
        };
        if !len.is_multiple_of(bt) {
            let j = len / bt;
            let b = self.sequence(id)?.blocks[j];
            let nb = self
                .make_writable(b, len % bt)
                .ok_or_else(|| self.kv_full(n))?;
            self.sequence_mut(id)?.blocks[j] = nb;
        }
        let want = (len + n).div_ceil(bt);
        for _ in blocks_now..want {
            let b = self.blocks.alloc().ok_or_else(|| self.kv_full(n))?;
            self.sequence_mut(id)?.blocks.push(b);
        }
        Ok(())
    }

    /// Records that sequence `id` now holds `tokens` after what it held (their rows were
    /// written into the blocks [`KvManager::reserve`] gave it); blocks that became full
    /// join the prefix cache. `add_mass` gets the sequence's attention-mass vector, grown
    /// to the new length, when the sequence tracks it.
    pub(crate) fn commit(
        &mut self,
        id: SeqId,
        tokens: &[u32],
        add_mass: impl FnOnce(&mut [f32]),
    ) -> Result<(), KvError> {
        let bt = self.block_tokens();
        let KvManager { slots, blocks, .. } = self;
        let seq = slots
            .get_mut(id.index as usize)
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.seq.as_mut())
            .ok_or_else(|| Self::bad_seq(id))?;
        let before = seq.tokens.len() / bt;
        seq.tokens.extend_from_slice(tokens);
        if let Some(mass) = &mut seq.mass {
            // The mass vector's capacity is the most positions a sequence holds.
            mass.resize(seq.tokens.len(), 0.0);
            if !tokens.is_empty() {
                add_mass(mass);
            }
        }
        let after = if seq.shifted == 0 {
            seq.tokens.len() / bt
        } else {
            before
        };
        for j in before..after {
            let parent = if j == 0 { ROOT_NODE } else { seq.nodes[j - 1] };
            let node = blocks.register(seq.blocks[j], parent, &seq.tokens[j * bt..(j + 1) * bt]);
            seq.nodes.push(node);
        }
        Ok(())
    }

    /// Before positions from `first` on are moved down (a shift or an eviction): every block
    /// of sequence `id` from the one holding `first` becomes the sequence's own (copied if
    /// shared, out of the prefix cache if cached). Returns the block table then.
    pub(crate) fn own_blocks_from(&mut self, id: SeqId, first: usize) -> Result<Vec<u32>, KvError> {
        let n = self.sequence(id)?.len();
        let bt = self.block_tokens();
        for j in first / bt..n.div_ceil(bt) {
            let b = self.sequence(id)?.blocks[j];
            let rows = (n - j * bt).min(bt);
            let nb = self
                .make_exclusive(b, rows)
                .ok_or_else(|| self.kv_full(rows))?;
            self.sequence_mut(id)?.blocks[j] = nb;
        }
        Ok(self.sequence(id)?.blocks.clone())
    }

    /// After the rows past the removed positions were moved down: drops the positions in
    /// `remove` (strictly increasing) from sequence `id`'s tokens and attention mass, takes
    /// the sequence out of the prefix cache for good, and gives blocks no longer needed
    /// back to the pool.
    pub(crate) fn remove_positions(&mut self, id: SeqId, remove: &[usize]) -> Result<(), KvError> {
        let bt = self.block_tokens();
        let first = remove.first().copied().unwrap_or(0);
        let seq = self.sequence_mut(id)?;
        remove_sorted(&mut seq.tokens, remove);
        if let Some(m) = &mut seq.mass {
            remove_sorted(m, remove);
        }
        seq.nodes.truncate(first / bt);
        seq.shifted += remove.len();
        let want = seq.tokens.len().div_ceil(bt);
        let dropped: Vec<u32> = seq.blocks.drain(want..).collect();
        for b in dropped {
            self.blocks.release(b);
        }
        Ok(())
    }
}

/// Drops the elements at the strictly increasing indices `remove` from `v`.
fn remove_sorted<T>(v: &mut Vec<T>, remove: &[usize]) {
    let (mut i, mut r) = (0, 0);
    v.retain(|_| {
        let keep = r >= remove.len() || remove[r] != i;
        if !keep {
            r += 1;
        }
        i += 1;
        keep
    });
}
