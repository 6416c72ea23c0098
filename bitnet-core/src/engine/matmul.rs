//! The products of a forward pass spread over the pool's threads: every product cuts its
//! output rows into chunks the threads claim as they go ([`matmul_group`]; a slow or
//! descheduled thread holds back one chunk, not half the rows), and so does the output head
//! ([`head_rows`]). A chunk of a product's rows for `n` tokens is written as one contiguous
//! block `[n][rows of the chunk]` (the layout the kernels produce); [`Blocked`] reads a
//! token's row back out of those blocks. Each row is computed whole by one thread, so the
//! results do not depend on the thread count.

use std::ops::Range;

use bitnet_kernels::float::{self, Q8R_ROWS};
use bitnet_kernels::{Isa, MATMUL_CALL_ROWS};

use super::head_acts::HeadActs;
use crate::model::linear::{LinInput, Linear};
use crate::model::{Head, Store};
use crate::threadpool::{ChunkQueue, ThreadPool, split_range};

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
/// cut into chunks of rows ([`n_chunks`]) that the pool's threads claim as they go.
/// `outs[i]` receives projection `i`'s blocked output (at least `n_tok * rows` long).
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
    let queues: [Option<ChunkQueue<'_, f32>>; 3] = {
        let mut it = lins.iter().zip(outs.iter_mut());
        std::array::from_fn(|_| {
            it.next().map(|(lin, o)| {
                ChunkQueue::new(&mut o[..], lin.rows, n, lin_chunks(lin, nt, n), lin.align())
                    .expect("projection output buffer holds n_tok * rows")
            })
        })
    };
    let job = |_tid: usize, _nt: usize| {
        for (lin, q) in lins.iter().zip(queues.iter().flatten()) {
            while let Some((r, dst)) = q.claim() {
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

/// The blocked view of projection output `data` as [`matmul_group`] wrote it.
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
    let q = ChunkQueue::new(&mut out[..], rows, n, chunks, HEAD_ALIGN)
        .expect("head output buffer holds n * vocab");
    pool.run(&|_, _| {
        while let Some((r, dst)) = q.claim() {
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
        for threads in [1, 2, 3] {
            let pool = ThreadPool::new(threads, crate::threadpool::PinPolicy::None).unwrap();
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
                    "{n} tokens, {threads} threads, token {t}"
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
