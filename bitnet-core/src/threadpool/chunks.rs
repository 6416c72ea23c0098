//! Dynamic work sharing inside a region: [`ChunkQueue`] cuts an output slice into a fixed
//! number of chunks and hands each to whichever thread asks next. A thread that is slow
//! (memory bandwidth not shared evenly) or not running at all (a machine shared with other
//! processes, where a thread waits on a run queue for milliseconds) then holds back at most
//! one chunk, instead of its whole fixed share of the region.
//!
//! The chunks are the ranges of [`split_range`] over `units` (rows of a product), scaled by
//! `unit_len` elements (the tokens of a batch, when the output is stored
//! `[chunk][tokens][rows of the chunk]`): they depend on the chunk count only, never on which
//! thread computes them, so results do not depend on scheduling.
//!
//! With [`ChunkShares`] (a pool whose threads sit on several NUMA nodes) the chunks are the
//! same, but each group of threads owns a contiguous run of them, the rows bound to its node:
//! [`ChunkQueue::claim_from`] takes the caller's group's chunks first and only then steals
//! from the other groups, so a node that lags behind never holds the others up.

use std::marker::PhantomData;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::groups::{MAX_GROUPS, ThreadGroups};
use super::{CachePadded, split_range};

/// A `&mut [T]` cut into chunks that threads claim one at a time; see the module docs.
pub struct ChunkQueue<'a, T> {
    ptr: *mut T,
    units: usize,
    unit_len: usize,
    n_chunks: usize,
    align: usize,
    next: CachePadded<AtomicUsize>,
    /// Per-group claiming; `None`: one counter (`next`) over every chunk.
    shares: Option<&'a ChunkShares>,
    _borrow: PhantomData<&'a mut [T]>,
}

/// Which chunks of a [`ChunkQueue`] each group of threads owns, and the next unclaimed one
/// of each: group `g` owns chunks `bounds[g]..bounds[g + 1]`. Each counter has a cache line
/// of its own, so a node's threads claim without touching another node's line until they
/// steal.
pub struct ChunkShares {
    bounds: [usize; MAX_GROUPS + 1],
    next: [CachePadded<AtomicUsize>; MAX_GROUPS],
    n_groups: usize,
    n_chunks: usize,
}

impl std::fmt::Debug for ChunkShares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkShares")
            .field("bounds", &&self.bounds[..=self.n_groups])
            .finish_non_exhaustive()
    }
}

impl ChunkShares {
    /// The shares of `groups` in `n_chunks` chunks of `units` units aligned to `align` (the
    /// arguments of the [`ChunkQueue`] they will serve): [`ThreadGroups::chunk_bounds`].
    pub fn new(groups: &ThreadGroups, units: usize, n_chunks: usize, align: usize) -> Self {
        let n_chunks = n_chunks.max(1);
        let bounds = groups.chunk_bounds(units, align, n_chunks);
        ChunkShares {
            bounds,
            next: std::array::from_fn(|g| CachePadded(AtomicUsize::new(bounds[g]))),
            n_groups: groups.len().clamp(1, MAX_GROUPS),
            n_chunks,
        }
    }

    /// Group `g`'s chunks.
    pub fn chunks_of(&self, g: usize) -> Range<usize> {
        self.bounds[g]..self.bounds[g + 1]
    }

    /// The next unclaimed chunk of group `g`, if any is left.
    fn take(&self, g: usize) -> Option<usize> {
        let (next, end) = (&self.next[g].0, self.bounds[g + 1]);
        // A plain load first: a drained group's line is read, not written, by thieves.
        if next.load(Ordering::Relaxed) >= end {
            return None;
        }
        let c = next.fetch_add(1, Ordering::Relaxed);
        if c >= end {
            next.store(end, Ordering::Relaxed);
            return None;
        }
        Some(c)
    }
}

// SAFETY: a `ChunkQueue` is an exclusive borrow of a `[T]`; moving it to another thread moves
// that borrow, which is sound when `T: Send` (as for `&mut [T]`).
unsafe impl<T: Send> Send for ChunkQueue<'_, T> {}
// SAFETY: shared access only hands out `&mut` to distinct chunks (each chunk index is taken
// once, by an atomic counter: the queue's, or with `ChunkShares` the counter of the one group
// whose run of indices holds it; the runs partition the chunks), and distinct chunks are
// disjoint ranges: threads sharing it
// each get exclusive access to distinct `T`s, i.e. `&mut T` sent across threads (`T: Send`).
unsafe impl<T: Send> Sync for ChunkQueue<'_, T> {}

impl<T> std::fmt::Debug for ChunkQueue<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkQueue")
            .field("units", &self.units)
            .field("unit_len", &self.unit_len)
            .field("n_chunks", &self.n_chunks)
            .field("align", &self.align)
            .finish_non_exhaustive()
    }
}

impl<'a, T> ChunkQueue<'a, T> {
    /// Borrows `slice[..units * unit_len]`, to be handed out as `n_chunks` chunks: chunk `c`
    /// covers units `split_range(units, n_chunks, c, align)`, i.e. elements
    /// `start * unit_len..end * unit_len`. Returns `None` if the slice is too short.
    pub fn new(
        slice: &'a mut [T],
        units: usize,
        unit_len: usize,
        n_chunks: usize,
        align: usize,
    ) -> Option<Self> {
        Self::with_shares(slice, units, unit_len, n_chunks, align, None)
    }

    /// As [`ChunkQueue::new`], the chunks owned by groups of threads as `shares` says
    /// (`None`: no groups). Returns `None` also if `shares` was made for another chunk count.
    /// The queue consumes the shares' counters, so it borrows them exclusively.
    pub fn with_shares(
        slice: &'a mut [T],
        units: usize,
        unit_len: usize,
        n_chunks: usize,
        align: usize,
        shares: Option<&'a mut ChunkShares>,
    ) -> Option<Self> {
        let shares: Option<&'a ChunkShares> = shares.map(|s| &*s);
        let need = units.checked_mul(unit_len)?;
        if need > slice.len() || shares.is_some_and(|s| s.n_chunks != n_chunks.max(1)) {
            return None;
        }
        Some(ChunkQueue {
            ptr: slice.as_mut_ptr(),
            units,
            unit_len,
            n_chunks: n_chunks.max(1),
            align: align.max(1),
            next: CachePadded(AtomicUsize::new(0)),
            shares,
            _borrow: PhantomData,
        })
    }

    /// Number of chunks.
    pub fn n_chunks(&self) -> usize {
        self.n_chunks
    }

    /// The next unclaimed non-empty chunk: its unit range and its elements; `None` once
    /// every chunk has been claimed. With groups, group 0's chunks first.
    #[allow(
        clippy::mut_from_ref,
        reason = "each chunk is handed out once (atomic claim)"
    )]
    pub fn claim(&self) -> Option<(Range<usize>, &mut [T])> {
        self.claim_from(0)
    }

    /// As [`ChunkQueue::claim`], for a thread of group `group`: its group's chunks first, in
    /// order, then the other groups' (`group + 1`, `group + 2`, ... round: threads of
    /// different groups steal from different victims first). Without groups, `claim`.
    #[allow(
        clippy::mut_from_ref,
        reason = "each chunk is handed out once (atomic claim)"
    )]
    pub fn claim_from(&self, group: usize) -> Option<(Range<usize>, &mut [T])> {
        let Some(shares) = self.shares else {
            return self.claim_next();
        };
        let n = shares.n_groups;
        for k in 0..n {
            let g = (group + k) % n;
            while let Some(c) = shares.take(g) {
                // SAFETY: `take` hands out each chunk index once, from a counter of its own
                // group's run of indices; the runs are disjoint.
                if let Some(chunk) = unsafe { self.chunk(c) } {
                    return Some(chunk);
                }
            }
        }
        None
    }

    /// The next chunk of the one counter (no groups).
    #[allow(
        clippy::mut_from_ref,
        reason = "each chunk is handed out once (atomic claim)"
    )]
    fn claim_next(&self) -> Option<(Range<usize>, &mut [T])> {
        loop {
            let c = self.next.0.fetch_add(1, Ordering::Relaxed);
            if c >= self.n_chunks {
                // Keep the counter from wrapping however often a drained queue is asked.
                self.next.0.store(self.n_chunks, Ordering::Relaxed);
                return None;
            }
            // SAFETY: the `fetch_add` hands out each `c` to one caller only.
            if let Some(chunk) = unsafe { self.chunk(c) } {
                return Some(chunk);
            }
        }
    }

    /// Chunk `c`'s unit range and elements (`None`: an empty chunk).
    ///
    /// # Safety
    /// Each `c` may be asked for once in the queue's life (the caller claimed it); `c` is
    /// below `n_chunks`.
    #[allow(
        clippy::mut_from_ref,
        reason = "each chunk is handed out once (atomic claim)"
    )]
    unsafe fn chunk(&self, c: usize) -> Option<(Range<usize>, &mut [T])> {
        let r = split_range(self.units, self.n_chunks, c, self.align);
        if r.is_empty() {
            return None;
        }
        let (a, b) = (r.start * self.unit_len, r.end * self.unit_len);
        // SAFETY: `split_range` gives pairwise disjoint ranges within `0..units` for
        // distinct `c`, so `a..b` lies within the `units * unit_len` elements checked in
        // `new` and is disjoint from every other chunk; the caller asks for each `c` once.
        // The original `&'a mut [T]` is unusable while `self` borrows it.
        let s = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(a), b - a) };
        Some((r, s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunk indices in the order successive claims of `group` hand them out.
    fn claims(q: &ChunkQueue<'_, f32>, group: usize, units: usize, n: usize) -> Vec<usize> {
        std::iter::from_fn(|| q.claim_from(group))
            .map(|(r, _)| {
                (0..n)
                    .position(|c| split_range(units, n, c, 4) == r)
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn a_group_claims_its_own_chunks_first_then_steals_round() {
        // Two nodes, three threads on the first and one on the second: 2560 rows in 16
        // chunks, 12 of them node 0's.
        let groups = ThreadGroups::new(&[0, 0, 0, 1]);
        let mut out = vec![0.0f32; 2560];
        let mut shares = ChunkShares::new(&groups, 2560, 16, 4);
        assert_eq!((shares.chunks_of(0), shares.chunks_of(1)), (0..12, 12..16));
        let q = ChunkQueue::with_shares(&mut out, 2560, 1, 16, 4, Some(&mut shares)).unwrap();
        // Node 1's thread: its four, then node 0's from the start.
        let first: Vec<usize> = (0..6)
            .map(|_| q.claim_from(1).unwrap().0.start / 160)
            .collect();
        assert_eq!(first, [12, 13, 14, 15, 0, 1]);
        // Node 0's threads take what is left of theirs; nothing is handed out twice.
        assert_eq!(claims(&q, 0, 2560, 16), (2..12).collect::<Vec<_>>());
        assert!(q.claim_from(1).is_none() && q.claim().is_none());
    }

    #[test]
    fn one_group_or_none_hands_out_todays_chunks_in_todays_order() {
        let (units, n) = (1000, 7);
        let mut a = vec![0.0f32; units * 3];
        let mut b = a.clone();
        let plain = ChunkQueue::new(&mut a, units, 3, n, 4).unwrap();
        let one = ThreadGroups::new(&[2, 2]);
        let mut shares = ChunkShares::new(&one, units, n, 4);
        let grouped = ChunkQueue::with_shares(&mut b, units, 3, n, 4, Some(&mut shares)).unwrap();
        let want: Vec<usize> = (0..n).collect();
        assert_eq!(claims(&plain, 0, units, n), want);
        assert_eq!(claims(&grouped, 1, units, n), want);
        // Groups of no thread at all still hand every chunk out.
        let mut c = vec![0.0f32; units * 3];
        let mut shares = ChunkShares::new(&ThreadGroups::new(&[]), units, n, 4);
        let empty = ChunkQueue::with_shares(&mut c, units, 3, n, 4, Some(&mut shares)).unwrap();
        assert_eq!(claims(&empty, 0, units, n), want);
    }

    #[test]
    fn shares_made_for_another_chunk_count_are_refused() {
        let groups = ThreadGroups::new(&[0, 1]);
        let mut shares = ChunkShares::new(&groups, 100, 8, 4);
        let mut out = vec![0.0f32; 100];
        assert!(ChunkQueue::with_shares(&mut out, 100, 1, 9, 4, Some(&mut shares)).is_none());
    }

    #[test]
    fn grouped_threads_together_claim_every_chunk_once() {
        let groups = ThreadGroups::new(&[0, 0, 1, 1, 1, 2]);
        for (units, n) in [(2560usize, 24usize), (6912, 64), (100, 30), (64, 3)] {
            let mut out = vec![0u32; units * 2];
            let mut shares = ChunkShares::new(&groups, units, n, 4);
            {
                let q = ChunkQueue::with_shares(&mut out, units, 2, n, 4, Some(&mut shares));
                let q = q.unwrap();
                std::thread::scope(|s| {
                    for t in 0..groups.n_threads() {
                        let (q, g) = (&q, groups.of_thread(t));
                        s.spawn(move || {
                            while let Some((_, dst)) = q.claim_from(g) {
                                dst.iter_mut().for_each(|x| *x += 1);
                            }
                        });
                    }
                });
            }
            assert!(out.iter().all(|&x| x == 1), "{units} rows, {n} chunks");
        }
    }
}
