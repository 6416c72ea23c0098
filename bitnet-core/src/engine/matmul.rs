//! The products of a forward pass spread over the pool's threads: every product cuts its
//! output rows into chunks the threads claim as they go ([`matmul_group`]; a slow or
//! descheduled thread holds back one chunk, not half the rows), and so does the output head
//! ([`head_rows`]). A one-token product on a pool without groups is shared differently: each
//! thread streams a contiguous share and then takes small steps from the others'
//! ([`ShareQueue`], in `one_token_group`); its output is the plain `[rows]` either way. A chunk of a product's rows for `n` tokens is written as one contiguous
//! block `[n][rows of the chunk]` (the layout the kernels produce); [`Blocked`] reads a
//! token's row back out of those blocks. Each row is computed whole by one thread, so the
//! results do not depend on the thread count.
//!
//! A pool whose threads sit on several NUMA nodes (`--numa`) has them in groups: each
//! product's rows are then split into one share per node, in proportion to its threads
//! (`ThreadGroups::share_rows`), the same chunks are claimed by the node's threads first
//! (`ChunkQueue::claim_from`), and [`weight_shares`] lists the bytes of each share, which the
//! engine binds to the node (`numa::bind`). Without groups, claiming is a plain pool's.

use std::ops::Range;

use bitnet_kernels::float::{self, Q8R_ROWS};
use bitnet_kernels::{Isa, MATMUL_CALL_ROWS};

use super::head_acts::HeadActs;
use crate::model::linear::{LinInput, Linear};
use crate::model::{Head, Model, Store};
use crate::threadpool::{
    ChunkQueue, ChunkShares, MAX_SHARE_PARTS, ShareQueue, ThreadGroups, ThreadPool, split_range,
};

/// Output `[n][rows]` of a product cut into per-chunk blocks (`parts` chunks).
#[derive(Copy, Clone, Debug)]
pub(super) struct Blocked<'a> {
    pub(super) data: &'a [f32],
    pub(super) n_tok: usize,
    pub(super) rows: usize,
    pub(super) align: usize,
    pub(super) parts: usize,
}

impl Blocked<'_> {
    /// The pieces of token `t`'s row: `(destination columns, source slice)`.
    #[inline]
    fn pieces(&self, t: usize) -> impl Iterator<Item = (Range<usize>, &[f32])> + '_ {
        (0..self.parts).filter_map(move |p| {
            let r = split_range(self.rows, self.parts, p, self.align);
            if r.is_empty() {
                return None;
            }
            let off = self.n_tok * r.start + t * r.len();
            Some((r.clone(), &self.data[off..off + r.len()]))
        })
    }

    /// Copies token `t`'s row into `dst` (`rows` long).
    pub(super) fn copy_row(&self, t: usize, dst: &mut [f32]) {
        for (r, src) in self.pieces(t) {
            dst[r].copy_from_slice(src);
        }
    }

    /// `dst += row t`.
    pub(super) fn add_row(&self, isa: Isa, t: usize, dst: &mut [f32]) {
        for (r, src) in self.pieces(t) {
            float::add_inplace(isa, &mut dst[r], src);
        }
    }
}

/// Chunks per thread a product is cut into at most (see [`n_chunks`]).
pub(super) const CHUNKS_PER_THREAD: usize = 4;
/// Smallest chunk worth a claim, in weight bytes (a claim costs an atomic operation; a
/// chunk should stream many times that long).
const MIN_CHUNK_BYTES: usize = 64 << 10;

/// Chunks a product of `rows` rows (groups of `align`) streaming `bytes` of weights is cut
/// into on `nt` threads, at most `per_thread` each: one on a single thread, else enough
/// that threads take chunks as they finish (a slow or descheduled thread holds back one
/// chunk, not half the rows), but no chunk under [`MIN_CHUNK_BYTES`].
pub(super) fn n_chunks(
    rows: usize,
    align: usize,
    bytes: usize,
    nt: usize,
    per_thread: usize,
) -> usize {
    if nt <= 1 {
        return 1;
    }
    let blocks = rows.div_ceil(align.max(1)).max(1);
    (per_thread * nt)
        .min((bytes / MIN_CHUNK_BYTES).max(nt))
        .min(blocks)
}

fn lin_chunks(lin: &Linear, nt: usize, n_tok: usize) -> usize {
    let (rows, align, bytes) = (lin.rows, lin.align(), lin.stream_bytes());
    if n_tok < BATCH_TOKENS {
        return n_chunks(rows, align, bytes, nt, CHUNKS_PER_THREAD);
    }
    batch_chunks(rows, align, bytes, nt)
}

/// [`n_chunks`] for a product of [`BATCH_TOKENS`] tokens or more. A kernel call reads every
/// token's activations once (256 tokens of a 6912-column input: 1.8 MB, beyond L2), so a
/// chunk of fewer rows than a call takes reads them more often per multiply-add. Where the
/// rows allow it, each thread gets a whole number of chunks of at least
/// [`MATMUL_CALL_ROWS`], and at least two (so a slow thread still hands work over). At pp512
/// on 2 threads (AVX2, 2B-4T shape; q: 10 chunks of 256 rows, not 25 of 102) the pass ran
/// 1.6% faster (5 of 6 interleaved rounds), and the threads waited no longer for the last
/// chunk. On many threads the rows run out first and the count stays as before. (From the
/// same 16 tokens `ternary_matmul` cuts a chunk into calls of one size, 266 rows in one.)
fn batch_chunks(rows: usize, align: usize, bytes: usize, nt: usize) -> usize {
    let chunks = n_chunks(rows, align, bytes, nt, BATCH_CHUNKS_PER_THREAD);
    let per_thread = (rows / (nt.max(1) * MATMUL_CALL_ROWS)).max(2);
    chunks.min(nt * per_thread)
}

/// From this many tokens a product is compute bound and a chunk's work grows with the
/// tokens: it is cut finer ([`BATCH_CHUNKS_PER_THREAD`]), so the threads end together. At
/// pp512 on 2 threads (AVX2, 2B-4T shape) the time threads spent waiting for the last
/// chunk of a product went from 4.2-4.8% of the pass at 4 chunks a thread to 1.1-3.3% at
/// 16 (`bitnet bench --profile`, three interleaved rounds).
const BATCH_TOKENS: usize = 16;
const BATCH_CHUNKS_PER_THREAD: usize = 16;

/// The products of one group of projections sharing an input (q/k/v, gate/up, ...), each
/// cut into chunks of rows ([`n_chunks`]) that the pool's threads claim as they go (with
/// thread groups, their own node's share first; one token without groups: shares and steps,
/// `one_token_group`). `outs[i]` receives projection `i`'s blocked
/// output (at least `n_tok * rows` long).
pub(super) fn matmul_group(
    pool: &ThreadPool,
    isa: Isa,
    store: &Store,
    binary_acts: bool,
    lins: &[&Linear],
    inp: &LinInput<'_>,
    outs: &mut [&mut [f32]],
) {
    let n = inp.n_tok;
    let nt = pool.n_threads();
    let groups = pool.groups();
    if n == 1 && (2..=MAX_SHARE_PARTS).contains(&nt) && groups.is_none() {
        return one_token_group(pool, isa, store, binary_acts, lins, inp, outs);
    }
    let mut shares: [Option<ChunkShares>; 3] = {
        let mut it = lins.iter();
        std::array::from_fn(|_| {
            let lin = it.next()?;
            let g = groups?;
            Some(ChunkShares::new(
                g,
                lin.rows,
                lin_chunks(lin, nt, n),
                lin.align(),
            ))
        })
    };
    let queues: [Option<ChunkQueue<'_, f32>>; 3] = {
        let mut it = lins.iter().zip(outs.iter_mut()).zip(shares.iter_mut());
        std::array::from_fn(|_| {
            it.next().map(|((lin, o), sh)| {
                let chunks = lin_chunks(lin, nt, n);
                ChunkQueue::with_shares(&mut o[..], lin.rows, n, chunks, lin.align(), sh.as_mut())
                    .expect("projection output buffer holds n_tok * rows")
            })
        })
    };
    let job = |_tid: usize, _nt: usize| {
        let group = pool.current_group();
        for (lin, q) in lins.iter().zip(queues.iter().flatten()) {
            while let Some((r, dst)) = q.claim_from(group) {
                lin.compute(isa, store, binary_acts, inp, r, dst);
            }
        }
    };
    if nt == 1 {
        job(0, 1);
    } else {
        pool.run(&job);
    }
}

/// [`matmul_group`] for one token on a pool without thread groups (of at most
/// [`MAX_SHARE_PARTS`] threads): each thread streams its own contiguous share of every
/// product and then helps with the others' ([`ShareQueue`]).
fn one_token_group(
    pool: &ThreadPool,
    isa: Isa,
    store: &Store,
    binary_acts: bool,
    lins: &[&Linear],
    inp: &LinInput<'_>,
    outs: &mut [&mut [f32]],
) {
    let nt = pool.n_threads();
    let queues: [Option<ShareQueue<'_, f32>>; 3] = {
        let mut it = lins.iter().zip(outs.iter_mut());
        std::array::from_fn(|_| {
            it.next().map(|(lin, o)| {
                let row_bytes = (lin.stream_bytes() / lin.rows.max(1)).max(1);
                let (own, steal) = (OWN_STEP_BYTES / row_bytes, STEAL_STEP_BYTES / row_bytes);
                ShareQueue::new(&mut o[..], lin.rows, nt, own, steal, lin.align())
                    .expect("projection output buffer holds the rows")
            })
        })
    };
    pool.run(&|part, _| {
        for (lin, q) in lins.iter().zip(queues.iter().flatten()) {
            while let Some((r, dst)) = q.claim(part) {
                lin.compute(isa, store, binary_acts, inp, r, dst);
            }
        }
    });
}

/// Weight bytes a thread's claim on its own share of a one-token product takes. Each claim is
/// a kernel call, so small steps cost (step sizes measured in
/// `bench/2026-12-07-share-queue.md`).
const OWN_STEP_BYTES: usize = 256 << 10;
/// Weight bytes a claim from the back of another thread's share takes: the end of a region
/// waits on one such step (a few microseconds), not on one of the owner's.
const STEAL_STEP_BYTES: usize = 64 << 10;

/// Each thread group's share of every weight matrix a pass streams, as `(group, bytes)`:
/// every layer projection's rows ([`Linear::align`]-aligned shares, the rows
/// [`matmul_group`]'s groups claim first) and the head's ([`HEAD_ALIGN`]).
pub(super) fn weight_shares<'a>(model: &'a Model, groups: &ThreadGroups) -> Vec<(usize, &'a [u8])> {
    let store = &model.store;
    let mut out = Vec::new();
    for lin in model.layers.iter().flat_map(|l| l.linears()) {
        for g in 0..groups.len() {
            let rows = groups.share_rows(lin.rows, lin.align(), g);
            out.push((g, lin.row_bytes(store, rows)));
        }
    }
    let head = &model.head;
    for g in 0..groups.len() {
        let rows = groups.share_rows(head.rows(), HEAD_ALIGN, g);
        out.push((g, head.row_bytes(store, rows)));
    }
    out
}

/// The blocked view of projection output `data` as [`matmul_group`] wrote it (for one token
/// the chunk count does not matter: the blocks are the plain `[rows]`).
pub(super) fn blocked<'a>(
    pool: &ThreadPool,
    lin: &Linear,
    data: &'a [f32],
    n_tok: usize,
) -> Blocked<'a> {
    Blocked {
        data,
        n_tok,
        rows: lin.rows,
        align: lin.align(),
        parts: lin_chunks(lin, pool.n_threads(), n_tok),
    }
}

/// Row granule of a chunk of the head (keeps chunks cache-line sized, and a Q8_0 head's
/// chunks whole groups of its layout).
pub(super) const HEAD_ALIGN: usize = 16;
/// Head chunks per thread at most (about 4 MiB each for a 2B-4T Q8_0 head on 2 threads).
const HEAD_CHUNKS_PER_THREAD: usize = 48;

const _: () = assert!(HEAD_ALIGN.is_multiple_of(Q8R_ROWS));

/// The head's rows for `n` tokens into the blocked `out` (`[n][share]` per thread share):
/// a float head against the normed hidden states `hn`, a Q8_0 one against their Q8_0 rows
/// and a Q6_K one against their Q8_K rows (`acts`, which the workspace holds for such heads).
#[allow(clippy::too_many_arguments)]
pub(super) fn head_rows(
    pool: &ThreadPool,
    isa: Isa,
    store: &Store,
    head: &Head,
    hn: &[f32],
    acts: &HeadActs,
    n: usize,
    out: &mut [f32],
) {
    let job = |r: Range<usize>, dst: &mut [f32]| match (head, acts) {
        (Head::Q8(q), HeadActs::Q8 { acts, .. }) => float::matmul_q8r(isa, q, acts, n, r, dst),
        (Head::Q8(_), _) => unreachable!("the workspace holds Q8_0 activations for a Q8_0 head"),
        (Head::Q6(q), HeadActs::Q8K(acts)) => float::matmul_q6kr(isa, q, acts, n, r, dst),
        (Head::Q6(_), _) => unreachable!("the workspace holds Q8_K activations for a Q6_K head"),
        (Head::Q4(q), HeadActs::Q8 { acts, .. }) => float::matmul_q4r(isa, q, acts, n, r, dst),
        (Head::Q4(_), _) => unreachable!("the workspace holds Q8_0 activations for a Q4_0 head"),
        (Head::Rows(f), _) => {
            let data = store.bytes(&f.blob);
            float::matmul_f32(isa, f.fmt, data, f.cols, &hn[..n * f.cols], n, r, dst)
        }
    };
    let (nt, rows) = (pool.n_threads(), head.rows());
    if nt == 1 {
        job(0..rows, &mut out[..n * rows]);
        return;
    }
    let chunks = head_chunks(head, nt);
    let mut shares = pool
        .groups()
        .map(|g| ChunkShares::new(g, rows, chunks, HEAD_ALIGN));
    let q = ChunkQueue::with_shares(&mut out[..], rows, n, chunks, HEAD_ALIGN, shares.as_mut())
        .expect("head output buffer holds n * vocab");
    pool.run(&|_, _| {
        let group = pool.current_group();
        while let Some((r, dst)) = q.claim_from(group) {
            job(r, dst);
        }
    });
}

/// Chunks of [`HEAD_ALIGN`]-row groups the head is cut into on `nt` threads (the head is
/// one long product: many small chunks, a few MiB each).
pub(super) fn head_chunks(head: &Head, nt: usize) -> usize {
    n_chunks(
        head.rows(),
        HEAD_ALIGN,
        head.stream_bytes(),
        nt,
        HEAD_CHUNKS_PER_THREAD,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitnet_kernels::float::RowFormat;

    #[test]
    fn batch_chunks_are_whole_calls_where_the_rows_allow() {
        // The 2B-4T shapes at 2 threads (I2_S: 4-row groups, 2 bits a weight).
        let i2s = |rows: usize, cols: usize| batch_chunks(rows, 4, rows * cols / 4, 2);
        assert_eq!(i2s(2560, 2560), 10, "q, o");
        assert_eq!(i2s(640, 2560), 4, "k, v");
        assert_eq!(i2s(6912, 2560), 26, "gate, up");
        assert_eq!(i2s(2560, 6912), 10, "down");
        for nt in 1..=32 {
            for rows in [64, 640, 2560, 6912, 32000] {
                let bytes = rows * 640;
                let old = n_chunks(rows, 4, bytes, nt, BATCH_CHUNKS_PER_THREAD);
                let got = batch_chunks(rows, 4, bytes, nt);
                assert!(got >= 1 && got <= old, "{rows} rows, {nt} threads: {got}");
                if got < old {
                    // Cut down: whole chunks a thread, each a whole call or more.
                    assert_eq!(got % nt, 0, "{rows} rows, {nt} threads: {got}");
                    let thin = rows / got < MATMUL_CALL_ROWS;
                    assert!(!thin || got == 2 * nt, "{rows} rows, {nt} threads: {got}");
                }
            }
        }
    }

    /// `head_rows` on 1 to 3 threads (each chunking of the head) gives `want`'s bits for every
    /// one of the `n` tokens.
    fn assert_head_bits(
        store: &Store,
        head: &Head,
        hn: &[f32],
        acts: &HeadActs,
        n: usize,
        want: &[f32],
    ) {
        let vocab = head.rows();
        // The last pool has its threads on two fake nodes, 2 + 1: the same chunks.
        for (threads, nodes) in [(1, None), (2, None), (3, None), (3, Some([0, 0, 1]))] {
            let mut pool = ThreadPool::new(threads, crate::threadpool::PinPolicy::None).unwrap();
            if let Some(nodes) = nodes {
                pool.set_groups(ThreadGroups::new(&nodes)).unwrap();
            }
            let mut out = vec![f32::NAN; n * vocab];
            head_rows(&pool, Isa::best(), store, head, hn, acts, n, &mut out);
            let b = Blocked {
                data: &out,
                n_tok: n,
                rows: vocab,
                align: HEAD_ALIGN,
                parts: if threads == 1 {
                    1
                } else {
                    head_chunks(head, threads)
                },
            };
            let mut row = vec![0.0f32; vocab];
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for t in 0..n {
                b.copy_row(t, &mut row);
                assert_eq!(
                    bits(&row),
                    bits(&want[t * vocab..(t + 1) * vocab]),
                    "{n} tokens, {threads} threads ({nodes:?}), token {t}"
                );
            }
        }
    }

    #[test]
    fn a_q8_head_gives_the_row_layout_reference_bits() {
        use bitnet_kernels::float::{Q8R, RowFormat, f32_to_f16, quantize_row_q8_0};
        // A vocabulary off the 16-row groups, a width off the 128-column super-blocks.
        let (vocab, cols) = (4100usize, 96usize);
        let rb = RowFormat::Q8_0.row_bytes(cols).unwrap();
        let mut state = 11u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as u32
        };
        let mut w: Vec<u8> = (0..vocab * rb).map(|_| next() as u8).collect();
        for blk in w.chunks_exact_mut(34) {
            let d = 1e-3 + (next() % 1000) as f32 * 1e-5;
            blk[..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        }
        let head = Head::Q8(Q8R::from_q8_0_rows(&w, vocab, cols).unwrap());
        let store = Store {
            file: None,
            owned: Vec::new(),
        };
        for n in [1usize, 3, 32] {
            let mut xq = vec![0u8; n * rb];
            let mut acts = HeadActs::for_head(&head, cols, 32);
            for (t, row) in xq.chunks_exact_mut(rb).enumerate() {
                let x: Vec<f32> = (0..cols).map(|_| next() as f32 / 2e9 - 1.0).collect();
                quantize_row_q8_0(&x, row);
                acts.set_row(t, &x);
            }
            let mut want = vec![0.0f32; n * vocab];
            float::matmul_q8_0_q8_0(Isa::Scalar, &w, cols, &xq, n, 0..vocab, &mut want);
            assert_head_bits(&store, &head, &[], &acts, n, &want);
        }
    }

    /// A Q6_K head (in its grouped layout, as the loader makes it) on 1-3 threads: the row
    /// product's bits, against Q8_K activations.
    #[test]
    fn a_q6k_head_runs_the_integer_product_on_q8k_activations() {
        use bitnet_kernels::float::{Q6K_BLOCK_BYTES, Q6KR, Q8KActs, f32_to_f16};
        // A vocabulary off the 16-row groups, two Q6_K blocks a row.
        let (vocab, cols) = (1000usize, 512usize);
        let rb = RowFormat::Q6K.row_bytes(cols).unwrap();
        let mut state = 7u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as u32
        };
        let mut w: Vec<u8> = (0..vocab * rb).map(|_| next() as u8).collect();
        for blk in w.chunks_exact_mut(Q6K_BLOCK_BYTES) {
            let d = 1e-4 + (next() % 1000) as f32 * 1e-6;
            blk[208..].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        }
        let head = Head::Q6(Q6KR::from_q6k_rows(&w, vocab, cols).unwrap());
        let store = Store {
            file: None,
            owned: Vec::new(),
        };
        for n in [1usize, 3, 32] {
            let hn: Vec<f32> = (0..n * cols).map(|_| next() as f32 / 2e9 - 1.0).collect();
            let mut acts = HeadActs::for_head(&head, cols, 32);
            let mut want_acts = Q8KActs::new(cols, 32);
            for (t, h) in hn.chunks_exact(cols).enumerate() {
                acts.set_row(t, h);
                want_acts.quantize_row(t, h);
            }
            assert!(matches!(acts, HeadActs::Q8K(_)));
            let mut want = vec![0.0f32; n * vocab];
            float::matmul_q6k_q8k(Isa::Scalar, &w, cols, &want_acts, n, 0..vocab, &mut want);
            assert_head_bits(&store, &head, &hn, &acts, n, &want);
        }
    }

    #[test]
    fn a_q4_0_head_runs_the_grouped_product_on_q8_0_activations() {
        use bitnet_kernels::float::{Q4_0_BLOCK_BYTES, Q4R, f32_to_f16};
        // A vocabulary off the chunk granule, 16 Q4_0 blocks a row.
        let (vocab, cols) = (1000usize, 512usize);
        let rb = RowFormat::Q4_0.row_bytes(cols).unwrap();
        let mut state = 11u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as u32
        };
        let mut w: Vec<u8> = (0..vocab * rb).map(|_| next() as u8).collect();
        for blk in w.chunks_exact_mut(Q4_0_BLOCK_BYTES) {
            let d = 1e-3 + (next() % 1000) as f32 * 1e-5;
            blk[..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        }
        let q = Q4R::from_q4_0_rows(&w, vocab, cols).unwrap();
        let head = Head::Q4(q.clone());
        let store = Store {
            file: None,
            owned: Vec::new(),
        };
        for n in [1usize, 3, 32] {
            let hn: Vec<f32> = (0..n * cols).map(|_| next() as f32 / 2e9 - 1.0).collect();
            let mut acts = HeadActs::for_head(&head, cols, 32);
            for (t, h) in hn.chunks_exact(cols).enumerate() {
                acts.set_row(t, h);
            }
            let HeadActs::Q8 {
                acts: want_acts, ..
            } = &acts
            else {
                panic!("a Q4_0 head reads Q8_0 activations");
            };
            let mut want = vec![0.0f32; n * vocab];
            float::matmul_q4r(Isa::Scalar, &q, want_acts, n, 0..vocab, &mut want);
            assert_head_bits(&store, &head, &hn, &acts, n, &want);
        }
    }

    /// A ternary projection of `rows x cols` random trits.
    fn ternary(rows: usize, cols: usize, seed: u64) -> Linear {
        use crate::model::linear::LinearKind;
        let mut state = seed;
        let trits: Vec<i8> = (0..rows * cols)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 33) % 3) as i8 - 1
            })
            .collect();
        let m = bitnet_kernels::TernaryMatrix::from_trits(&trits, rows, cols, 0.5).unwrap();
        Linear {
            kind: LinearKind::Ternary(m),
            rows,
            cols,
            scale: None,
        }
    }

    #[test]
    fn threads_grouped_by_node_write_the_same_blocks_as_a_plain_pool() {
        use crate::model::linear::padded;
        use bitnet_kernels::ActScale;
        let cols = 512;
        let lins = [
            ternary(1000, cols, 1),
            ternary(260, cols, 2),
            ternary(36, cols, 3),
        ];
        let refs: Vec<&Linear> = lins.iter().collect();
        let store = Store {
            file: None,
            owned: Vec::new(),
        };
        for n in [1usize, 3, BATCH_TOKENS + 4] {
            let q: Vec<i8> = (0..n * padded(cols)).map(|i| (i % 7) as i8 - 3).collect();
            let acts: Vec<ActScale> = (0..n)
                .map(|t| ActScale {
                    scale: 1.0 + t as f32,
                    sum: q[t * padded(cols)..(t + 1) * padded(cols)]
                        .iter()
                        .map(|&x| x as i32)
                        .sum(),
                })
                .collect();
            let inp = LinInput {
                n_tok: n,
                x: &[],
                q: &q,
                acts: &acts,
                bits: &[],
                bit_scales: &[],
            };
            let run = |nodes: Option<&[usize]>| {
                let mut pool = ThreadPool::new(4, crate::threadpool::PinPolicy::None).unwrap();
                if let Some(nodes) = nodes {
                    pool.set_groups(ThreadGroups::new(nodes)).unwrap();
                    // One node is no grouping.
                    assert_eq!(
                        pool.groups().is_some(),
                        nodes.iter().any(|&x| x != nodes[0])
                    );
                }
                let mut bufs: Vec<Vec<f32>> = lins.iter().map(|l| vec![0.0; n * l.rows]).collect();
                let mut outs: Vec<&mut [f32]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
                matmul_group(&pool, Isa::best(), &store, false, &refs, &inp, &mut outs);
                bufs.iter()
                    .map(|b| b.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
                    .collect::<Vec<_>>()
            };
            let want = run(None);
            for nodes in [&[0usize, 0, 0, 1][..], &[0, 1, 1, 2], &[1, 1, 1, 1]] {
                assert_eq!(run(Some(nodes)), want, "{n} tokens, nodes {nodes:?}");
            }
        }
    }

    #[test]
    fn the_shares_of_each_matrix_tile_its_bytes_in_group_order() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/shakespeare.gguf");
        let model = Model::load(path, &crate::LoadOptions::default()).unwrap();
        let groups = ThreadGroups::new(&[0, 0, 0, 1, 2]);
        let shares = weight_shares(&model, &groups);
        let whole = model.streamed_weights();
        assert_eq!(shares.len(), whole.len() * groups.len());
        for (bytes, per_group) in whole.iter().zip(shares.chunks(groups.len())) {
            let mut at = bytes.as_ptr() as usize;
            for (g, (group, share)) in per_group.iter().enumerate() {
                assert_eq!((*group, share.as_ptr() as usize), (g, at));
                at += share.len();
            }
            assert_eq!(at, bytes.as_ptr() as usize + bytes.len());
            // Three fifths of the rows go to the first node, give or take an align block.
            let first = per_group[0].1.len() as f64 / bytes.len() as f64;
            assert!((first - 0.6).abs() < 0.1, "{first}");
        }
    }

    #[test]
    fn blocked_rows_round_trip() {
        // 3 tokens, 10 rows, 2 parts aligned to 4: part 0 = rows 0..8? split_range decides.
        let (n, rows, parts, align) = (3usize, 10usize, 2usize, 4usize);
        let mut data = vec![0.0f32; n * rows];
        for p in 0..parts {
            let r = split_range(rows, parts, p, align);
            for t in 0..n {
                for (i, row) in r.clone().enumerate() {
                    data[n * r.start + t * r.len() + i] = (t * 100 + row) as f32;
                }
            }
        }
        let b = Blocked {
            data: &data,
            n_tok: n,
            rows,
            align,
            parts,
        };
        let mut row = vec![0.0; rows];
        for t in 0..n {
            b.copy_row(t, &mut row);
            let want: Vec<f32> = (0..rows).map(|c| (t * 100 + c) as f32).collect();
            assert_eq!(row, want);
            b.add_row(Isa::Scalar, t, &mut row);
            assert_eq!(row[3], 2.0 * want[3]);
        }
    }
}
