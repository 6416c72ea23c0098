//! The machine's memory-bandwidth probe (`bitnet bench --membw`): the read bandwidth of a
//! plain sum over a huge-page buffer far larger than the last-level cache, on `threads`
//! threads, with the fastest of the CPU's read loops (`bitnet_kernels::probe::read_sets`). It
//! describes the machine; a tg row's bound is the in-place read of that row's own weights
//! (`Engine::read_streamed_weights`), which sees the same pages, cores and cache as decode.

use std::time::Instant;

use bitnet_kernels::AlignedVec;
use bitnet_kernels::probe::{read_sets, sum_bytes};

/// Bytes each probe pass reads; 1 GiB is well past any LLC we target (260 MiB here).
pub const DEFAULT_PROBE_BYTES: usize = 1 << 30;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bandwidth {
    pub gbs: f64,
    pub threads: usize,
    pub bytes: usize,
}

/// Best of `passes` timed passes (each with every read loop of [`read_sets`]) over a
/// `bytes`-sized buffer split across `threads` threads.
pub fn measure(bytes: usize, threads: usize, passes: usize) -> Bandwidth {
    let threads = threads.max(1);
    let n_bytes = bytes.max(threads * 64);
    // Huge pages as the weights have; non-zero contents so the pages are really backed, not
    // the shared zero page.
    let mut buf = AlignedVec::<u8>::zeroed_huge(n_bytes);
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i as u8) | 1;
    }
    let chunk = n_bytes.div_ceil(threads);
    let mut best = f64::INFINITY;
    let mut sink = 0u64;
    for _ in 0..passes.max(1) {
        for isa in read_sets() {
            let start = Instant::now();
            let total = std::thread::scope(|s| {
                let handles: Vec<_> = buf
                    .chunks(chunk)
                    .map(|part| s.spawn(move || sum_bytes(isa, part)))
                    .collect();
                handles
                    .into_iter()
                    .fold(0u64, |acc, h| acc.wrapping_add(h.join().unwrap_or(0)))
            });
            best = best.min(start.elapsed().as_secs_f64());
            sink = sink.wrapping_add(total);
        }
    }
    std::hint::black_box(sink);
    Bandwidth {
        gbs: n_bytes as f64 / best / 1e9,
        threads,
        bytes: n_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_reports_a_positive_bandwidth_for_the_bytes_read() {
        let bw = measure(1 << 20, 2, 2);
        assert_eq!(bw.threads, 2);
        assert_eq!(bw.bytes, 1 << 20);
        assert!(bw.gbs.is_finite() && bw.gbs > 0.0);
    }
}
