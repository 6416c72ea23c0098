//! The KV manager: the one owner of the cache. It keeps the table of live sequences (each a
//! token list and a block table, see [`Sequence`]), hands blocks out of the
//! block pool (`blocks.rs`) and keeps their rows in the [`KvStorage`], and answers the questions a
//! scheduler asks before it admits a request: how many blocks a sequence still needs, how
//! many the pool can give, how much of a prompt the prefix cache already holds. Nothing
//! outside `kv/` does block arithmetic.
//!
//! Sequences are created, forked (sharing blocks), truncated and freed here; a freed
//! sequence's blocks stay in the prefix cache, and [`KvManager::reuse_prefix`] lets a new
//! sequence start from the longest cached prefix of its prompt. The engine reserves blocks
//! before a forward pass writes rows (`KvManager::reserve`) and commits the evaluated
//! tokens after it (`KvManager::commit`): those writes and the shifts are `manager/write.rs`.

use bitnet_kernels::Isa;

use super::blocks::{BlockPool, ROOT_NODE};
use super::error::KvError;
use super::format::{KvFormat, KvType};
use super::layer_types::uniform_layer_types;
use super::sequence::{SeqId, Sequence};
// Re-exported where they were defined before (`kv::manager` is public).
pub use super::stats::{KvStats, PoolStats};
use super::storage::KvStorage;

mod snapshot;
mod write;

#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    seq: Option<Sequence>,
}

/// The manager; see the module docs.
#[derive(Debug)]
pub struct KvManager {
    storage: KvStorage,
    blocks: BlockPool,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    /// Positions one sequence may hold (`n_ctx` as asked; the storage, whole blocks, may
    /// hold a few more in all, which other sequences use).
    max_pos: usize,
}

impl KvManager {
    /// A cache of `n_ctx` positions in all (rounded up to whole blocks of `block_tokens`),
    /// K stored as `k_type` and V as `v_type` in every layer, every byte allocated now. One
    /// sequence holds at most `n_ctx` positions.
    pub fn new(
        n_layer: usize,
        n_kv_heads: usize,
        head_dim: usize,
        (k_type, v_type): (KvType, KvType),
        n_ctx: usize,
        block_tokens: usize,
        isa: Isa,
    ) -> Result<KvManager, KvError> {
        let storage = KvStorage::new(
            n_layer,
            n_kv_heads,
            head_dim,
            (k_type, v_type),
            n_ctx,
            block_tokens,
            isa,
        )?;
        Ok(Self::over(storage, n_ctx, block_tokens))
    }

    /// As [`KvManager::new`], with layer `l` storing K and V as `layer_types[l]` (one
    /// entry per layer).
    pub fn with_layers(
        n_kv_heads: usize,
        head_dim: usize,
        layer_types: &[(KvType, KvType)],
        n_ctx: usize,
        block_tokens: usize,
        isa: Isa,
    ) -> Result<KvManager, KvError> {
        let storage =
            KvStorage::with_layers(n_kv_heads, head_dim, layer_types, n_ctx, block_tokens, isa)?;
        Ok(Self::over(storage, n_ctx, block_tokens))
    }

    /// The manager of `storage`, every block free.
    fn over(storage: KvStorage, n_ctx: usize, block_tokens: usize) -> KvManager {
        let blocks = BlockPool::new(storage.n_blocks(), block_tokens);
        let max_pos = n_ctx.min(storage.capacity_tokens());
        KvManager {
            storage,
            blocks,
            slots: Vec::new(),
            free_slots: Vec::new(),
            max_pos,
        }
    }

    /// Stores K and/or V rows of each layer Hadamard-rotated, `sides[l]` = `(k, v)` for
    /// layer `l` (see [`KvStorage::set_rotation`]); refused once any block was used.
    pub fn set_rotation(&mut self, sides: &[(bool, bool)]) -> Result<(), KvError> {
        let any = sides.iter().any(|&(k, v)| k || v);
        if any && !bitnet_kernels::float::hadamard_supported(self.storage.head_dim()) {
            return Err(KvError::RotateHeadDim {
                head_dim: self.storage.head_dim(),
            });
        }
        if !self.blocks.all_free() {
            return Err(KvError::RotateInUse);
        }
        self.storage.set_rotation(sides)
    }

    /// The rows (read-only): formats, layout, runs of blocks.
    pub fn storage(&self) -> &KvStorage {
        &self.storage
    }

    pub(crate) fn storage_mut(&mut self) -> &mut KvStorage {
        &mut self.storage
    }

    /// Positions one sequence may hold at most: `n_ctx` as given (the storage, rounded up
    /// to whole blocks, may hold a few more in all).
    pub fn max_seq_len(&self) -> usize {
        self.max_pos
    }

    /// Tokens the cache holds in all: `n_ctx` rounded up to whole blocks.
    pub fn capacity_tokens(&self) -> usize {
        self.storage.capacity_tokens()
    }

    pub fn block_tokens(&self) -> usize {
        self.blocks.block_tokens()
    }

    /// The element format of `layer`'s K cache.
    pub fn k_type(&self, layer: usize) -> KvType {
        self.storage.k_type(layer)
    }

    /// The element format of `layer`'s V cache.
    pub fn v_type(&self, layer: usize) -> KvType {
        self.storage.v_type(layer)
    }

    pub fn k_format(&self, layer: usize) -> &'static KvFormat {
        self.storage.k_format(layer)
    }

    /// The K and V formats of every layer, in layer order.
    pub fn layer_types(&self) -> Vec<(KvType, KvType)> {
        self.storage.layer_types()
    }

    /// The K and V formats, when every layer stores the same ones.
    pub fn uniform_types(&self) -> Option<(KvType, KvType)> {
        uniform_layer_types(&self.storage.layer_types())
    }

    /// Whether K and whether V rows of `layer` are stored Hadamard-rotated.
    pub fn rotated(&self, layer: usize) -> (bool, bool) {
        (self.storage.k_rotated(layer), self.storage.v_rotated(layer))
    }

    /// Whether K and whether V rows are stored Hadamard-rotated, for every layer in order.
    pub fn layer_rotations(&self) -> Vec<(bool, bool)> {
        (0..self.storage.n_layer())
            .map(|l| self.rotated(l))
            .collect()
    }

    /// Bytes of K and V for every block.
    pub fn bytes(&self) -> u64 {
        self.storage.bytes()
    }

    /// The pool's occupancy.
    pub fn pool_stats(&self) -> PoolStats {
        let (free, cached) = (self.blocks.free_count(), self.blocks.cached_count());
        let n_blocks = self.blocks.n_blocks();
        PoolStats {
            n_blocks,
            block_tokens: self.blocks.block_tokens(),
            free,
            cached,
            used: n_blocks - free - cached,
            bytes: self.storage.bytes(),
        }
    }

    /// The pool's occupancy, live sequences and the positions they hold.
    pub fn stats(&self) -> KvStats {
        let live = self.slots.iter().filter_map(|s| s.seq.as_ref());
        let (mut sequences, mut tokens) = (0, 0);
        for s in live {
            sequences += 1;
            tokens += s.len();
        }
        KvStats {
            pool: self.pool_stats(),
            sequences,
            tokens,
        }
    }

    /// Drops every cached prefix (a `/clear`, or a test that wants a cold cache).
    pub fn clear_prefix_cache(&mut self) {
        self.blocks.clear_cache();
    }

    fn kv_full(&self, needed: usize) -> KvError {
        KvError::Full {
            needed,
            stats: self.pool_stats(),
        }
    }

    fn bad_seq(id: SeqId) -> KvError {
        KvError::NoSequence(id)
    }

    /// A new, empty sequence. Its token list and block table get their full capacity now
    /// (the most a sequence can hold), so evaluating tokens never grows them; untouched
    /// capacity costs address space, not memory.
    pub fn new_sequence(&mut self) -> SeqId {
        let bt = self.block_tokens();
        let max_blocks = self.max_pos.div_ceil(bt);
        let seq = Some(Sequence {
            tokens: Vec::with_capacity(self.max_pos),
            blocks: Vec::with_capacity(max_blocks),
            nodes: Vec::with_capacity(max_blocks),
            shifted: 0,
            mass: None,
        });
        if let Some(index) = self.free_slots.pop() {
            let s = &mut self.slots[index as usize];
            s.seq = seq;
            return SeqId {
                index,
                generation: s.generation,
            };
        }
        self.slots.push(Slot { generation: 0, seq });
        SeqId {
            index: (self.slots.len() - 1) as u32,
            generation: 0,
        }
    }

    /// The sequence `id`.
    pub fn sequence(&self, id: SeqId) -> Result<&Sequence, KvError> {
        self.slots
            .get(id.index as usize)
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.seq.as_ref())
            .ok_or_else(|| Self::bad_seq(id))
    }

    fn sequence_mut(&mut self, id: SeqId) -> Result<&mut Sequence, KvError> {
        self.slots
            .get_mut(id.index as usize)
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.seq.as_mut())
            .ok_or_else(|| Self::bad_seq(id))
    }

    /// A new sequence holding the same positions as `src`, sharing its blocks (the first
    /// write into a shared block copies it).
    pub fn fork(&mut self, src: SeqId) -> Result<SeqId, KvError> {
        let (tokens, blocks, nodes, shifted, mass) = {
            let from = self.sequence(src)?;
            (
                from.tokens.clone(),
                from.blocks.clone(),
                from.nodes.clone(),
                from.shifted,
                from.mass.clone(),
            )
        };
        for &b in &blocks {
            self.blocks.retain(b);
        }
        let id = self.new_sequence();
        let to = self.sequence_mut(id)?;
        to.tokens.extend_from_slice(&tokens);
        to.blocks.extend_from_slice(&blocks);
        to.nodes.extend_from_slice(&nodes);
        to.shifted = shifted;
        // The fork's mass starts as its parent's and goes its own way (it lives in the
        // sequence, not in the shared blocks, so copy-on-write does not touch it).
        if let Some(m) = mass {
            let mut own = Vec::with_capacity(self.max_pos);
            own.extend_from_slice(&m);
            self.sequence_mut(id)?.mass = Some(own);
        }
        Ok(id)
    }

    /// Makes the empty sequence `dst` hold the first `n` positions of `src`, sharing its
    /// blocks as [`KvManager::fork`] does (a server's `n` answers to one prompt keep their
    /// ids).
    pub fn share_prefix(&mut self, src: SeqId, dst: SeqId, n: usize) -> Result<(), KvError> {
        if !self.sequence(dst)?.is_empty() {
            return Err(KvError::NotEmpty {
                action: "sharing a prefix",
                seq: dst,
            });
        }
        let bt = self.block_tokens();
        let (tokens, blocks, nodes) = {
            let from = self.sequence(src)?;
            let n = n.min(from.tokens.len());
            let nb = n.div_ceil(bt);
            let nn = (n / bt).min(from.nodes.len());
            (
                from.tokens[..n].to_vec(),
                from.blocks[..nb].to_vec(),
                from.nodes[..nn].to_vec(),
            )
        };
        for &b in &blocks {
            self.blocks.retain(b);
        }
        let to = self.sequence_mut(dst)?;
        to.tokens.extend_from_slice(&tokens);
        to.blocks.extend_from_slice(&blocks);
        to.nodes.extend_from_slice(&nodes);
        if let Some(m) = &mut to.mass {
            m.resize(to.tokens.len(), 0.0);
        }
        Ok(())
    }

    /// Ends sequence `id`: its blocks are released, and the ones holding a known prefix
    /// (its full blocks, and the partly filled last one) stay in the prefix cache.
    pub fn free_sequence(&mut self, id: SeqId) -> Result<(), KvError> {
        self.sequence(id)?;
        let bt = self.block_tokens();
        let KvManager { slots, blocks, .. } = self;
        let seq = slots[id.index as usize]
            .seq
            .as_ref()
            .ok_or_else(|| Self::bad_seq(id))?;
        let n_full = seq.tokens.len() / bt;
        if n_full < seq.blocks.len() && !seq.tokens.is_empty() && seq.shifted == 0 {
            // Keep the partial block's rows findable too (the next chat turn or request
            // with the same text reuses them).
            let b = seq.blocks[n_full];
            let parent = if n_full == 0 {
                ROOT_NODE
            } else {
                seq.nodes[n_full - 1]
            };
            let tail = &seq.tokens[n_full * bt..];
            if !tail.is_empty() && blocks.refs(b) == 1 && !blocks.is_registered(b) {
                blocks.register(b, parent, tail);
            }
        }
        let slot = &mut self.slots[id.index as usize];
        let seq = slot.seq.take().ok_or_else(|| Self::bad_seq(id))?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free_slots.push(id.index);
        for b in seq.blocks {
            self.blocks.release(b);
        }
        Ok(())
    }

    /// Keeps only the first `n` positions of sequence `id` (no-op if it holds fewer); the
    /// blocks past them go back to the pool.
    pub fn truncate(&mut self, id: SeqId, n: usize) -> Result<(), KvError> {
        let bt = self.block_tokens();
        let seq = self.sequence_mut(id)?;
        if n >= seq.tokens.len() {
            return Ok(());
        }
        seq.tokens.truncate(n);
        if let Some(m) = &mut seq.mass {
            m.truncate(n);
        }
        seq.nodes.truncate(n / bt);
        let keep = n.div_ceil(bt);
        let dropped: Vec<u32> = seq.blocks.drain(keep..).collect();
        for b in dropped {
            self.blocks.release(b);
        }
        Ok(())
    }

    /// Cuts a prefix match back to whole blocks: sequence `id` keeps the largest multiple
    /// of the block size it holds, and that length is returned. A partly matched block
    /// that another sequence also holds is copied at the first write, so it costs one
    /// block more than starting without it; whole matched blocks cost what they save.
    pub fn trim_to_whole_blocks(&mut self, id: SeqId) -> Result<usize, KvError> {
        let bt = self.block_tokens();
        let whole = self.sequence(id)?.len() / bt * bt;
        self.truncate(id, whole)?;
        Ok(whole)
    }

    /// Starts (or stops) accumulating, for sequence `id`, the attention mass each of its
    /// positions receives: summed over layers, heads and every query row (prompt and
    /// decode) that reads it, read back with [`Sequence::attention_mass`]. Positions already
    /// held start at zero. Off by default; while no sequence of a batch tracks, the
    /// attention pass does no extra work.
    pub fn track_attention_mass(&mut self, id: SeqId, on: bool) -> Result<(), KvError> {
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

    /// The K (or V) row of position `pos` of sequence `id` in `layer`, decoded into `out`
    /// (`n_head_kv * head_dim` floats): for inspecting and testing what the cache holds.
    pub fn read_row(
        &self,
        id: SeqId,
        layer: usize,
        pos: usize,
        is_k: bool,
        out: &mut [f32],
    ) -> Result<(), KvError> {
        let s = &self.storage;
        let seq = self.sequence(id)?;
        let width = s.n_kv_heads() * s.head_dim();
        if layer >= s.n_layer() || pos >= seq.len() || out.len() != width {
            return Err(KvError::NoRow {
                layer,
                pos,
                n_layer: s.n_layer(),
                len: seq.len(),
                floats: out.len(),
            });
        }
        let bt = self.block_tokens();
        s.read_row(layer, seq.blocks[pos / bt], pos % bt, is_k, out);
        Ok(())
    }

    /// Attaches to the empty sequence `id` the longest cached prefix of `prompt` (whole
    /// blocks by exact match, then the best partial match), leaving at least the last
    /// prompt token to evaluate. Returns how many prompt tokens the sequence now holds.
    pub fn reuse_prefix(&mut self, id: SeqId, prompt: &[u32]) -> Result<usize, KvError> {
        // The last token is always evaluated: its logits start the generation.
        self.attach_cached(id, prompt, prompt.len().saturating_sub(1))
    }

    /// Attaches to the empty sequence `id` the longest cached prefix of `tokens[..usable]`;
    /// returns its length.
    fn attach_cached(
        &mut self,
        id: SeqId,
        tokens: &[u32],
        usable: usize,
    ) -> Result<usize, KvError> {
        let bt = self.block_tokens();
        if !self.sequence(id)?.is_empty() {
            return Err(KvError::NotEmpty {
                action: "prefix reuse",
                seq: id,
            });
        }
        let prompt = tokens;
        let (mut blocks, mut nodes) = (Vec::new(), Vec::new());
        let mut parent = ROOT_NODE;
        let mut n = 0;
        while n + bt <= usable {
            let Some((b, node)) = self.blocks.lookup_full(parent, &prompt[n..n + bt]) else {
                break;
            };
            self.blocks.retain(b);
            blocks.push(b);
            nodes.push(node);
            parent = node;
            n += bt;
        }
        if n < usable
            && let Some((b, m)) = self.blocks.lookup_partial(parent, &prompt[n..usable])
        {
            let m = m.min(bt).min(usable - n);
            self.blocks.retain(b);
            blocks.push(b);
            n += m;
        }
        let seq = self.sequence_mut(id)?;
        seq.tokens.extend_from_slice(&prompt[..n]);
        seq.blocks.extend_from_slice(&blocks);
        seq.nodes.extend_from_slice(&nodes);
        if let Some(m) = &mut seq.mass {
            // Reused rows were never attended to by this sequence: they start at zero.
            m.resize(seq.tokens.len(), 0.0);
        }
        Ok(n)
    }

    /// Blocks sequence `id` still needs to hold `n_total` positions, counting a copy of a
    /// shared or cached last block.
    pub fn blocks_needed(&self, id: SeqId, n_total: usize) -> Result<usize, KvError> {
        let seq = self.sequence(id)?;
        let bt = self.block_tokens();
        let want = n_total.div_ceil(bt);
        let mut need = want.saturating_sub(seq.blocks.len());
        let len = seq.tokens.len();
        if n_total > len && !len.is_multiple_of(bt) {
            let b = seq.blocks[len / bt];
            // Shared, it is copied at the first write. Held alone it costs nothing: a copy
            // out of the prefix cache returns the original to it, and with no block to copy
            // into, the block leaves the cache instead (`make_writable`).
            if self.blocks.refs(b) > 1 {
                need += 1;
            }
        }
        Ok(need)
    }

    /// Blocks a sequence can still get.
    pub fn available_blocks(&self) -> usize {
        self.pool_stats().available()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manager(n_ctx: usize) -> KvManager {
        let types = (KvType::F32, KvType::F32);
        KvManager::new(1, 2, 64, types, n_ctx, 16, Isa::Scalar).unwrap()
    }

    #[test]
    fn rotation_is_chosen_before_any_block_is_used() {
        let mut kv = manager(64);
        kv.set_rotation(&[(true, false)]).unwrap();
        assert_eq!(kv.rotated(0), (true, false));
        // One entry per layer, no more.
        assert_eq!(
            kv.set_rotation(&[(true, false); 2]),
            Err(KvError::LayerCount {
                what: "rotation",
                given: 2,
                n_layer: 1
            })
        );
        assert_eq!(kv.rotated(0), (true, false));
        let s = kv.new_sequence();
        kv.reserve(s, 3).unwrap();
        assert_eq!(
            kv.set_rotation(&[(false, false)]),
            Err(KvError::RotateInUse)
        );
        // Freed, the block stays in the prefix cache (its rows are rotated): still refused.
        kv.commit(s, &[1, 2, 3], |_| {}).unwrap();
        kv.free_sequence(s).unwrap();
        assert_eq!(
            kv.set_rotation(&[(false, false)]),
            Err(KvError::RotateInUse)
        );
    }

    #[test]
    fn admission_counts_blocks_and_trims_a_partial_match_to_whole_blocks() {
        let mut kv = manager(64);
        let prompt: Vec<u32> = (0..40).collect();
        let s = kv.new_sequence();
        kv.reserve(s, 40).unwrap();
        kv.commit(s, &prompt, |_| {}).unwrap();
        assert_eq!(kv.pool_stats().used, 3);
        kv.free_sequence(s).unwrap();
        // 39 usable tokens: two whole blocks by exact match, then 7 of the partial one.
        let t = kv.new_sequence();
        assert_eq!(kv.reuse_prefix(t, &prompt).unwrap(), 39);
        assert_eq!(kv.blocks_needed(t, 64).unwrap(), 1);
        // Another holder of the partial block makes it cost a copy.
        let u = kv.fork(t).unwrap();
        assert_eq!(kv.blocks_needed(t, 64).unwrap(), 2);
        assert_eq!(kv.trim_to_whole_blocks(t).unwrap(), 32);
        assert_eq!(kv.sequence(t).unwrap().len(), 32);
        assert_eq!(kv.blocks_needed(t, 64).unwrap(), 2);
        kv.free_sequence(u).unwrap();
        kv.free_sequence(t).unwrap();
        assert_eq!(kv.stats().sequences, 0);
        assert_eq!(kv.available_blocks(), 4);
    }
}
