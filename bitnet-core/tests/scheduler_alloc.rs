//! Memory stays flat under the scheduler: after a warm-up, a thousand requests of random
//! lengths (with cancels) through one engine leave the live heap where it was, and its
//! peak never climbs past the warm-up's by more than a small slack. Everything large (KV
//! pool, activations, prefix-cache index) was allocated once when the engine started. A
//! counting global allocator tracks live bytes (its own test binary, so no other test
//! allocates concurrently).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

use bitnet_core::engine::{Engine, EngineOptions};
use bitnet_core::model::{LoadOptions, Model};
use bitnet_core::scheduler::{Event, GenParams, Scheduler, SchedulerOptions};
use bitnet_core::synth::SynthSpec;

struct Counting;

static ON: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn add(delta: isize) {
    if ON.load(Ordering::Relaxed) {
        let now = LIVE.fetch_add(delta, Ordering::Relaxed) + delta;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add(layout.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add(-(layout.size() as isize));
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        add(new_size as isize - layout.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn run(s: &mut Scheduler, n: usize, seed: &mut u64) {
    let mut next = |m: u64| {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed % m
    };
    let mut submitted = 0;
    let mut live = Vec::with_capacity(64);
    while submitted < n || !s.is_idle() {
        while submitted < n && s.n_waiting() < 8 {
            let p: Vec<u32> = (0..1 + next(40)).map(|_| 3 + next(500) as u32).collect();
            let params = GenParams {
                max_tokens: 1 + next(12) as usize,
                ..GenParams::default()
            };
            live.push(s.submit(&p, params).unwrap());
            submitted += 1;
        }
        if !live.is_empty() && next(5) == 0 {
            let i = next(live.len() as u64) as usize;
            s.cancel(live.swap_remove(i));
        }
        s.step(&mut |ev| {
            if let Event::Done { seq, .. } = ev {
                live.retain(|&l| l != seq);
            }
        })
        .unwrap();
    }
}

#[test]
fn a_thousand_requests_leave_the_heap_flat() {
    let spec = SynthSpec {
        n_layer: 1,
        ..SynthSpec::preset("tiny").unwrap()
    };
    let path = common::models::synth_file("sched-alloc", &spec);
    let model = Arc::new(Model::load(&path, &LoadOptions::default()).unwrap());
    let opts = EngineOptions {
        threads: 1,
        pin: false,
        n_ctx: 384,
        batch: 64,
        ..EngineOptions::default()
    };
    let mut s = Scheduler::new(
        Engine::new(model, &opts).unwrap(),
        SchedulerOptions { max_running: 16 },
    );
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    ON.store(true, Ordering::Relaxed);
    // Warm-up: queues and per-thread kernel scratch reach their high-water marks.
    run(&mut s, 200, &mut seed);
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    run(&mut s, 1000, &mut seed);
    let end = LIVE.load(Ordering::Relaxed);
    let peak = PEAK.load(Ordering::Relaxed);
    ON.store(false, Ordering::Relaxed);
    let kv_blocks = s.engine().kv().stats().pool;
    assert_eq!(kv_blocks.used, 0, "every block back in the pool");
    assert!(
        (end - base).abs() <= 4096,
        "live heap moved from {base} to {end} bytes over 1000 requests"
    );
    // Per-request state (prompt copy, history, sampler buffers) is small and freed: the
    // peak over the run stays within 1 MiB of the post-warm-up level.
    assert!(
        peak - base <= 1 << 20,
        "heap peaked {} bytes above its post-warm-up level",
        peak - base
    );
    std::fs::remove_file(&path).ok();
}
