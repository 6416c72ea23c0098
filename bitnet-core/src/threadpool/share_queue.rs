//! Work sharing for the one-token products of decode: [`ShareQueue`] gives each part of a
//! region a contiguous share of the rows, which it claims front to back a step at a time; a
//! part whose share is done takes smaller steps from the back of the others' shares.
//!
//! [`ChunkQueue`](super::ChunkQueue) hands a product's chunks out in turn, so on two threads
//! each reads every other chunk: its weight stream restarts at each chunk (the hardware
//! prefetcher ramps up again), and a region's end waits on the other thread's last chunk,
//! an eighth of a product. Here a thread's reads are one sequential stream for its whole
//! share, and the end waits on one small step (measured in `bench/2026-12-07-share-queue.md`).
//!
//! Which rows a part computes depends on timing, but a one-token product's rows are
//! independent (each row one dot product, written to its own element), so the results do
//! not.

use std::marker::PhantomData;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{CachePadded, split_range};

/// Most parts a [`ShareQueue`] shares out to: the shares live in the queue (decode allocates
/// nothing), and beyond this many threads a product's rows are many steps anyway.
pub const MAX_SHARE_PARTS: usize = 16;

/// A `&mut [T]` of `units` elements shared out as above.
pub struct ShareQueue<'a, T> {
    ptr: *mut T,
    units: usize,
    align: usize,
    /// Blocks of `align` units an owner's claim takes.
    step: u64,
    /// Blocks of `align` units a claim from another part's share takes.
    steal_step: u64,
    /// Part `p`'s share as `(front << 32) | back`, in blocks of `align` units: blocks
    /// `front..back` are unclaimed. Its owner takes from the front, the others from the back.
    shares: [CachePadded<AtomicU64>; MAX_SHARE_PARTS],
    parts: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: a `ShareQueue` is an exclusive borrow of a `[T]`; moving it to another thread
// moves that borrow, which is sound when `T: Send` (as for `&mut [T]`).
unsafe impl<T: Send> Send for ShareQueue<'_, T> {}
// SAFETY: shared access only hands out `&mut` to distinct ranges: every claim moves one end
// of one share's unclaimed block range inward with a compare-and-swap, so each block is
// handed out once, and the shares partition the blocks. Threads sharing the queue each get
// exclusive access to distinct `T`s, i.e. `&mut T` sent across threads (`T: Send`).
unsafe impl<T: Send> Sync for ShareQueue<'_, T> {}

impl<T> std::fmt::Debug for ShareQueue<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareQueue")
            .field("units", &self.units)
            .field("align", &self.align)
            .field("step", &self.step)
            .field("parts", &self.parts)
            .finish_non_exhaustive()
    }
}

fn pack(front: u64, back: u64) -> u64 {
    (front << 32) | back
}

fn unpack(v: u64) -> (u64, u64) {
    (v >> 32, v & u64::from(u32::MAX))
}

/// Takes the blocks `cut(front, back)` off one end of `share`'s unclaimed `front..back` (the
/// cut is non-empty and holds `front` or `back`), or `None` once the share is empty.
fn take(
    share: &CachePadded<AtomicU64>,
    cut: impl Fn(u64, u64) -> Range<u64>,
) -> Option<Range<u64>> {
    let mut cur = share.0.load(Ordering::Relaxed);
    loop {
        let (front, back) = unpack(cur);
        if front >= back {
            return None;
        }
        let r = cut(front, back);
        debug_assert!(r.start < r.end && (r.start == front || r.end == back));
        let rest = if r.start == front {
            pack(r.end, back)
        } else {
            pack(front, r.start)
        };
        match share
            .0
            .compare_exchange_weak(cur, rest, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => return Some(r),
            Err(now) => cur = now,
        }
    }
}

impl<'a, T> ShareQueue<'a, T> {
    /// Borrows `slice[..units]` for `parts` parts: part `p` owns the blocks
    /// `split_range(blocks, parts, p, 1)` of the `units.div_ceil(align)` blocks of `align`
    /// units (`parts == 0` counts as 1). An owner's claim takes `step` units, a claim on
    /// another's share `steal_step` (each rounded up to whole blocks, at least one, at most
    /// every block). Returns `None` if the slice is too short, there are more than `u32::MAX`
    /// blocks or more than [`MAX_SHARE_PARTS`] parts.
    pub fn new(
        slice: &'a mut [T],
        units: usize,
        parts: usize,
        step: usize,
        steal_step: usize,
        align: usize,
    ) -> Option<Self> {
        let align = align.max(1);
        let blocks = units.div_ceil(align);
        let parts = parts.max(1);
        if units > slice.len() || u32::try_from(blocks).is_err() || parts > MAX_SHARE_PARTS {
            return None;
        }
        // A step of more blocks than there are is every block: front + step stays far
        // below u64's range.
        let blocks_of = |n: usize| n.div_ceil(align).clamp(1, blocks.max(1)) as u64;
        // Parts beyond `parts` own nothing (`blocks..blocks`).
        let shares = std::array::from_fn(|p| {
            let r = split_range(blocks, parts, p, 1);
            CachePadded(AtomicU64::new(pack(r.start as u64, r.end as u64)))
        });
        Some(ShareQueue {
            ptr: slice.as_mut_ptr(),
            units,
            align,
            step: blocks_of(step),
            steal_step: blocks_of(steal_step),
            shares,
            parts,
            _borrow: PhantomData,
        })
    }

    /// The next step of part `part`'s own share, or once that is done, a step from the back
    /// of another's (`part + 1`, `part + 2`, ... round); `None` once every block is claimed.
    /// A part number beyond the parts only steals.
    #[allow(
        clippy::mut_from_ref,
        reason = "each block is handed out once (atomic claim)"
    )]
    pub fn claim(&self, part: usize) -> Option<(Range<usize>, &mut [T])> {
        let n = self.parts;
        let own = self.shares[..n].get(part).and_then(|s| self.take_front(s));
        let blocks = own.or_else(|| {
            (1..=n).find_map(|k| {
                let victim = (part + k) % n;
                (victim != part)
                    .then(|| self.take_back(&self.shares[victim]))
                    .flatten()
            })
        })?;
        // SAFETY: `take_front` and `take_back` hand each block out once (see `Sync`), and
        // only blocks of a share, which lie within the blocks of `new`.
        Some(unsafe { self.range(blocks) })
    }

    /// A step from the front of `share` (its owner's claim).
    fn take_front(&self, share: &CachePadded<AtomicU64>) -> Option<Range<u64>> {
        take(share, |front, back| front..(front + self.step).min(back))
    }

    /// A step from the back of `share` (another part's claim).
    fn take_back(&self, share: &CachePadded<AtomicU64>) -> Option<Range<u64>> {
        take(share, |front, back| {
            back.saturating_sub(self.steal_step).max(front)..back
        })
    }

    /// Blocks `b`'s unit range and elements.
    ///
    /// # Safety
    /// `b` was claimed (each block is asked for once in the queue's life) and lies within
    /// the blocks of `new`.
    #[allow(
        clippy::mut_from_ref,
        reason = "each block is handed out once (atomic claim)"
    )]
    unsafe fn range(&self, b: Range<u64>) -> (Range<usize>, &mut [T]) {
        debug_assert!(b.start < b.end, "claims are never empty");
        let start = (b.start as usize).saturating_mul(self.align);
        let end = (b.end as usize).saturating_mul(self.align).min(self.units);
        // SAFETY: claimed block ranges are pairwise disjoint and within `units.div_ceil(align)`
        // blocks, so `start..end` lies within the `units` elements checked in `new` and is
        // disjoint from every other claim. The original `&'a mut [T]` is unusable while
        // `self` borrows it.
        let s = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), end - start) };
        (start..end, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The unit ranges of up to `k` successive claims of `part`.
    fn claims(q: &ShareQueue<'_, u32>, part: usize, k: usize) -> Vec<Range<usize>> {
        (0..k)
            .map_while(|_| q.claim(part).map(|(r, _)| r))
            .collect()
    }

    #[test]
    fn a_part_streams_its_share_front_to_back_then_steals_from_the_back() {
        // 98 units in blocks of 4 (25 blocks, the last of 2 units), two parts: blocks 0..13
        // and 13..25.
        let mut out = vec![0u32; 98];
        let q = ShareQueue::new(&mut out, 98, 2, 16, 16, 4).unwrap();
        assert_eq!(claims(&q, 0, 3), [0..16, 16..32, 32..48]);
        // Part 1 owns units 52..100: its front first.
        assert_eq!(q.claim(1).map(|(r, _)| r), Some(52..68));
        // Part 0 finishes its own (48..52), then steals part 1's last step, cut at `units`.
        assert_eq!(claims(&q, 0, 2), [48..52, 84..98]);
        // Part 1 goes on from its front to what was stolen.
        assert_eq!(claims(&q, 1, 3), vec![68..84]);
        assert!(q.claim(0).is_none() && q.claim(1).is_none());
    }

    #[test]
    fn owners_and_thieves_take_their_own_step_sizes() {
        // 64 units, one per block, two parts of 32: owners take 12, thieves 5.
        let mut out = vec![0u32; 64];
        let q = ShareQueue::new(&mut out, 64, 2, 12, 5, 1).unwrap();
        assert_eq!(claims(&q, 0, 4), [0..12, 12..24, 24..32, 59..64]);
        assert_eq!(claims(&q, 1, 4), [32..44, 44..56, 56..59]);
        assert_eq!(claims(&q, 0, 1), [] as [Range<usize>; 0]);
    }

    #[test]
    fn steps_of_any_size_hand_out_every_unit_once() {
        // Steps far beyond the blocks (even usize::MAX) take whatever is left.
        for (step, steal) in [(usize::MAX, 1), (1, usize::MAX), (usize::MAX, usize::MAX)] {
            let mut out = vec![0u32; 64];
            {
                let q = ShareQueue::new(&mut out, 64, 2, step, steal, 1).unwrap();
                // The two parts in turn until neither gets anything.
                let mut idle = 0;
                for part in [1, 0].into_iter().cycle() {
                    let Some((r, dst)) = q.claim(part) else {
                        idle += 1;
                        if idle == 2 {
                            break;
                        }
                        continue;
                    };
                    idle = 0;
                    assert!(!r.is_empty() && r.end <= 64, "{r:?}");
                    dst.iter_mut().for_each(|x| *x += 1);
                }
            }
            assert!(out.iter().all(|&x| x == 1), "steps {step}, {steal}");
        }
    }

    #[test]
    fn a_share_is_never_handed_out_twice_under_contention() {
        for (units, parts, step, steal, align) in [
            (2560usize, 2usize, 100usize, 100usize, 4usize),
            (6912, 3, 256, 64, 8),
            (640, 8, 4, 16, 4),
            (7, 4, 1, 1, 1),
            (1, 2, 64, 0, 4),
        ] {
            let mut out = vec![0u32; units];
            {
                let q = ShareQueue::new(&mut out, units, parts, step, steal, align).unwrap();
                // One thread more than parts (it only steals), all let go at once.
                let start = std::sync::Barrier::new(parts + 1);
                std::thread::scope(|s| {
                    for p in 0..=parts {
                        let (q, start) = (&q, &start);
                        s.spawn(move || {
                            start.wait();
                            while let Some((r, dst)) = q.claim(p) {
                                assert_eq!(r.len(), dst.len());
                                assert!(r.start % align == 0);
                                dst.iter_mut().for_each(|x| *x += 1);
                            }
                        });
                    }
                });
            }
            assert!(out.iter().all(|&x| x == 1), "{units} units, {parts} parts");
        }
    }

    #[test]
    fn a_short_slice_or_too_many_parts_are_refused() {
        let mut out = vec![0f32; 10];
        assert!(ShareQueue::new(&mut out, 11, 2, 4, 4, 1).is_none());
        assert!(ShareQueue::new(&mut out, 10, 2, 4, 4, 1).is_some());
        assert!(
            ShareQueue::new(&mut out, 0, 2, 4, 4, 1)
                .unwrap()
                .claim(0)
                .is_none()
        );
        assert!(ShareQueue::new(&mut out, 10, MAX_SHARE_PARTS + 1, 4, 4, 1).is_none());
    }
}
