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

use std::marker::PhantomData;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{CachePadded, split_range};

/// A `&mut [T]` cut into chunks that threads claim one at a time; see the module docs.
pub struct ChunkQueue<'a, T> {
    ptr: *mut T,
    units: usize,
    unit_len: usize,
    n_chunks: usize,
    align: usize,
    next: CachePadded<AtomicUsize>,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: a `ChunkQueue` is an exclusive borrow of a `[T]`; moving it to another thread moves
// that borrow, which is sound when `T: Send` (as for `&mut [T]`).
unsafe impl<T: Send> Send for ChunkQueue<'_, T> {}
// SAFETY: shared access only hands out `&mut` to distinct chunks (each chunk index is taken
// once, by an atomic counter), and distinct chunks are disjoint ranges: threads sharing it
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
        let need = units.checked_mul(unit_len)?;
        if need > slice.len() {
            return None;
        }
        Some(ChunkQueue {
            ptr: slice.as_mut_ptr(),
            units,
            unit_len,
            n_chunks: n_chunks.max(1),
            align: align.max(1),
            next: CachePadded(AtomicUsize::new(0)),
            _borrow: PhantomData,
        })
    }

    /// Number of chunks.
    pub fn n_chunks(&self) -> usize {
        self.n_chunks
    }

    /// The next unclaimed non-empty chunk: its unit range and its elements; `None` once
    /// every chunk has been claimed.
    #[allow(
        clippy::mut_from_ref,
        reason = "each chunk is handed out once (atomic claim)"
    )]
    pub fn claim(&self) -> Option<(Range<usize>, &mut [T])> {
        loop {
            let c = self.next.0.fetch_add(1, Ordering::Relaxed);
            if c >= self.n_chunks {
                // Keep the counter from wrapping however often a drained queue is asked.
                self.next.0.store(self.n_chunks, Ordering::Relaxed);
                return None;
            }
            let r = split_range(self.units, self.n_chunks, c, self.align);
            if r.is_empty() {
                continue;
            }
            let (a, b) = (r.start * self.unit_len, r.end * self.unit_len);
            // SAFETY: `split_range` gives pairwise disjoint ranges within `0..units` for
            // distinct `c`, so `a..b` lies within the `units * unit_len` elements checked in
            // `new` and is disjoint from every other chunk; the `fetch_add` hands out each
            // `c` to one caller only. The original `&'a mut [T]` is unusable while `self`
            // borrows it.
            let s = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(a), b - a) };
            return Some((r, s));
        }
    }
}
