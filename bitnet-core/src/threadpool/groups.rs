//! Threads in groups (the NUMA nodes of a placement, `crate::numa`), and how a product's
//! rows are shared among the groups: one contiguous share per group, in proportion to its
//! threads, so that a group's threads compute the rows whose weights were bound to its node.
//!
//! A product is still cut into the chunks of `split_range` a pool without groups uses
//! ([`super::ChunkQueue`]); a chunk belongs to the share that holds its first row
//! ([`ThreadGroups::chunk_bounds`]). So the chunk boundaries, the blocked output layout and
//! the results are those of an ungrouped pool; only the order in which threads claim chunks
//! changes (their own group's first, see [`super::ChunkShares`]).

use std::ops::Range;

/// Groups a pool tells apart at most. More labels (nodes) than this are merged into this
/// many groups of consecutive labels, so a queue's per-group counters fit in a fixed array
/// (a product allocates nothing): eight covers two sockets of four nodes each.
pub const MAX_GROUPS: usize = 8;

/// Each pool thread's group, and each group's threads and labels; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadGroups {
    of_thread: Box<[usize]>,
    threads: Box<[usize]>,
    labels: Box<[Vec<usize>]>,
}

impl ThreadGroups {
    /// Groups of threads by label (thread `t` has label `labels[t]`, its NUMA node): one
    /// group per distinct label, in ascending label order; beyond [`MAX_GROUPS`] labels,
    /// consecutive labels share a group.
    pub fn new(labels: &[usize]) -> ThreadGroups {
        let mut distinct = labels.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        let n_groups = distinct.len().min(MAX_GROUPS);
        let group_of_rank = |rank: usize| rank * n_groups / distinct.len();
        let mut threads = vec![0; n_groups];
        let mut group_labels = vec![Vec::new(); n_groups];
        for (rank, &label) in distinct.iter().enumerate() {
            group_labels[group_of_rank(rank)].push(label);
        }
        let of_thread: Box<[usize]> = labels
            .iter()
            .map(|l| {
                let g = group_of_rank(distinct.binary_search(l).unwrap_or(0));
                threads[g] += 1;
                g
            })
            .collect();
        ThreadGroups {
            of_thread,
            threads: threads.into(),
            labels: group_labels.into(),
        }
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// Threads in all.
    pub fn n_threads(&self) -> usize {
        self.of_thread.len()
    }

    /// Thread `tid`'s group (group 0 for a thread the groups do not know).
    pub fn of_thread(&self, tid: usize) -> usize {
        self.of_thread.get(tid).copied().unwrap_or(0)
    }

    /// Threads of group `g`.
    pub fn threads(&self, g: usize) -> usize {
        self.threads[g]
    }

    /// The labels (nodes) of group `g`, ascending.
    pub fn labels(&self, g: usize) -> &[usize] {
        &self.labels[g]
    }

    /// First `align` block of group `g`'s share of `blocks` blocks: its threads' fraction of
    /// the pool, rounded down (the last share ends at `blocks`).
    fn share_start_block(&self, blocks: usize, g: usize) -> usize {
        if g >= self.len() {
            return blocks;
        }
        let total = self.n_threads().max(1);
        let before: usize = self.threads[..g].iter().sum();
        // u128: blocks * threads cannot overflow.
        (blocks as u128 * before as u128 / total as u128) as usize
    }

    /// Group `g`'s share of `units` rows in groups of `align`: contiguous, in group order,
    /// in proportion to the group's threads, its boundaries multiples of `align` (the last
    /// share ends at `units`).
    pub fn share_rows(&self, units: usize, align: usize, g: usize) -> Range<usize> {
        let align = align.max(1);
        let blocks = units.div_ceil(align);
        let row = |b: usize| b.saturating_mul(align).min(units);
        row(self.share_start_block(blocks, g))..row(self.share_start_block(blocks, g + 1))
    }

    /// Which of `n_chunks` chunks of `units` rows (`split_range(units, n_chunks, c, align)`)
    /// each group claims first: group `g` owns chunks `bounds[g]..bounds[g + 1]`, those
    /// whose first row lies in its [`ThreadGroups::share_rows`] (a chunk that straddles two
    /// shares belongs to the one holding its first row). Entries past `len()` are unused.
    pub fn chunk_bounds(
        &self,
        units: usize,
        align: usize,
        n_chunks: usize,
    ) -> [usize; MAX_GROUPS + 1] {
        let blocks = units.div_ceil(align.max(1));
        let n_chunks = n_chunks.max(1);
        // Group 0 from chunk 0 (also with no group at all), the last to the end: the runs
        // partition the chunks, each handed out by one counter.
        let mut bounds = [n_chunks; MAX_GROUPS + 1];
        bounds[0] = 0;
        for (g, b) in bounds.iter_mut().enumerate().take(self.len()).skip(1) {
            *b = first_chunk_from(blocks, n_chunks, self.share_start_block(blocks, g));
        }
        bounds
    }
}

/// The first of `n_chunks` chunks of `blocks` blocks (as `split_range` cuts them: the first
/// `blocks % n_chunks` chunks one block longer) that starts at block `s` or later
/// (`n_chunks` if none does).
fn first_chunk_from(blocks: usize, n_chunks: usize, s: usize) -> usize {
    let (base, extra) = (blocks / n_chunks, blocks % n_chunks);
    // Chunk c starts at block c * base + min(c, extra).
    let long_end = extra * (base + 1);
    let c = if s <= long_end {
        s.div_ceil(base + 1)
    } else {
        // Past the long chunks `base` > 0, else `s` would be beyond every block.
        extra + (s - long_end).div_ceil(base.max(1))
    };
    c.min(n_chunks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::threadpool::split_range;

    #[test]
    fn three_threads_to_one_share_the_rows_three_to_one() {
        let g = ThreadGroups::new(&[0, 0, 0, 1]);
        assert_eq!((g.len(), g.threads(0), g.threads(1)), (2, 3, 1));
        assert_eq!(g.labels(1), &[1]);
        assert_eq!(g.share_rows(2560, 4, 0), 0..1920);
        assert_eq!(g.share_rows(2560, 4, 1), 1920..2560);
        // 16 chunks of 160 rows: the node boundary is a chunk boundary.
        assert_eq!(g.chunk_bounds(2560, 4, 16)[..3], [0, 12, 16]);
        // An odd size: shares stay aligned, the last one ends at the rows.
        assert_eq!(g.share_rows(1001, 4, 0), 0..752);
        assert_eq!(g.share_rows(1001, 4, 1), 752..1001);
    }

    #[test]
    fn labels_are_grouped_in_order_and_merged_beyond_the_limit() {
        let g = ThreadGroups::new(&[3, 1, 1, 3]);
        assert_eq!(
            (0..4).map(|t| g.of_thread(t)).collect::<Vec<_>>(),
            [1, 0, 0, 1]
        );
        assert_eq!((g.labels(0), g.labels(1)), (&[1][..], &[3][..]));
        let many: Vec<usize> = (0..12).collect();
        let g = ThreadGroups::new(&many);
        assert_eq!(g.len(), MAX_GROUPS);
        let labels: Vec<usize> = (0..g.len()).flat_map(|i| g.labels(i).to_vec()).collect();
        assert_eq!(labels, many, "every label in one group, in order");
        assert!((0..g.len()).all(|i| (1..=2).contains(&g.threads(i))));
    }

    #[test]
    fn a_chunk_belongs_to_the_share_holding_its_first_row() {
        for labels in [
            &[0usize][..],
            &[0, 1],
            &[0, 0, 0, 1],
            &[0, 1, 1, 1, 1, 2],
            &[5, 5, 6, 7, 7, 7, 7, 7, 7],
        ] {
            let g = ThreadGroups::new(labels);
            for units in [1usize, 4, 7, 64, 100, 640, 2560, 6913] {
                for align in [1usize, 4, 16] {
                    for n_chunks in [1usize, 2, 3, 5, 8, 16, 40, 1000] {
                        let bounds = g.chunk_bounds(units, align, n_chunks);
                        for c in 0..n_chunks {
                            let first = split_range(units, n_chunks, c, align).start;
                            let want = (0..g.len())
                                .find(|&i| g.share_rows(units, align, i).contains(&first))
                                .unwrap_or(g.len() - 1);
                            let got = (0..g.len())
                                .find(|&i| (bounds[i]..bounds[i + 1]).contains(&c))
                                .expect("every chunk in a share");
                            assert!(
                                got == want || split_range(units, n_chunks, c, align).is_empty(),
                                "{labels:?} {units} rows /{align}, {n_chunks} chunks: chunk \
                                 {c} in share {got}, its first row {first} in {want}"
                            );
                        }
                        assert_eq!((bounds[0], bounds[g.len()]), (0, n_chunks));
                    }
                }
            }
        }
    }
}
