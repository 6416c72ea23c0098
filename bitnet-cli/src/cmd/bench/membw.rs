//! The memory-bandwidth probe (`bitnet bench --membw`): the read bandwidth of a plain sum over
//! a buffer far larger than the last-level cache, on `threads` threads, measured in the same
//! run as the model so the decode bound is this machine's, not an assumed figure.

use std::time::Instant;

/// Bytes each probe pass reads; 1 GiB is well past any LLC we target (260 MiB here).
pub const DEFAULT_PROBE_BYTES: usize = 1 << 30;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bandwidth {
    pub gbs: f64,
    pub threads: usize,
    pub bytes: usize,
}

/// Sums a slice of u64 with eight independent lanes, which the compiler turns into wide
/// vector adds; the result is returned so the reads cannot be optimised away.
fn sum_words(words: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let chunks = words.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, w) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(*w);
        }
    }
    tail.iter()
        .fold(acc.iter().fold(0u64, |s, a| s.wrapping_add(*a)), |s, w| {
            s.wrapping_add(*w)
        })
}

/// Best of `passes` timed passes over a `bytes`-sized buffer split across `threads` threads.
pub fn measure(bytes: usize, threads: usize, passes: usize) -> Bandwidth {
    let threads = threads.max(1);
    let n_words = (bytes / 8).max(threads * 8);
    // Non-zero contents so the pages are really backed, not the shared zero page.
    let buf: Vec<u64> = (0..n_words as u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
        .collect();
    let chunk = n_words.div_ceil(threads);
    let mut best = f64::INFINITY;
    let mut sink = 0u64;
    for _ in 0..passes.max(1) {
        let start = Instant::now();
        let total = std::thread::scope(|s| {
            let handles: Vec<_> = buf
                .chunks(chunk)
                .map(|part| s.spawn(move || sum_words(part)))
                .collect();
            handles
                .into_iter()
                .fold(0u64, |acc, h| acc.wrapping_add(h.join().unwrap_or(0)))
        });
        best = best.min(start.elapsed().as_secs_f64());
        sink = sink.wrapping_add(total);
    }
    std::hint::black_box(sink);
    Bandwidth {
        gbs: (n_words * 8) as f64 / best / 1e9,
        threads,
        bytes: n_words * 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_words_matches_a_plain_fold() {
        let v: Vec<u64> = (0..1003u64).map(|i| i * 7919).collect();
        assert_eq!(
            sum_words(&v),
            v.iter().fold(0u64, |s, x| s.wrapping_add(*x))
        );
        assert_eq!(sum_words(&[]), 0);
    }

    #[test]
    fn probe_reports_a_positive_bandwidth_for_the_bytes_read() {
        let bw = measure(1 << 20, 2, 2);
        assert_eq!(bw.threads, 2);
        assert_eq!(bw.bytes, 1 << 20);
        assert!(bw.gbs.is_finite() && bw.gbs > 0.0);
    }
}
