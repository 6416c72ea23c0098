//! Loom models of the pool's handshakes: the real [`ThreadPool`] (its primitives come from
//! `sync.rs`, loom's under `--cfg loom`), run under every interleaving and every value the
//! C11 memory model lets a load return (loom's approximation of it: see below), with loom's
//! deadlock detection standing in for "every thread asleep". Run by `scripts/loom.sh`.
//!
//! Each model is small (the caller and one worker; one model has two workers) so that loom
//! explores it exhaustively up to [`PREEMPTION_BOUND`] preemptions in seconds. Every model
//! covers all the windows of its region; the set-up of each (a worker known to be asleep, a
//! part known to be claimed) makes sure the window it is named after is reached at all,
//! rather than leaving that to the bound.
//!
//! Loom treats `SeqCst` loads and stores as `AcqRel` (only `fence(SeqCst)` gets its full
//! meaning; loom's README, "Unsupported features"). That is weaker than C11, so the handshakes
//! must hold with SeqCst accesses read as acquire/release only, which is also all qemu-user
//! gives an AArch64 guest (`bench/2026-12-06-pool-loom-arm.md`): on the pool without its
//! fences the two-thread models deadlocked. A lost wake-up shows as loom's "deadlock"
//! (every thread blocked), or, where a part waits for a worker, as "exceeded maximum number of
//! branches" (the worker never came).

use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Duration;

use loom::model::Builder;
use loom::sync::atomic::{AtomicBool, AtomicUsize};

use super::{PinPolicy, PoolError, ThreadPool};

/// Preemptions loom explores per execution (unless `LOOM_MAX_PREEMPTIONS` says otherwise).
/// Loom's documentation finds 2 or 3 enough to catch most bugs; at 3 the biggest model here
/// (three threads) takes seconds, at 5 more than eight minutes.
const PREEMPTION_BOUND: usize = 3;

/// A non-zero spin: under loom it is a couple of polls with a yield between (`sync.rs`).
const SPIN: Duration = Duration::from_micros(1);

/// Explores `model` and prints how many executions that took (seen with `--nocapture`).
fn check(name: &str, model: impl Fn() + Sync + Send + 'static) {
    let mut builder = Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(PREEMPTION_BOUND);
    }
    // A std atomic, outside the model: it counts executions, it is not part of one.
    let executions = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&executions);
    let start = std::time::Instant::now();
    builder.check(move || {
        counter.fetch_add(1, Relaxed);
        model();
    });
    println!(
        "loom {name}: {} executions, preemption bound {:?}, {:.2?}",
        executions.load(Relaxed),
        builder.preemption_bound,
        start.elapsed()
    );
}

/// Runs one region of `n` parts that counts how often each part ran, and checks every part
/// ran exactly once. The counts are Relaxed: loom lets a load after `run` return a stale 0
/// unless the region's end happens-before it, so this also checks the join's ordering.
fn run_counted(pool: &ThreadPool) {
    let n = pool.n_threads();
    let runs: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
    pool.run(&|tid, n_threads| {
        assert_eq!(n_threads, n);
        runs[tid].fetch_add(1, Relaxed);
    });
    for (tid, r) in runs.iter().enumerate() {
        assert_eq!(r.load(Relaxed), 1, "part {tid} of {n}");
    }
}

/// Yields until the pool's only worker has counted itself a sleeper (it holds or is about to
/// release the sleep lock into its condvar wait).
fn until_worker_sleeps(pool: &ThreadPool) {
    while pool.shared.sleepers.load(SeqCst) == 0 {
        loom::thread::yield_now();
    }
}

/// The worker is asleep (or on its way into the condvar wait, under the sleep lock) before
/// the job is published: the wake-up must reach it, or the caller runs both parts.
#[test]
fn threadpool_worker_asleep_before_publish() {
    check("worker_asleep_before_publish", || {
        let pool = ThreadPool::with_spin(2, PinPolicy::None, Duration::ZERO).unwrap();
        until_worker_sleeps(&pool);
        run_counted(&pool);
    });
}

/// The job is published at any point of the worker's way to sleep, the lost-wakeup window
/// between its last look at `state` and its condvar wait included. No spin: the worker
/// heads for the condvar at once.
#[test]
fn threadpool_publish_races_worker_going_to_sleep() {
    check("publish_races_worker_going_to_sleep", || {
        let pool = ThreadPool::with_spin(2, PinPolicy::None, Duration::ZERO).unwrap();
        run_counted(&pool);
    });
}

/// As above with a spinning worker and caller: the region may be seen while spinning or
/// only after the spin ran out.
#[test]
fn threadpool_publish_races_spinning_worker() {
    check("publish_races_spinning_worker", || {
        let pool = ThreadPool::with_spin(2, PinPolicy::None, SPIN).unwrap();
        run_counted(&pool);
    });
}

/// Two regions back to back: the generation is reused, so a worker that wakes late for the
/// first must not claim (or count as finished) a part of the second, nor miss the second.
#[test]
fn threadpool_two_consecutive_regions() {
    check("two_consecutive_regions", || {
        let pool = ThreadPool::with_spin(2, PinPolicy::None, Duration::ZERO).unwrap();
        run_counted(&pool);
        run_counted(&pool);
    });
}

/// The worker has claimed part 1 before the caller finishes part 0, so the caller cannot
/// steal it and must wait: it goes to sleep in `wait_done` while the worker finishes (the
/// lost done-notification window).
#[test]
fn threadpool_caller_sleeps_while_worker_finishes() {
    check("caller_sleeps_while_worker_finishes", || {
        let pool = ThreadPool::with_spin(2, PinPolicy::None, Duration::ZERO).unwrap();
        let claimed = AtomicBool::new(false);
        let ran = AtomicUsize::new(0);
        pool.run(&|tid, _| {
            if tid == 0 {
                while !claimed.load(Relaxed) {
                    loom::thread::yield_now();
                }
            } else {
                claimed.store(true, Relaxed);
            }
            ran.fetch_add(1, Relaxed);
        });
        assert_eq!(ran.load(Relaxed), 2);
    });
}

/// The pool is dropped while its worker sleeps: the shutdown must wake it and `Drop`'s join
/// must return.
#[test]
fn threadpool_shutdown_while_worker_sleeps() {
    check("shutdown_while_worker_sleeps", || {
        let pool = ThreadPool::with_spin(2, PinPolicy::None, Duration::ZERO).unwrap();
        until_worker_sleeps(&pool);
        drop(pool);
    });
}

/// The pool is dropped as soon as it is made: the shutdown races the worker's start (loom
/// has no start barrier, `sync.rs`), its spin and its way to sleep.
#[test]
fn threadpool_shutdown_racing_worker_start() {
    check("shutdown_racing_worker_start", || {
        let pool = ThreadPool::with_spin(2, PinPolicy::None, SPIN).unwrap();
        drop(pool);
    });
}

/// Part 1 panics, on whichever thread claimed it: the panic is reported once the region is
/// over, after every part finished, and the pool still runs a region afterwards.
#[test]
fn threadpool_panicking_part() {
    const MESSAGE: &str = "loom model: part 1 panics";
    // Loom runs this model thousands of times: keep the expected panic's message quiet.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<&str>() != Some(&MESSAGE) {
            default_hook(info);
        }
    }));
    check("panicking_part", || {
        let pool = ThreadPool::with_spin(2, PinPolicy::None, Duration::ZERO).unwrap();
        let part0 = AtomicUsize::new(0);
        let result = pool.try_run(&|tid, _| {
            if tid == 1 {
                std::panic::panic_any(MESSAGE);
            }
            part0.fetch_add(1, Relaxed);
        });
        match result {
            Err(PoolError::Panicked { thread: 1, message }) => assert_eq!(message, MESSAGE),
            other => panic!("expected part 1's panic, got {other:?}"),
        }
        assert_eq!(part0.load(Relaxed), 1);
        run_counted(&pool);
    });
}

/// Three threads, one region: two workers race each other for part 2 (and part 1), and the
/// caller for both, while either may be going to sleep.
#[test]
fn threadpool_two_workers_one_region() {
    check("two_workers_one_region", || {
        let pool = ThreadPool::with_spin(3, PinPolicy::None, Duration::ZERO).unwrap();
        run_counted(&pool);
    });
}
