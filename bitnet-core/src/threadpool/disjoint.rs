//! Disjoint `&mut` windows of one slice for several threads of a region: each thread claims
//! the range it writes ([`DisjointSlice::slice_mut`]); a claim that overlaps one already
//! handed out, or lies outside the slice, is refused, so no two threads ever hold the same
//! element mutably.

// Handing out `&mut` windows of one slice to several threads needs `unsafe`, fenced in small
// functions with SAFETY comments.
#![allow(unsafe_code)]

use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::{Mutex, PoisonError};

use thiserror::Error;

use super::split_range;

/// Errors of [`DisjointSlice::try_slice_mut`].
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DisjointError {
    #[error("range {start}..{end} is invalid for a slice of length {len}")]
    OutOfBounds {
        start: usize,
        end: usize,
        len: usize,
    },
    #[error("range {start}..{end} overlaps {held_start}..{held_end}, already handed out")]
    Overlap {
        start: usize,
        end: usize,
        held_start: usize,
        held_end: usize,
    },
}

const INLINE_CLAIMS: usize = 16;

/// Ranges handed out so far; inline storage so a region with few threads never allocates.
#[derive(Debug)]
struct Claims {
    inline: [(usize, usize); INLINE_CLAIMS],
    n_inline: usize,
    spill: Vec<(usize, usize)>,
}

impl Claims {
    fn iter(&self) -> impl Iterator<Item = &(usize, usize)> {
        self.inline[..self.n_inline].iter().chain(&self.spill)
    }

    fn push(&mut self, claim: (usize, usize)) {
        if self.n_inline < INLINE_CLAIMS {
            self.inline[self.n_inline] = claim;
            self.n_inline += 1;
        } else {
            self.spill.push(claim);
        }
    }
}

/// One `&mut [T]` shared by the threads of a region, each writing its own index range.
///
/// [`DisjointSlice::slice_mut`] hands out `&mut` sub-slices; every range is checked (always,
/// not only in debug builds) against the ranges already handed out, so two live `&mut` never
/// alias. The check is a short uncontended lock per call, meant for one call per thread per
/// region. The claims last as long as the `DisjointSlice`; drop it to use the slice again.
pub struct DisjointSlice<'a, T> {
    ptr: *mut T,
    len: usize,
    claims: Mutex<Claims>,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: a `DisjointSlice` is an exclusive borrow of a `[T]`; moving it to another thread
// moves that borrow, which is sound when `T: Send` (as for `&mut [T]`).
unsafe impl<T: Send> Send for DisjointSlice<'_, T> {}
// SAFETY: shared access only hands out `&mut` to pairwise disjoint ranges (checked under the
// `claims` lock), so threads sharing it each get exclusive access to distinct `T`s: this is
// sending `&mut T` to other threads, sound for `T: Send`.
unsafe impl<T: Send> Sync for DisjointSlice<'_, T> {}

impl<T> fmt::Debug for DisjointSlice<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DisjointSlice")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl<'a, T> DisjointSlice<'a, T> {
    /// Borrows `slice` for disjoint writes.
    pub fn new(slice: &'a mut [T]) -> Self {
        DisjointSlice {
            ptr: slice.as_mut_ptr(),
            len: slice.len(),
            claims: Mutex::new(Claims {
                inline: [(0, 0); INLINE_CLAIMS],
                n_inline: 0,
                spill: Vec::new(),
            }),
            _borrow: PhantomData,
        }
    }

    /// Length of the whole slice.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the whole slice is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Exclusive access to `range`, which must lie in bounds and not overlap any non-empty
    /// range handed out before by this `DisjointSlice`.
    #[allow(clippy::mut_from_ref, reason = "disjointness is checked at run time")]
    pub fn try_slice_mut(&self, range: Range<usize>) -> Result<&mut [T], DisjointError> {
        let (start, end) = (range.start, range.end);
        if start > end || end > self.len {
            return Err(DisjointError::OutOfBounds {
                start,
                end,
                len: self.len,
            });
        }
        if start < end {
            let mut claims = self.claims.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(&(hs, he)) = claims.iter().find(|&&(hs, he)| start < he && hs < end) {
                return Err(DisjointError::Overlap {
                    start,
                    end,
                    held_start: hs,
                    held_end: he,
                });
            }
            claims.push((start, end));
        }
        // SAFETY: `start..end` is in bounds of the borrowed slice (checked above) and, being
        // disjoint from every range handed out before (checked and recorded under the lock),
        // no other live reference derived from this `DisjointSlice` covers these elements;
        // the original `&'a mut [T]` is unusable while `self` borrows it.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), end - start) })
    }

    /// As [`DisjointSlice::try_slice_mut`], panicking on a bad or overlapping range (a bug
    /// in the caller's partitioning, like an out-of-bounds index).
    #[allow(clippy::mut_from_ref, reason = "disjointness is checked at run time")]
    pub fn slice_mut(&self, range: Range<usize>) -> &mut [T] {
        match self.try_slice_mut(range) {
            Ok(s) => s,
            Err(e) => panic!("DisjointSlice::slice_mut: {e}"),
        }
    }

    /// The `part`-th of `n_parts` ranges from [`split_range`], with its range.
    #[allow(clippy::mut_from_ref, reason = "disjointness is checked at run time")]
    pub fn part(&self, n_parts: usize, part: usize, align: usize) -> (Range<usize>, &mut [T]) {
        let range = split_range(self.len, n_parts, part, align);
        (range.clone(), self.slice_mut(range))
    }
}
