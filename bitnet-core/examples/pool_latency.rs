//! Measures the thread pool's per-region overhead, back to back (the decode-loop pattern),
//! for 1 and 2 threads (or the counts given as arguments):
//! - `empty`: µs per `ThreadPool::run` of a job that does nothing (dispatch + join; the
//!   caller may run every part itself when workers are slower to react);
//! - `50us`: µs per run of a job whose every part busy-works 50 µs, minus those 50 µs: the
//!   overhead a real matmul region pays, and the share of parts the caller had to take.
//!
//! `cargo run --release -p bitnet-core --example pool_latency [N...]`

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bitnet_core::threadpool::{PinPolicy, ThreadPool};

fn median_us_per_run(pool: &ThreadPool, job: &(dyn Fn(usize, usize) + Sync), iters: u32) -> f64 {
    for _ in 0..iters / 10 {
        pool.run(job);
    }
    let mut samples: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                pool.run(job);
            }
            t.elapsed().as_secs_f64() * 1e6 / f64::from(iters)
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[2]
}

fn busy_work(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

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
    let work = Duration::from_micros(50);
    for pin in [PinPolicy::None, PinPolicy::Cores] {
        for &n in &counts {
            let pool = match ThreadPool::new(n, pin.clone()) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("pool with {n} threads: {e}");
                    continue;
                }
            };
            let sink = AtomicUsize::new(0);
            let empty = |tid: usize, _n: usize| {
                sink.fetch_add(black_box(tid), Ordering::Relaxed);
            };
            let empty_us = median_us_per_run(&pool, &empty, 20_000);
            let busy = |_tid: usize, _n: usize| busy_work(work);
            let busy_us = median_us_per_run(&pool, &busy, 1_000);
            pool.set_profiling(true);
            for _ in 0..1_000 {
                pool.run(&busy);
            }
            let stats = pool.take_wait_stats();
            let parts = stats.regions * (n as u64 - 1).max(1);
            println!(
                "threads {n} pin {pin:?}: empty {empty_us:.2} us/run; 50us parts: {:.2} us \
                 overhead/run, {:.1}% of worker parts run by the caller",
                busy_us - work.as_secs_f64() * 1e6,
                100.0 * stats.stolen as f64 / parts as f64
            );
        }
    }
}
