//! A plain read of the weights a decoded token streams, in place, on the engine's own pinned
//! pool: the yardstick of decode's memory bound (`bitnet bench`'s "bound" column).
//!
//! A separate buffer read by freshly spawned threads measures another thing: other pages
//! (4 KiB where the weights sit on huge pages, or the reverse), other cores, and another share
//! of the last-level cache (a 300 MiB L3 holds a third of a 2B model's weights, and a cyclic
//! read of a larger buffer keeps none of it). Reading the very bytes a token reads, split over
//! the threads as the products split them, leaves only the arithmetic out.

use std::time::Instant;

use bitnet_kernels::probe::{read_sets, sum_bytes};

use super::Engine;
use crate::threadpool::split_range;

/// One in-place read of the streamed weights.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct WeightRead {
    /// Bytes read (every projection's weights and the head's, not their few KiB of scales).
    pub bytes: u64,
    pub secs: f64,
}

impl WeightRead {
    /// Read bandwidth in GB/s (10^9 bytes a second).
    pub fn gbs(&self) -> f64 {
        self.bytes as f64 / self.secs.max(1e-12) / 1e9
    }
}

impl Engine {
    /// Reads every weight byte a decoded token streams, each matrix split over the pool's
    /// threads in 64-byte-aligned parts, once with each of the CPU's read loops
    /// ([`read_sets`]: AVX2's and AVX-512's on x86), and keeps the fastest. A decode step can
    /// only come near this: it reads the same bytes and computes too.
    pub fn read_streamed_weights(&mut self) -> WeightRead {
        let streams = self.model.streamed_weights();
        let bytes: u64 = streams.iter().map(|s| s.len() as u64).sum();
        let mut secs = f64::INFINITY;
        for isa in read_sets() {
            let start = Instant::now();
            self.work.pool.run(&|t, n| {
                let mut sum = 0u64;
                for s in &streams {
                    sum = sum.wrapping_add(sum_bytes(isa, &s[split_range(s.len(), n, t, 64)]));
                }
                std::hint::black_box(sum);
            });
            secs = secs.min(start.elapsed().as_secs_f64());
        }
        WeightRead { bytes, secs }
    }
}
