//! A sequence as the KV cache keeps it: the tokens its rows hold, in order, and the blocks
//! those rows live in, under a [`SeqId`]. Nothing else: sampling state, stop strings and
//! limits belong to whoever drives the sequence (the scheduler).

/// A sequence's handle. Stale handles (of freed sequences) are refused, never confused
/// with a newer sequence in the same slot.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl std::fmt::Display for SeqId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}.{}", self.index, self.generation)
    }
}

/// See the module docs.
#[derive(Clone, Debug, Default)]
pub struct Sequence {
    /// The tokens whose K/V rows are stored, position `i` = `tokens[i]`.
    pub(crate) tokens: Vec<u32>,
    /// Blocks: position `p` lives in `blocks[p / block_tokens]`.
    pub(crate) blocks: Vec<u32>,
    /// Prefix-cache node of each full block (the parent of the next block's entry).
    pub(crate) nodes: Vec<u64>,
    /// Positions removed from the middle by [`crate::engine::Engine::shift`] or
    /// [`crate::engine::Engine::evict`]: the rows no longer hold a prefix of the token
    /// text, so none of them joins the prefix cache.
    pub(crate) shifted: usize,
    /// The attention mass each position received so far (summed over layers, heads and the
    /// query rows that read it), when tracked
    /// ([`crate::kv::KvManager::track_attention_mass`]): one entry per position, kept in
    /// step with `tokens` by every removal.
    pub(crate) mass: Option<Vec<f32>>,
}

impl Sequence {
    /// The tokens whose K/V rows the cache holds.
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

    /// Positions removed from the middle of this sequence so far (context shift, window).
    pub fn shifted(&self) -> usize {
        self.shifted
    }

    /// The attention mass each position received, when tracked.
    pub fn attention_mass(&self) -> Option<&[f32]> {
        self.mass.as_deref()
    }

    /// The block table.
    pub fn blocks(&self) -> &[u32] {
        &self.blocks
    }
}
