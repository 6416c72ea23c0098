//! Thread pool tests: parallel results equal a serial computation, many back-to-back tiny
//! regions neither deadlock nor lose wake-ups, panics propagate and leave the pool usable.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use bitnet_core::threadpool::{
    ChunkQueue, DEFAULT_SPIN, DisjointError, DisjointSlice, PinPolicy, PoolError, ThreadGroups,
    ThreadPool, split_range,
};

/// Runs `f` on a helper thread and fails (instead of hanging the suite) if it takes longer
/// than `limit`.
fn with_timeout<F: FnOnce() + Send + 'static>(limit: Duration, f: F) {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => handle.join().expect("test thread"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The closure panicked: surface its panic.
            if let Err(p) = handle.join() {
                std::panic::resume_unwind(p);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("timed out after {limit:?}: deadlock?"),
    }
}

#[test]
fn split_range_covers_balanced_and_aligned() {
    for len in [0usize, 1, 2, 3, 7, 31, 32, 33, 100, 255, 256, 1000, 4097] {
        for n in 1..=9 {
            for align in [0usize, 1, 2, 4, 16, 32, 64] {
                let a = align.max(1);
                let parts: Vec<_> = (0..n).map(|p| split_range(len, n, p, align)).collect();
                let mut next = 0;
                for r in &parts {
                    assert_eq!(r.start, next, "len {len} n {n} align {align}: {parts:?}");
                    assert!(r.end >= r.start);
                    if r.end != len {
                        assert_eq!(r.end % a, 0, "unaligned boundary: {parts:?}");
                    }
                    next = r.end;
                }
                assert_eq!(next, len, "parts must cover 0..len: {parts:?}");
                // Balanced: block counts differ by at most one.
                let blocks: Vec<_> = parts.iter().map(|r| r.len().div_ceil(a)).collect();
                let (mn, mx) = (blocks.iter().min().unwrap(), blocks.iter().max().unwrap());
                assert!(mx - mn <= 1, "unbalanced {parts:?}");
                assert_eq!(split_range(len, n, n, align), len..len);
            }
        }
    }
}

fn serial_reference(input: &[f32]) -> Vec<f32> {
    input
        .iter()
        .enumerate()
        .map(|(i, x)| x * 3.0 + i as f32)
        .collect()
}

#[test]
fn parallel_map_matches_serial_for_many_shapes() {
    for threads in 1..=4 {
        let pool = ThreadPool::new(threads, PinPolicy::None).unwrap();
        assert_eq!(pool.n_threads(), threads);
        for len in [0usize, 1, 5, 31, 64, 65, 1000, 4099] {
            for align in [1usize, 4, 32] {
                let input: Vec<f32> = (0..len).map(|i| (i as f32).sin()).collect();
                let mut out = vec![f32::NAN; len];
                {
                    let shared = DisjointSlice::new(&mut out);
                    pool.run(&|tid, n| {
                        let (range, chunk) = shared.part(n, tid, align);
                        for (o, i) in chunk.iter_mut().zip(range) {
                            *o = input[i] * 3.0 + i as f32;
                        }
                    });
                }
                assert_eq!(out, serial_reference(&input), "threads {threads} len {len}");
            }
        }
    }
}

#[test]
fn every_thread_runs_once_per_region_with_its_id() {
    let pool = ThreadPool::new(3, PinPolicy::None).unwrap();
    let hits: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
    for _ in 0..100 {
        pool.run(&|tid, n| {
            assert_eq!(n, 3);
            hits[tid].fetch_add(1, Ordering::Relaxed);
        });
    }
    for h in &hits {
        assert_eq!(h.load(Ordering::Relaxed), 100);
    }
}

#[test]
fn thousands_of_tiny_regions_do_not_deadlock() {
    with_timeout(Duration::from_secs(120), || {
        for threads in [2usize, 3] {
            let pool = ThreadPool::new(threads, PinPolicy::None).unwrap();
            let sum = AtomicU64::new(0);
            let rounds = 5_000u64;
            for r in 0..rounds {
                pool.run(&|tid, _| {
                    sum.fetch_add(r + tid as u64, Ordering::Relaxed);
                });
            }
            let t = threads as u64;
            let expected = t * rounds * (rounds - 1) / 2 + rounds * t * (t - 1) / 2;
            assert_eq!(sum.load(Ordering::Relaxed), expected);
        }
    });
}

#[test]
fn regions_separated_by_sleeps_wake_sleeping_workers() {
    with_timeout(Duration::from_secs(60), || {
        // Zero spin: every wake-up goes through the condvar path.
        for spin in [Duration::ZERO, Duration::from_micros(50)] {
            let pool = ThreadPool::with_spin(2, PinPolicy::None, spin).unwrap();
            let count = AtomicUsize::new(0);
            for i in 0..2000 {
                if i % 100 == 0 {
                    thread::sleep(Duration::from_millis(1));
                }
                pool.run(&|_, _| {
                    count.fetch_add(1, Ordering::Relaxed);
                });
            }
            assert_eq!(count.load(Ordering::Relaxed), 4000);
        }
    });
}

#[test]
fn worker_panic_propagates_and_pool_stays_usable() {
    with_timeout(Duration::from_secs(60), || {
        let pool = ThreadPool::new(2, PinPolicy::None).unwrap();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run(&|tid, _| {
                if tid == 1 {
                    panic!("boom in worker");
                }
            })
        }));
        let payload = caught.expect_err("the worker panic must reach the caller");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom in worker"));

        match pool.try_run(&|tid, _| assert_ne!(tid, 0, "caller fails")) {
            Err(PoolError::Panicked { thread: 0, message }) => {
                assert!(message.contains("caller fails"), "{message}")
            }
            other => panic!("expected a caller panic, got {other:?}"),
        }
        // Still usable, and no stale panic leaks into a clean region.
        let count = AtomicUsize::new(0);
        for _ in 0..100 {
            pool.try_run(&|_, _| {
                count.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        }
        assert_eq!(count.load(Ordering::Relaxed), 200);
    });
}

#[test]
fn single_thread_pool_runs_inline_on_the_caller() {
    let pool = ThreadPool::new(1, PinPolicy::None).unwrap();
    let caller = thread::current().id();
    let mut ran = 0;
    let ran_cell = std::sync::Mutex::new(&mut ran);
    pool.run(&|tid, n| {
        assert_eq!((tid, n), (0, 1));
        assert_eq!(thread::current().id(), caller);
        **ran_cell.lock().unwrap() += 1;
    });
    assert_eq!(ran, 1);
    assert!(matches!(
        pool.try_run(&|_, _| panic!("x")),
        Err(PoolError::Panicked { thread: 0, .. })
    ));
}

#[test]
fn bad_thread_counts_are_errors() {
    assert!(matches!(
        ThreadPool::new(0, PinPolicy::None),
        Err(PoolError::BadThreadCount(0))
    ));
    assert!(matches!(
        ThreadPool::new(1_000_000, PinPolicy::None),
        Err(PoolError::BadThreadCount(_))
    ));
}

#[test]
fn nested_run_executes_inline_instead_of_deadlocking() {
    with_timeout(Duration::from_secs(30), || {
        let pool = ThreadPool::new(2, PinPolicy::None).unwrap();
        let inner_calls = AtomicUsize::new(0);
        pool.run(&|_, _| {
            pool.run(&|tid, n| {
                assert_eq!((tid, n), (0, 1));
                inner_calls.fetch_add(1, Ordering::Relaxed);
            });
        });
        assert_eq!(inner_calls.load(Ordering::Relaxed), 2);
    });
}

#[test]
fn a_numa_placement_pins_each_thread_to_its_planned_cpu() {
    with_timeout(Duration::from_secs(30), || {
        let topo = bitnet_core::numa::Topology::current().unwrap();
        assert!(!topo.nodes.is_empty());
        for mode in [
            bitnet_core::numa::NumaMode::Distribute,
            bitnet_core::numa::NumaMode::Isolate,
            bitnet_core::numa::NumaMode::Numactl,
        ] {
            let plan = bitnet_core::numa::placement(mode, 2).unwrap();
            assert_eq!(plan.cpus.len(), 2);
            for (&c, &n) in plan.cpus.iter().zip(&plan.nodes) {
                assert_eq!(topo.node_of(c), Some(n), "{mode:?}: CPU {c} on node {n}");
            }
            let pool = ThreadPool::new(2, PinPolicy::Cpus(plan.cpus.clone())).unwrap();
            let pinned = pool.pinned_cores();
            assert_eq!(
                pinned,
                plan.cpus.iter().map(|&c| Some(c)).collect::<Vec<_>>()
            );
            let mut sum = 0usize;
            {
                let total = std::sync::atomic::AtomicUsize::new(0);
                pool.run(&|tid, _| {
                    total.fetch_add(tid + 1, std::sync::atomic::Ordering::Relaxed);
                });
                sum += total.into_inner();
            }
            assert_eq!(sum, 3);
        }
    });
}

#[test]
fn each_thread_of_a_grouped_pool_knows_its_group() {
    with_timeout(Duration::from_secs(30), || {
        let mut pool = ThreadPool::new(4, PinPolicy::None).unwrap();
        assert!(matches!(
            pool.set_groups(ThreadGroups::new(&[0, 1])),
            Err(PoolError::GroupsMismatch {
                groups: 2,
                threads: 4
            })
        ));
        assert_eq!(pool.current_group(), 0);
        let groups = ThreadGroups::new(&[4, 4, 4, 7]);
        pool.set_groups(groups.clone()).unwrap();
        assert_eq!(pool.groups(), Some(&groups));
        for _ in 0..50 {
            let seen = std::sync::Mutex::new(Vec::new());
            pool.run(&|_, _| {
                // A part the caller steals runs in the caller's group (thread 0's).
                let worker = thread::current()
                    .name()
                    .and_then(|n| n.strip_prefix("bitnet-pool-"))
                    .map_or(0, |i| i.parse().unwrap());
                seen.lock().unwrap().push((worker, pool.current_group()));
            });
            for (worker, group) in seen.into_inner().unwrap() {
                assert_eq!(group, usize::from(worker == 3), "thread {worker}");
            }
        }
        // One node is no grouping.
        pool.set_groups(ThreadGroups::new(&[1, 1, 1, 1])).unwrap();
        assert!(pool.groups().is_none());
    });
}

#[test]
fn pinned_pool_computes_the_same_and_reports_cores() {
    // Pin on a helper thread so the test harness thread keeps its affinity.
    with_timeout(Duration::from_secs(30), || {
        let pool = ThreadPool::new(2, PinPolicy::Cores).unwrap();
        let pinned = pool.pinned_cores();
        assert_eq!(pinned.len(), 2);
        let order = bitnet_core::threadpool::core_order();
        if order.len() >= 2 {
            assert_eq!(pinned[0], Some(order[0].id));
            assert_eq!(pinned[1], Some(order[1].id));
        }
        let mut out = vec![0usize; 100];
        {
            let shared = DisjointSlice::new(&mut out);
            pool.run(&|tid, n| {
                let (range, chunk) = shared.part(n, tid, 8);
                for (o, i) in chunk.iter_mut().zip(range) {
                    *o = i * i;
                }
            });
        }
        assert!(out.iter().enumerate().all(|(i, &v)| v == i * i));
    });
}

#[test]
fn dropping_a_pinned_pool_gives_the_caller_its_cpus_back() {
    // A pinned pool pins its creating thread; once dropped, that thread must see all its
    // CPUs again, so that a second pool created there pins its threads to distinct cores
    // (not all to the first pool's core, which would run them one at a time).
    with_timeout(Duration::from_secs(30), || {
        let before: Vec<usize> = bitnet_core::threadpool::core_order()
            .iter()
            .map(|c| c.id)
            .collect();
        for round in 0..2 {
            let pool = ThreadPool::new(2, PinPolicy::Cores).unwrap();
            let pinned = pool.pinned_cores();
            if before.len() >= 2 && pinned.iter().all(Option::is_some) {
                assert_ne!(
                    pinned[0], pinned[1],
                    "round {round}: both threads on one CPU"
                );
            }
            drop(pool);
            let after: Vec<usize> = bitnet_core::threadpool::core_order()
                .iter()
                .map(|c| c.id)
                .collect();
            assert_eq!(after, before, "round {round}: caller's CPUs not restored");
        }
    });
}

#[test]
fn pools_alive_together_on_one_thread_each_get_distinct_cores() {
    // Two engines of one process (`bench --interleave`) create their pools on one thread.
    // The second must not read the one CPU the first left that thread on (it would pin both
    // its threads there), and the thread gets its CPUs back only when the last pool goes,
    // whichever is dropped first.
    with_timeout(Duration::from_secs(30), || {
        let cpus = || -> Vec<usize> {
            let mut ids: Vec<usize> = core_affinity::get_core_ids()
                .unwrap_or_default()
                .iter()
                .map(|c| c.id)
                .collect();
            ids.sort_unstable();
            ids
        };
        let before = cpus();
        // core_affinity reads the calling thread's mask on Linux; on Windows the process's
        // (GetProcessAffinityMask), where a thread's own pin does not show.
        let pin_visible = cfg!(target_os = "linux");
        let order: Vec<usize> = bitnet_core::threadpool::core_order()
            .iter()
            .map(|c| c.id)
            .collect();
        let n_phys = bitnet_core::threadpool::physical_core_count();
        let first = ThreadPool::new(2, PinPolicy::Cores).unwrap();
        let second = ThreadPool::new(2, PinPolicy::Cores).unwrap();
        let (p1, p2) = (first.pinned_cores(), second.pinned_cores());
        if before.len() >= 2 && p1.iter().chain(&p2).all(Option::is_some) {
            assert_eq!(p1, p2, "both pools pin thread i to the i-th core");
            assert_ne!(p2[0], p2[1], "second pool: both threads on one CPU");
            if pin_visible {
                assert_eq!(cpus().len(), 1, "the creating thread is pinned meanwhile");
            }
        }
        let seen: Vec<usize> = bitnet_core::threadpool::core_order()
            .iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(
            seen, order,
            "a pinned thread's pools see its CPUs as before"
        );
        assert_eq!(bitnet_core::threadpool::physical_core_count(), n_phys);
        // Dropped out of creation order: the thread stays pinned for the second pool.
        drop(first);
        if pin_visible && before.len() >= 2 && p2.iter().all(Option::is_some) {
            assert_eq!(cpus().len(), 1, "unpinned while the second pool lives");
        }
        drop(second);
        assert_eq!(cpus(), before, "the caller's CPUs are back");
    });
}

#[test]
fn core_order_puts_distinct_physical_cores_first() {
    let order = bitnet_core::threadpool::core_order();
    let n_phys = bitnet_core::threadpool::physical_core_count();
    assert!(n_phys >= 1);
    if !order.is_empty() {
        assert!(n_phys <= order.len());
        let mut ids: Vec<_> = order.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), order.len(), "no logical CPU listed twice");
    }
}

#[test]
fn profiling_accounts_busy_and_wait_time() {
    let pool = ThreadPool::new(2, PinPolicy::None).unwrap();
    pool.run(&|_, _| {});
    assert_eq!(pool.take_wait_stats().regions, 0, "off by default");
    pool.set_profiling(true);
    for _ in 0..5 {
        pool.run(&|tid, _| {
            if tid == 1 {
                thread::sleep(Duration::from_millis(4));
            }
        });
    }
    let stats = pool.take_wait_stats();
    assert_eq!(stats.regions, 5);
    assert_eq!(stats.threads.len(), 2);
    assert!(stats.threads[1].busy >= Duration::from_millis(20));
    // The caller did nothing, so it waited for most of the wall time.
    assert!(
        stats.threads[0].wait >= Duration::from_millis(15),
        "{stats:?}"
    );
    assert!(stats.threads[0].busy < stats.threads[1].busy);
    assert!(stats.wall >= stats.threads[1].busy);
    let again = pool.take_wait_stats();
    assert_eq!(again.regions, 0, "take resets");
    assert!(
        again
            .threads
            .iter()
            .all(|t| t.busy.is_zero() && t.wait.is_zero())
    );
}

#[test]
fn disjoint_slice_rejects_overlap_and_out_of_bounds() {
    let mut data = [0u8; 10];
    let d = DisjointSlice::new(&mut data);
    assert_eq!(d.len(), 10);
    let a = d.try_slice_mut(2..5).unwrap();
    a.fill(1);
    assert!(matches!(
        d.try_slice_mut(4..6),
        Err(DisjointError::Overlap {
            held_start: 2,
            held_end: 5,
            ..
        })
    ));
    assert!(matches!(
        d.try_slice_mut(2..5),
        Err(DisjointError::Overlap { .. })
    ));
    assert!(matches!(
        d.try_slice_mut(9..11),
        Err(DisjointError::OutOfBounds { .. })
    ));
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = d.try_slice_mut(6..5);
    assert!(matches!(reversed, Err(DisjointError::OutOfBounds { .. })));
    // Empty ranges never conflict; adjacent ranges are fine.
    assert!(d.try_slice_mut(3..3).unwrap().is_empty());
    d.try_slice_mut(5..10).unwrap().fill(2);
    d.try_slice_mut(0..2).unwrap().fill(3);
    drop(d);
    assert_eq!(data, [3, 3, 1, 1, 1, 2, 2, 2, 2, 2]);
}

#[test]
fn disjoint_slice_handles_more_claims_than_inline_storage() {
    let mut data = vec![0u32; 100];
    let d = DisjointSlice::new(&mut data);
    for i in 0..100 {
        d.slice_mut(i..i + 1)[0] = i as u32 * 2;
    }
    assert!(d.try_slice_mut(50..51).is_err());
    drop(d);
    assert!(data.iter().enumerate().all(|(i, &v)| v == i as u32 * 2));
}

#[test]
#[should_panic(expected = "overlaps")]
fn disjoint_slice_mut_panics_on_overlap() {
    let mut data = [0u8; 4];
    let d = DisjointSlice::new(&mut data);
    let _a = d.slice_mut(0..2);
    let _b = d.slice_mut(1..3);
}

#[test]
fn caller_runs_parts_that_no_worker_claimed() {
    with_timeout(Duration::from_secs(60), || {
        // Spin 0: workers sleep on the condvar between regions, and a futex wake-up takes
        // microseconds while the caller's part 0 here takes nanoseconds, so the caller
        // should take part 1 itself in (almost) every region.
        let pool = ThreadPool::with_spin(2, PinPolicy::None, Duration::ZERO).unwrap();
        pool.set_profiling(true);
        let caller = thread::current().id();
        let on_caller = AtomicUsize::new(0);
        let runs: Vec<AtomicUsize> = (0..2).map(|_| AtomicUsize::new(0)).collect();
        // Which thread wins a part is up to the scheduler, so run regions until the caller
        // has taken one (bounded), rather than betting on a fixed count.
        let mut regions = 0;
        while regions < 200 || (on_caller.load(Ordering::Relaxed) == 0 && regions < 20_000) {
            regions += 1;
            pool.run(&|tid, _| {
                runs[tid].fetch_add(1, Ordering::Relaxed);
                if tid == 1 && thread::current().id() == caller {
                    on_caller.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        assert!(runs.iter().all(|r| r.load(Ordering::Relaxed) == regions));
        let stats = pool.take_wait_stats();
        assert_eq!(stats.stolen as usize, on_caller.load(Ordering::Relaxed));
        assert!(stats.stolen > 0, "the caller never took a part: {stats:?}");
        // Later regions still reach the workers (they were not lost by the steals).
        let worker_ran = AtomicUsize::new(0);
        let slow = ThreadPool::with_spin(2, PinPolicy::None, Duration::ZERO).unwrap();
        for _ in 0..500 {
            if worker_ran.load(Ordering::Relaxed) > 0 {
                break;
            }
            slow.run(&|tid, _| {
                if tid == 0 {
                    thread::sleep(Duration::from_millis(2));
                } else if thread::current().id() != caller {
                    worker_ran.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        assert!(
            worker_ran.load(Ordering::Relaxed) > 0,
            "workers never got a part"
        );
    });
}

#[test]
fn chunk_queue_hands_out_every_chunk_once_across_threads() {
    with_timeout(Duration::from_secs(30), || {
        let pool = ThreadPool::new(3, PinPolicy::None).unwrap();
        for (units, unit_len, n_chunks, align) in [(100, 3, 7, 4), (5, 2, 16, 1), (64, 1, 1, 16)] {
            let mut out = vec![usize::MAX; units * unit_len + 5];
            let claims = AtomicUsize::new(0);
            {
                let q = ChunkQueue::new(&mut out, units, unit_len, n_chunks, align).unwrap();
                pool.run(&|_, _| {
                    while let Some((r, dst)) = q.claim() {
                        assert_eq!(r.start % align, 0, "chunk start aligned");
                        assert_eq!(dst.len(), r.len() * unit_len);
                        for (i, d) in dst.iter_mut().enumerate() {
                            assert_eq!(*d, usize::MAX, "element written twice");
                            *d = r.start * unit_len + i;
                        }
                        claims.fetch_add(1, Ordering::Relaxed);
                    }
                    assert!(q.claim().is_none(), "drained queue stays drained");
                });
            }
            let want_claims = (0..n_chunks)
                .filter(|&c| !split_range(units, n_chunks, c, align).is_empty())
                .count();
            assert_eq!(claims.load(Ordering::Relaxed), want_claims);
            let (body, tail) = out.split_at(units * unit_len);
            assert!(body.iter().enumerate().all(|(i, &v)| v == i));
            assert!(
                tail.iter().all(|&v| v == usize::MAX),
                "nothing past units * unit_len"
            );
        }
        let mut short = vec![0u8; 9];
        assert!(ChunkQueue::new(&mut short, 5, 2, 2, 1).is_none());
    });
}

/// How long the stress test lets a region go without finishing before it calls the pool hung.
/// Native regions take microseconds and emulated ones (qemu-user, `scripts/test-arm.sh`)
/// well under a millisecond; a pool that lost a wake-up never finishes one.
const STRESS_STALL_LIMIT: Duration = Duration::from_secs(60);

/// Fork-join stress, the pool's handshakes thousands of times: 5000 regions on 2 threads and
/// 2000 on 4, each with no spin (every wait sleeps on a condvar, where a lost wake-up hangs)
/// and with the default spin. In every other region part 0 waits until every other part has
/// started, so workers must wake (the caller cannot steal their parts) and the caller then
/// waits for them to finish: both handshakes run each time. In the rest the caller may steal.
/// Every region checks that each part ran exactly once. A hang
/// does not hang the suite: a watchdog aborts the process, saying where it stalled, once no
/// region has finished for [`STRESS_STALL_LIMIT`]. The ARM pass runs this under qemu.
#[test]
fn stress_fork_join_runs_every_part_once() {
    let progress = Arc::new(AtomicU64::new(0));
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let watchdog = {
        let progress = Arc::clone(&progress);
        thread::spawn(move || {
            let mut last = progress.load(Ordering::SeqCst);
            let mut stalled = Duration::ZERO;
            let tick = Duration::from_millis(250);
            loop {
                match done_rx.recv_timeout(tick) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                let now = progress.load(Ordering::SeqCst);
                stalled = if now == last {
                    stalled + tick
                } else {
                    Duration::ZERO
                };
                last = now;
                if stalled >= STRESS_STALL_LIMIT {
                    // Panicking here would not stop the stuck threads (and the harness would
                    // wait for the test forever): end the process with the reason.
                    eprintln!(
                        "stress_fork_join_runs_every_part_once: no region finished for {:?} \
                         (regions done so far: {}): the pool hung",
                        STRESS_STALL_LIMIT, now,
                    );
                    std::process::abort();
                }
            }
        })
    };
    let mut total = 0u64;
    let start = Instant::now();
    for (threads, regions) in [(2usize, 5000u64), (4, 2000)] {
        for spin in [Duration::ZERO, DEFAULT_SPIN] {
            let t0 = Instant::now();
            let pool = ThreadPool::with_spin(threads, PinPolicy::None, spin).unwrap();
            let runs: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
            for r in 0..regions {
                let wait_for_workers = r % 2 == 0;
                pool.run(&|tid, n| {
                    assert_eq!(n, threads);
                    runs[tid].fetch_add(1, Ordering::Relaxed);
                    if tid == 0 && wait_for_workers {
                        while runs[1..].iter().any(|c| c.load(Ordering::Relaxed) <= r) {
                            thread::yield_now();
                        }
                    }
                    // A little work, of lengths that drift against each other from region
                    // to region, so the parts end in every order and at nearly the same
                    // time: the last worker's done-notification races the caller going to
                    // sleep in every way.
                    let work = if tid == 0 { r % 89 } else { r % 97 } * 8;
                    for i in 0..work {
                        std::hint::black_box(i);
                    }
                });
                for (tid, count) in runs.iter().enumerate() {
                    assert_eq!(
                        count.load(Ordering::Relaxed),
                        r + 1,
                        "{threads} threads, spin {spin:?}: part {tid} after region {r}"
                    );
                }
                progress.fetch_add(1, Ordering::SeqCst);
            }
            drop(pool);
            total += regions;
            eprintln!(
                "pool stress: {regions} regions, {threads} threads, spin {spin:?}: {:?}",
                t0.elapsed()
            );
        }
    }
    eprintln!("pool stress: {total} regions in {:?}", start.elapsed());
    drop(done_tx);
    watchdog.join().expect("watchdog");
}
