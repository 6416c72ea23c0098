//! Measures the thread pool's dispatch + join latency: microseconds per `ThreadPool::run` of
//! an empty job, back to back (the decode-loop pattern), for 1 and 2 threads (or the counts
//! given as arguments). `cargo run --release -p bitnet-core --example pool_latency [N...]`

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bitnet_core::threadpool::{PinPolicy, ThreadPool};

fn main() {
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let counts = if counts.is_empty() {
        vec![1, 2]
    } else {
        counts
    };
    for pin in [PinPolicy::None, PinPolicy::Cores] {
        for &n in &counts {
            let pool = match ThreadPool::new(n, pin) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("pool with {n} threads: {e}");
                    continue;
                }
            };
            let sink = AtomicUsize::new(0);
            let job = |tid: usize, _n: usize| {
                sink.fetch_add(black_box(tid), Ordering::Relaxed);
            };
            for _ in 0..2_000 {
                pool.run(&job);
            }
            let mut samples = Vec::new();
            for _ in 0..5 {
                let iters = 20_000;
                let t = Instant::now();
                for _ in 0..iters {
                    pool.run(&job);
                }
                samples.push(t.elapsed().as_secs_f64() * 1e6 / iters as f64);
            }
            samples.sort_by(f64::total_cmp);
            println!(
                "threads {n} pin {pin:?}: {:.2} us/run median (min {:.2}, max {:.2})",
                samples[2], samples[0], samples[4]
            );
            drop(pool);
        }
    }
}
