//! Who holds which KV block: reference counts (sequences share blocks: a fork shares its
//! parent's, a prompt that starts like a cached one shares the cached blocks), the free
//! list, and the prefix cache: a block that holds a known token prefix stays registered
//! after its last holder lets go, until the pool needs it back (least recently released
//! first). Only ids and tokens live here; the rows are in [`super::storage`].
//!
//! Rules that keep sharing safe: a block is written only by a sequence that holds it alone
//! and only if it is not registered (registered blocks are immutable: their rows are the
//! cache's promise); anything else is copied first (`KvManager::make_writable`).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// No block / no node.
const NONE: u32 = u32::MAX;
/// The node id every sequence's first block hangs from.
pub(crate) const ROOT_NODE: u64 = 0;

#[derive(Clone, Debug)]
struct BlockMeta {
    refs: u32,
    /// Prefix-cache node id while registered (0 = not registered).
    node: u64,
    /// The node of the block before this one in its sequence ([`ROOT_NODE`] for the first).
    parent: u64,
    /// Valid token rows of a registered block (a full block has `block_tokens`).
    n_tokens: u32,
    /// LRU links while registered and unheld.
    prev: u32,
    next: u32,
}

/// Block ownership and the prefix index; see the module docs.
#[derive(Debug)]
pub struct BlockPool {
    n_blocks: usize,
    block_tokens: usize,
    meta: Vec<BlockMeta>,
    /// The tokens of each registered block (`block_tokens` per block).
    tokens: Vec<u32>,
    free: Vec<u32>,
    lru_head: u32,
    lru_tail: u32,
    n_cached: usize,
    /// Full registered blocks by the hash of (parent node, tokens).
    by_key: HashMap<u64, u32>,
    next_node: u64,
    hasher: std::hash::RandomState,
}

impl BlockPool {
    /// `n_blocks` free blocks of `block_tokens` positions (`n_blocks` below `u32::MAX`).
    pub fn new(n_blocks: usize, block_tokens: usize) -> BlockPool {
        let meta = BlockMeta {
            refs: 0,
            node: 0,
            parent: ROOT_NODE,
            n_tokens: 0,
            prev: NONE,
            next: NONE,
        };
        let mut by_key = HashMap::new();
        by_key.reserve(n_blocks);
        BlockPool {
            n_blocks,
            block_tokens,
            meta: vec![meta; n_blocks],
            tokens: vec![0; n_blocks * block_tokens],
            // Lowest ids first out, so a fresh pool fills from the start.
            free: (0..n_blocks as u32).rev().collect(),
            lru_head: NONE,
            lru_tail: NONE,
            n_cached: 0,
            by_key,
            next_node: ROOT_NODE + 1,
            hasher: std::hash::RandomState::new(),
        }
    }

    pub fn n_blocks(&self) -> usize {
        self.n_blocks
    }

    pub fn block_tokens(&self) -> usize {
        self.block_tokens
    }

    /// Blocks no one holds and nothing caches.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Blocks no one holds that keep a cached prefix (reusable, evicted on demand).
    pub fn cached_count(&self) -> usize {
        self.n_cached
    }

    /// Whether no block was ever handed out or cached since the pool was made (or every
    /// block is back on the free list).
    pub fn all_free(&self) -> bool {
        self.free.len() == self.n_blocks
    }

    /// Holders of block `b`.
    pub fn refs(&self, b: u32) -> u32 {
        self.meta[b as usize].refs
    }

    /// Whether block `b` keeps a cached prefix (and so must not be written).
    pub fn is_registered(&self, b: u32) -> bool {
        self.meta[b as usize].node != 0
    }

    /// A block for a sequence to own (refs = 1): a free one, else the least recently
    /// released cached one (dropped from the cache). `None` when every block is held.
    pub fn alloc(&mut self) -> Option<u32> {
        let b = match self.free.pop() {
            Some(b) => b,
            None => {
                let b = self.lru_head;
                if b == NONE {
                    return None;
                }
                self.unregister(b);
                b
            }
        };
        self.meta[b as usize].refs = 1;
        Some(b)
    }

    /// One more holder of `b` (a fork, or a prefix-cache hit).
    pub fn retain(&mut self, b: u32) {
        let m = &self.meta[b as usize];
        if m.refs == 0 && m.node != 0 {
            self.lru_remove(b);
        }
        self.meta[b as usize].refs += 1;
    }

    /// One holder fewer: an unheld registered block joins the cache's LRU list, any other
    /// unheld block the free list.
    pub fn release(&mut self, b: u32) {
        let m = &mut self.meta[b as usize];
        debug_assert!(m.refs > 0, "release of an unheld block");
        m.refs = m.refs.saturating_sub(1);
        if m.refs > 0 {
            return;
        }
        if m.node != 0 {
            self.lru_push(b);
        } else {
            self.free.push(b);
        }
    }

    fn key(&self, parent: u64, tokens: &[u32]) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write_u64(parent);
        for &t in tokens {
            h.write_u32(t);
        }
        h.finish()
    }

    fn block_tokens_of(&self, b: u32) -> &[u32] {
        let n = self.meta[b as usize].n_tokens as usize;
        &self.tokens[b as usize * self.block_tokens..][..n]
    }

    /// The registered full block holding `tokens` after the prefix `parent`, if any.
    pub fn lookup_full(&self, parent: u64, tokens: &[u32]) -> Option<(u32, u64)> {
        debug_assert_eq!(tokens.len(), self.block_tokens);
        let b = *self.by_key.get(&self.key(parent, tokens))?;
        let m = &self.meta[b as usize];
        (m.node != 0 && m.parent == parent && self.block_tokens_of(b) == tokens)
            .then_some((b, m.node))
    }

    /// The registered block after prefix `parent` that shares the longest start with
    /// `tokens` (a full or a partial one), and how many of its rows match. A linear scan,
    /// run once per admitted prompt, not per token.
    pub fn lookup_partial(&self, parent: u64, tokens: &[u32]) -> Option<(u32, usize)> {
        let mut best: Option<(u32, usize)> = None;
        for (b, m) in self.meta.iter().enumerate() {
            if m.node == 0 || m.parent != parent {
                continue;
            }
            let have = self.block_tokens_of(b as u32);
            let n = have.iter().zip(tokens).take_while(|(a, b)| a == b).count();
            if n > 0 && best.is_none_or(|(_, bn)| n > bn) {
                best = Some((b as u32, n));
            }
        }
        best
    }

    /// Registers block `b`, which holds `tokens` (at most a block) after prefix `parent`,
    /// in the prefix cache; returns the node id the next block of the sequence hangs from.
    /// When an equal full block is registered already, `b` stays unregistered and that
    /// block's node is returned (the prefix is the same).
    pub fn register(&mut self, b: u32, parent: u64, tokens: &[u32]) -> u64 {
        let full = tokens.len() == self.block_tokens;
        if full && let Some((_, node)) = self.lookup_full(parent, tokens) {
            return node;
        }
        if self.meta[b as usize].node != 0 {
            return self.meta[b as usize].node;
        }
        let node = self.next_node;
        self.next_node += 1;
        let bt = self.block_tokens;
        self.tokens[b as usize * bt..][..tokens.len()].copy_from_slice(tokens);
        let m = &mut self.meta[b as usize];
        m.node = node;
        m.parent = parent;
        m.n_tokens = tokens.len() as u32;
        if full {
            let key = self.key(parent, tokens);
            // A 64-bit collision with another prefix: that one keeps the slot.
            self.by_key.entry(key).or_insert(b);
        }
        node
    }

    /// Takes block `b` out of the prefix cache (its rows are about to change); a no-op for
    /// an unregistered block.
    pub fn unregister(&mut self, b: u32) {
        let (node, refs, parent, n_tokens) = {
            let m = &self.meta[b as usize];
            (m.node, m.refs, m.parent, m.n_tokens)
        };
        if node == 0 {
            return;
        }
        if refs == 0 {
            self.lru_remove(b);
        }
        if n_tokens as usize == self.block_tokens {
            let key = self.key(parent, self.block_tokens_of(b));
            if self.by_key.get(&key) == Some(&b) {
                self.by_key.remove(&key);
            }
        }
        let m = &mut self.meta[b as usize];
        m.node = 0;
        m.n_tokens = 0;
    }

    /// Drops every cached prefix (their blocks become free).
    pub fn clear_cache(&mut self) {
        while self.lru_head != NONE {
            let b = self.lru_head;
            self.unregister(b);
            self.free.push(b);
        }
        for b in 0..self.n_blocks as u32 {
            self.unregister(b);
        }
    }

    fn lru_push(&mut self, b: u32) {
        let tail = self.lru_tail;
        {
            let m = &mut self.meta[b as usize];
            m.prev = tail;
            m.next = NONE;
        }
        if tail == NONE {
            self.lru_head = b;
        } else {
            self.meta[tail as usize].next = b;
        }
        self.lru_tail = b;
        self.n_cached += 1;
    }

    fn lru_remove(&mut self, b: u32) {
        let (prev, next) = {
            let m = &self.meta[b as usize];
            (m.prev, m.next)
        };
        if prev == NONE {
            self.lru_head = next;
        } else {
            self.meta[prev as usize].next = next;
        }
        if next == NONE {
            self.lru_tail = prev;
        } else {
            self.meta[next as usize].prev = prev;
        }
        let m = &mut self.meta[b as usize];
        m.prev = NONE;
        m.next = NONE;
        self.n_cached -= 1;
    }
}
