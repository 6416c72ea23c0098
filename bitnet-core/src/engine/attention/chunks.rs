//! Long rows in chunks: where a row is cut (by its length alone, on block boundaries),
//! how much a chunk leaves for merging, and the merge itself, so a row attended chunk by
//! chunk, on one thread or many, gives the bits of one pass over it.

/// Rows of at most this many positions (rounded up to a whole KV block) are attended in
/// one piece. Longer rows are cut
/// into chunks, each scored, softmaxed and summed on its own, then merged
/// ([`fold_chunk`]): the chunks are what the threads share when a step has too few
/// (token, KV head) units to keep them all busy, as one decoded token over a long context
/// has. The cut depends on the row's length only, never on the threads or the batch, so
/// every way of sharing the work gives the same bits.
pub(super) const ATTN_CHUNK_MIN: usize = 512;
/// A row is cut into at most this many chunks (longer rows get longer chunks), which
/// bounds the partial results kept for merging.
pub(super) const ATTN_CHUNKS_MAX: usize = 16;
/// Partial results the shared scratch holds per thread: chunks are handed out only while
/// a step has fewer than 4 (token, KV head) units per thread, each of at most
/// [`ATTN_CHUNKS_MAX`] chunks.
pub(super) const PARTIALS_PER_THREAD: usize = 4 * ATTN_CHUNKS_MAX;

/// Positions per chunk of a row of `n_pos` positions over blocks of `bt` tokens (chunks
/// start on block boundaries).
pub(super) fn chunk_len(n_pos: usize, bt: usize) -> usize {
    n_pos
        .div_ceil(ATTN_CHUNKS_MAX)
        .max(ATTN_CHUNK_MIN)
        .next_multiple_of(bt.max(1))
}

pub(super) fn row_chunks(n_pos: usize, bt: usize) -> usize {
    n_pos.div_ceil(chunk_len(n_pos, bt)).max(1)
}

/// Floats one partial result takes: a group's outputs, then `(max, sum)` per head.
pub(super) fn partial_len(group: usize, head_dim: usize) -> usize {
    group * head_dim + 2 * group
}

/// Folds one chunk's attention output into the result of the chunks before it. Per head
/// of `hd` values, `acc` and `o` are softmax-weighted averages over their own positions
/// and `state` and `st` hold `(max, sum of exp(score - max))` of their scores; each side
/// is weighed by its share of the probability mass, `sum * exp(max)`. Both ways of running
/// chunks (one unit in turn, or units on several threads merged after) fold the same
/// values in the same order, so they agree bit for bit. NaN and `+inf` scores make the
/// head's output NaN, as one softmax over the row would.
pub(super) fn fold_chunk(hd: usize, acc: &mut [f32], state: &mut [f32], o: &[f32], st: &[f32]) {
    let heads = acc.chunks_exact_mut(hd).zip(o.chunks_exact(hd));
    for (h, (acc, o)) in heads.enumerate() {
        let (m0, s0) = (state[2 * h], state[2 * h + 1]);
        let (m1, s1) = (st[2 * h], st[2 * h + 1]);
        if s1 == 0.0 {
            // Only masked positions: no weight.
            continue;
        }
        if s0 == 0.0 {
            acc.copy_from_slice(o);
            state[2 * h..2 * h + 2].copy_from_slice(&st[2 * h..2 * h + 2]);
            continue;
        }
        let m = m0.max(m1);
        let a = s0 * (m0 - m).exp();
        let b = s1 * (m1 - m).exp();
        let s = a + b;
        let (wa, wb) = (a / s, b / s);
        for (x, &y) in acc.iter_mut().zip(o) {
            *x = *x * wa + y * wb;
        }
        state[2 * h] = m;
        state[2 * h + 1] = s;
    }
}

/// The factor that turns a chunk's probabilities (normalized within the chunk, statistics
/// `(m, s)`) into the row's, once the merged statistics are `(big_m, big_s)`.
pub(super) fn chunk_share(m: f32, s: f32, big_m: f32, big_s: f32) -> f32 {
    if s == 0.0 {
        0.0
    } else {
        s * (m - big_m).exp() / big_s
    }
}

#[cfg(test)]
mod tests {
    use bitnet_kernels::Isa;
    use bitnet_kernels::float;

    use super::*;

    /// A row cut into chunks, each softmaxed and summed on its own, folded into the
    /// softmax-weighted sum of the whole row; `cuts` are the chunk boundaries.
    fn folded(scores: &[Vec<f32>], values: &[[f32; 3]], cuts: &[usize]) -> (Vec<f32>, Vec<f32>) {
        let heads = scores.len();
        let mut acc = vec![0.0f32; heads * 3];
        let mut state = vec![0.0f32; 2 * heads];
        for (c, w) in cuts.windows(2).enumerate() {
            let (lo, hi) = (w[0], w[1]);
            let mut o = vec![0.0f32; heads * 3];
            let mut st = vec![0.0f32; 2 * heads];
            for h in 0..heads {
                let mut p = scores[h][lo..hi].to_vec();
                let (m, s) = float::softmax_inplace(Isa::Scalar, &mut p);
                (st[2 * h], st[2 * h + 1]) = (m, s);
                for (pi, v) in p.iter().zip(&values[lo..hi]) {
                    for d in 0..3 {
                        o[h * 3 + d] += pi * v[d];
                    }
                }
            }
            if c == 0 {
                (acc, state) = (o, st);
            } else {
                fold_chunk(3, &mut acc, &mut state, &o, &st);
            }
        }
        (acc, state)
    }

    #[test]
    fn chunks_folded_match_one_softmax_over_the_row() {
        // Two heads over 1,000 positions whose scores drift, so every chunk has its own
        // maximum (one far above the others).
        let mut seed = 7u32;
        let mut next = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        let n = 1000;
        let scores: Vec<Vec<f32>> = (0..2)
            .map(|h| {
                (0..n)
                    .map(|p| 4.0 * next() + (p as f32 / 100.0) * if h == 0 { 1.0 } else { -3.0 })
                    .collect()
            })
            .collect();
        let values: Vec<[f32; 3]> = (0..n).map(|_| [next(), next(), 10.0 * next()]).collect();
        for cuts in [
            vec![0, 512, 1000],
            vec![0, 100, 600, 601, 1000],
            vec![0, 1000],
        ] {
            let (got, state) = folded(&scores, &values, &cuts);
            for h in 0..2 {
                let row: Vec<f64> = scores[h].iter().map(|&x| f64::from(x)).collect();
                let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = row.iter().map(|x| (x - max).exp()).sum();
                for d in 0..3 {
                    let want: f64 = row
                        .iter()
                        .zip(&values)
                        .map(|(x, v)| (x - max).exp() / sum * f64::from(v[d]))
                        .sum();
                    let err = (f64::from(got[h * 3 + d]) - want).abs();
                    assert!(
                        err <= 1e-5 * (1.0 + want.abs()),
                        "{cuts:?} h{h} d{d}: {err:e}"
                    );
                }
                // The merged statistics are the row's, and each chunk's probabilities
                // scaled by its share are the row's probabilities.
                assert_eq!(state[2 * h], max as f32, "{cuts:?} h{h}");
                let rel = (f64::from(state[2 * h + 1]) - sum).abs() / sum;
                assert!(rel < 1e-5, "{cuts:?} h{h}: sum {rel:e}");
                for w in cuts.windows(2) {
                    let mut p = scores[h][w[0]..w[1]].to_vec();
                    let (m, s) = float::softmax_inplace(Isa::Scalar, &mut p);
                    let f = chunk_share(m, s, state[2 * h], state[2 * h + 1]);
                    for (i, &pi) in p.iter().enumerate() {
                        let want = (row[w[0] + i] - max).exp() / sum;
                        let got = f64::from(pi * f);
                        assert!((got - want).abs() <= 1e-5 * want + 1e-30, "{cuts:?} p{i}");
                    }
                }
            }
        }
        // A chunk of masked positions weighs nothing; a NaN score spoils its head only.
        let mut masked = scores.clone();
        masked[0][600..700].fill(f32::NEG_INFINITY);
        masked[1][600..700].fill(f32::NEG_INFINITY);
        let cut = [0, 600, 700, 1000];
        let (got, _) = folded(&masked, &values, &cut);
        let skip: Vec<Vec<f32>> = masked
            .iter()
            .map(|r| [&r[..600], &r[700..]].concat())
            .collect();
        let vals: Vec<[f32; 3]> = [&values[..600], &values[700..]].concat();
        let (want, _) = folded(&skip, &vals, &[0, 600, 900]);
        assert_eq!(got, want);
        masked[1][650] = f32::NAN;
        masked[1][600..700].fill(f32::NAN);
        let (got, _) = folded(&masked, &values, &cut);
        assert_eq!(&got[..3], &want[..3]);
        assert!(got[3..].iter().all(|x| x.is_nan()));
    }

    #[test]
    fn chunks_split_rows_on_block_boundaries_within_bounds() {
        for bt in [1, 16, 32, 64, 1024] {
            for n_pos in [1, 511, 512, 513, 1030, 4096, 8193, 100_000] {
                let cl = chunk_len(n_pos, bt);
                let nc = row_chunks(n_pos, bt);
                assert_eq!(cl % bt, 0, "bt {bt} n_pos {n_pos}");
                assert!(nc <= ATTN_CHUNKS_MAX && (nc - 1) * cl < n_pos && nc * cl >= n_pos);
                assert_eq!(nc == 1, n_pos <= ATTN_CHUNK_MIN.next_multiple_of(bt));
            }
        }
    }
}
