//! The decode path allocates nothing: a counting global allocator watches a warmed-up
//! session evaluate single tokens (its own test binary, so no other test allocates
//! concurrently).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bitnet_core::engine::{EngineOptions, Session};
use bitnet_core::model::{LoadOptions, Model};
use bitnet_core::synth::SynthSpec;

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn decode_allocates_nothing() {
    let spec = SynthSpec::preset("tiny-bitnet").unwrap();
    let path = common::models::synth_file("engine-alloc", &spec);
    // Sampling the attention entropy every pass must not allocate either.
    for (threads, attn_entropy_every) in [(1, 0), (2, 0), (1, 1), (2, 1)] {
        let opts = EngineOptions {
            threads,
            pin: false,
            n_ctx: 64,
            attn_entropy_every,
            ..EngineOptions::default()
        };
        let model = Arc::new(Model::load(&path, &LoadOptions::default()).unwrap());
        let mut s = Session::new(model, &opts).unwrap();
        // Warm-up: prefill, then a couple of decode steps (per-thread kernel scratch).
        s.eval(&[1, 2, 3, 4, 5], false).unwrap();
        s.eval(&[6], false).unwrap();
        s.eval(&[7], false).unwrap();
        // The kernels keep a per-OS-thread scratch that grows to its high-water mark the
        // first time a thread runs a product of a given size; the pool hands parts to
        // whichever thread is free, so a thread may meet its first decode-sized product only
        // now (in any round): at most two allocations per thread in all (the buffer, and
        // std's registration of the thread-local's destructor), never one per token.
        let mut rounds = Vec::new();
        let mut sum = 0.0f32;
        for round in 0..3u32 {
            ALLOCS.store(0, Ordering::Relaxed);
            COUNTING.store(true, Ordering::Relaxed);
            for t in 0..12u32 {
                sum += s.eval(&[8 + round * 12 + t], false).unwrap()[0];
            }
            COUNTING.store(false, Ordering::Relaxed);
            rounds.push(ALLOCS.load(Ordering::Relaxed));
        }
        assert!(sum.is_finite());
        assert!(
            rounds.iter().sum::<usize>() <= 2 * threads,
            "{threads} threads: decode allocations per round of 12 tokens: {rounds:?}"
        );
        // A prefill chunk after warm-up allocates nothing either (bar the same first touch).
        s.truncate(5);
        ALLOCS.store(0, Ordering::Relaxed);
        COUNTING.store(true, Ordering::Relaxed);
        s.eval(&[9, 10, 11, 12], false).unwrap();
        COUNTING.store(false, Ordering::Relaxed);
        assert!(
            ALLOCS.load(Ordering::Relaxed) <= 2 * threads,
            "{threads} threads: a warmed-up prefill chunk allocated"
        );
    }
    std::fs::remove_file(&path).ok();
}
