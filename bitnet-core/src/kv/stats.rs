//! The figures the KV cache reports: how its block pool is used (what admission and the
//! "cache is full" error count with) and what the live sequences hold.

/// Occupancy of the pool.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PoolStats {
    pub n_blocks: usize,
    pub block_tokens: usize,
    /// Blocks no one holds and nothing caches.
    pub free: usize,
    /// Blocks no one holds that keep a cached prefix (reusable, evicted on demand).
    pub cached: usize,
    /// Blocks held by at least one sequence.
    pub used: usize,
    /// Bytes of K and V for all blocks.
    pub bytes: u64,
}

impl PoolStats {
    /// Blocks a new sequence can get (free, or evicted from the prefix cache).
    pub fn available(&self) -> usize {
        self.free + self.cached
    }
}

/// What the pool holds and how it is used.
#[derive(Copy, Clone, Debug)]
pub struct KvStats {
    pub pool: PoolStats,
    /// Live sequences.
    pub sequences: usize,
    /// Positions held by live sequences (shared positions counted per sequence).
    pub tokens: usize,
}
