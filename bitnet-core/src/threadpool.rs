//! A persistent fork-join thread pool for the forward pass.
//!
//! A decode step runs a couple of hundred small parallel regions (one per matmul, each a
//! fraction of a millisecond), so the cost that matters is dispatch + join latency, not
//! throughput. Workers are spawned once; a region is published by bumping an atomic generation counter, workers
//! spin on it for a short while ([`DEFAULT_SPIN`]) and only then sleep on a condvar, so a
//! busy decode loop never pays a futex wake-up while an idle pool does not burn a core. The
//! calling thread runs part 0, then any part no worker has claimed yet (so a worker the OS
//! has not scheduled costs nothing on an oversubscribed machine), then waits for the rest.
//! Inside a region, [`ChunkQueue`] shares a product's rows out in chunks to whichever thread
//! is running, so a thread that is descheduled mid-region holds back one chunk, not a share;
//! a one-token product uses [`ShareQueue`] instead: each thread streams a contiguous share and
//! then takes small steps from the back of the others'.
//! A pool whose threads sit on several NUMA nodes is told their [`ThreadGroups`]
//! (`threadpool/groups.rs`): each group then claims the chunks of its own node's rows first.
//!
//! The sleep/wake and done handshakes take their atomics, locks and threads from
//! `threadpool/sync.rs`, which swaps in loom's under `--cfg loom`: `scripts/loom.sh`
//! model-checks this very code (`threadpool/loom_models.rs`).
//!
//! Besides the SIGBUS guard (`model/sigbus.rs`) and the loader's memory map, this is the module of
//! `bitnet-core` that uses `unsafe`: the job closure borrows from
//! the caller's stack (it is not `'static`), so workers reach it through a raw pointer that is
//! valid exactly while a region is open, and [`DisjointSlice`] hands out disjoint `&mut`
//! windows of one output slice to several threads (`threadpool/disjoint.rs`). Both contracts are enforced here, so the
//! public API is safe.

// Sharing a borrowed job with the workers, disjoint writes and CPU affinity need `unsafe`,
// fenced in small functions with SAFETY comments.
#![allow(unsafe_code)]

use std::any::Any;
use std::cell::Cell;
use std::fmt;
use std::ops::Range;
use std::panic::{self, AssertUnwindSafe};
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use thiserror::Error;

mod affinity;
mod chunks;
mod disjoint;
mod groups;
#[cfg(all(test, loom))]
mod loom_models;
mod share_queue;
mod sync;

use affinity::CallerPin;
pub use affinity::{core_order, current_cpu, physical_core_count};
pub use chunks::{ChunkQueue, ChunkShares};
pub use disjoint::{DisjointError, DisjointSlice};
pub use groups::{MAX_GROUPS, ThreadGroups};
pub use share_queue::{MAX_SHARE_PARTS, ShareQueue};
use sync::{
    Arc, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Barrier, Condvar, JoinHandle, Mutex, fence,
    lock, spin_until, thread,
};

/// Upper bound on the thread count accepted by [`ThreadPool::new`].
pub const MAX_THREADS: usize = 1024;

/// How long an idle worker (or a caller waiting for workers) spins before it sleeps.
///
/// Long enough to bridge the serial work between two regions of a decode step (a few µs),
/// short enough not to burn CPU a descheduled pool thread could use on a shared machine
/// (`bench/2026-11-21-719ce1e-pool-spin.md` has the decode figures of 100 µs against 20).
pub const DEFAULT_SPIN: Duration = Duration::from_micros(20);

/// The job type run by [`ThreadPool::run`]: called as `f(thread_id, n_threads)`.
pub type Job<'a> = dyn Fn(usize, usize) + Sync + 'a;

/// Errors of the thread pool.
#[derive(Debug, Error)]
pub enum PoolError {
    #[error("thread count must be between 1 and {MAX_THREADS}, got {0}")]
    BadThreadCount(usize),
    #[error("failed to spawn pool worker thread {index}: {source}")]
    Spawn {
        index: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("pool job panicked on thread {thread}: {message}")]
    Panicked { thread: usize, message: String },
    #[error("thread groups for {groups} threads given to a pool of {threads}")]
    GroupsMismatch { groups: usize, threads: usize },
}

/// Whether pool threads are pinned to CPU cores.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PinPolicy {
    /// Leave scheduling to the OS.
    #[default]
    None,
    /// Pin thread `i` to the `i`-th core of [`core_order`] (distinct physical cores first).
    /// Thread 0 is the thread that calls [`ThreadPool::new`]; its previous affinity is put
    /// back when the pool is dropped on that thread (else a later pool created there would
    /// see one CPU and pin every thread to it). Pinning failures are not errors: see
    /// [`ThreadPool::pinned_cores`].
    Cores,
    /// Pin thread `i` to CPU `cpus[i % cpus.len()]` (a NUMA placement: `crate::numa::plan`),
    /// with the caller's thread put back as for `Cores`.
    Cpus(Vec<usize>),
}

/// Busy and wait time of one part (`tid`) of the regions, summed over profiled regions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadStats {
    /// Time spent inside the job.
    pub busy: Duration,
    /// Region wall time minus busy time: dispatch latency, imbalance and join latency.
    pub wait: Duration,
}

/// Profile of the regions run since profiling was enabled or last taken.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WaitStats {
    /// Number of parallel regions profiled.
    pub regions: u64,
    /// Parts the caller ran besides part 0 because no worker had claimed them yet (workers
    /// asleep or not scheduled).
    pub stolen: u64,
    /// Sum of region wall times as seen by the caller.
    pub wall: Duration,
    /// One entry per part `tid`, part 0 (always run by the caller) first.
    pub threads: Vec<ThreadStats>,
}

#[repr(align(128))]
#[derive(Debug, Default)]
struct CachePadded<T>(T);

#[cfg(not(loom))]
thread_local! {
    /// True while this thread executes a pool job (of any pool): a nested `run` then executes
    /// inline instead of deadlocking on a pool that is waiting for this very thread.
    static IN_POOL_JOB: Cell<bool> = const { Cell::new(false) };
    /// The pool thread this OS thread is: its worker index, 0 on any other thread (a pool's
    /// caller is its thread 0). A part the caller steals runs on the caller's CPU, so the
    /// thread, not the part (`tid`), says which node's rows to claim first.
    static POOL_THREAD: Cell<usize> = const { Cell::new(0) };
}

// Loom runs every model thread on one OS thread, so std's thread-locals would be shared by
// the caller and the workers there (a worker's flag would make the caller run inline).
#[cfg(loom)]
loom::thread_local! {
    static IN_POOL_JOB: Cell<bool> = Cell::new(false);
    static POOL_THREAD: Cell<usize> = Cell::new(0);
}

/// Sets [`IN_POOL_JOB`] for its lifetime, restoring the previous value even on unwind.
struct InJobGuard(bool);

impl InJobGuard {
    fn enter() -> Self {
        InJobGuard(IN_POOL_JOB.with(|c| c.replace(true)))
    }
}

impl Drop for InJobGuard {
    fn drop(&mut self) {
        IN_POOL_JOB.with(|c| c.set(self.0));
    }
}

const NOT_PINNED: usize = usize::MAX;

/// Bits of [`Shared::state`] holding the next unclaimed part; the rest is the generation.
const PART_BITS: u32 = 20;
const PART_MASK: u64 = (1 << PART_BITS) - 1;
const _: () = assert!(MAX_THREADS as u64 <= PART_MASK);

fn generation_of(state: u64) -> u64 {
    state >> PART_BITS
}

/// State shared by the caller and the workers.
///
/// A region is split into `n_threads` parts (the `tid` passed to the job). The caller runs
/// part 0, workers claim parts 1.. from `state` with a compare-and-swap that also checks the
/// generation, and the caller claims whatever is left once part 0 is done. So a worker the OS
/// has not scheduled yet (an oversubscribed machine) delays a region by nothing, instead of
/// a whole time slice; a worker that wakes late finds no part left and goes back to waiting.
struct Shared {
    n_threads: usize,
    spin: Duration,
    /// `(generation << PART_BITS) | next unclaimed part`. The generation is bumped once per
    /// region (and at shutdown); workers wait for it to change.
    state: CachePadded<AtomicU64>,
    /// Parts 1.. of the current region that have not finished yet.
    pending: CachePadded<AtomicUsize>,
    /// Points at the caller's `&Job` for the current region. Valid while `pending > 0`.
    job: AtomicPtr<()>,
    /// Whether parts are timed in the current region (set with `job`, before publishing).
    region_profiling: AtomicBool,
    shutdown: AtomicBool,
    sleepers: AtomicUsize,
    sleep_lock: Mutex<()>,
    wake: Condvar,
    caller_waiting: AtomicBool,
    done_lock: Mutex<()>,
    done: Condvar,
    panicked: AtomicBool,
    panic: Mutex<Option<(usize, Box<dyn Any + Send>)>>,
    /// Per-part busy nanoseconds of the current region (profiling only).
    busy_ns: Box<[CachePadded<AtomicU64>]>,
    pinned: Box<[AtomicUsize]>,
}

impl Shared {
    /// Spins, then sleeps, until the generation differs from `seen`; returns the new one.
    fn wait_for_generation(&self, seen: u64) -> u64 {
        let mut g = seen;
        if spin_until(self.spin, || {
            g = generation_of(self.state.0.load(Ordering::Acquire));
            g != seen
        }) {
            return g;
        }
        let mut guard = lock(&self.sleep_lock);
        // Pairs with `publish` (a store to `state`, a fence, a load of `sleepers`): with a
        // SeqCst fence between the store and the load on both sides, either the caller sees
        // us counted (and notifies under the lock) or we see the new generation. See
        // `publish` for why the fences and not SeqCst accesses alone.
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        loop {
            let g = generation_of(self.state.0.load(Ordering::SeqCst));
            if g != seen {
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                return g;
            }
            guard = self
                .wake
                .wait(guard)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Opens region `generation`: publishes the job pointer, then wakes the workers. Only
    /// the caller (holding the run lock, after the previous region completed) calls this.
    fn publish(&self, generation: u64, job: *mut (), profiling: bool) {
        self.job.store(job, Ordering::Relaxed);
        self.region_profiling.store(profiling, Ordering::Relaxed);
        self.pending.0.store(self.n_threads - 1, Ordering::Relaxed);
        // Part 0 belongs to the caller; claims start at part 1.
        self.state
            .0
            .store((generation << PART_BITS) | 1, Ordering::SeqCst);
        // The store above and the load of `sleepers` in `wake_sleepers` are a Dekker pair
        // with the worker's `sleepers` increment and `state` load: one side must see the
        // other's write, or the caller skips the notify while the worker sleeps through the
        // region. SeqCst accesses alone promise that in C11, but loom models them as AcqRel
        // (and then finds this very lost wake-up), and qemu-user on x86-64 does reorder an
        // AArch64 STLR with a later LDAR (bench/2026-12-06-pool-loom-arm.md); SeqCst fences
        // (DMB ISH, MFENCE) are kept by both, and cost one barrier per region and per sleep.
        fence(Ordering::SeqCst);
        self.wake_sleepers();
    }

    fn wake_sleepers(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = lock(&self.sleep_lock);
            self.wake.notify_all();
        }
    }

    /// Claims and runs unclaimed parts of region `generation` until none is left; returns
    /// how many parts this thread ran.
    fn claim_parts(&self, generation: u64) -> usize {
        let mut ran = 0;
        let mut cur = self.state.0.load(Ordering::Acquire);
        loop {
            let part = (cur & PART_MASK) as usize;
            if generation_of(cur) != generation || part >= self.n_threads {
                return ran;
            }
            match self.state.0.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.run_part(part);
                    ran += 1;
                    cur = self.state.0.load(Ordering::Acquire);
                }
                Err(now) => cur = now,
            }
        }
    }

    /// Runs claimed part `part` (>= 1) of the open region and reports it finished.
    fn run_part(&self, part: usize) {
        // The claim succeeded on the current generation, so the region is open and cannot
        // close before this part finishes: `job` is that region's pointer (the Acquire
        // claim synchronised with the caller's publishing store).
        let job = self.job.load(Ordering::Relaxed);
        let t0 = self
            .region_profiling
            .load(Ordering::Relaxed)
            .then(Instant::now);
        // SAFETY: `job` belongs to the open region (see above), and `finish_one` below is
        // called only after the job returned, so the caller is still inside `run`.
        let result = panic::catch_unwind(AssertUnwindSafe(|| unsafe {
            call_job(job, part, self.n_threads)
        }));
        if let Some(t0) = t0 {
            self.busy_ns[part]
                .0
                .store(nanos(t0.elapsed()), Ordering::Relaxed);
        }
        if let Err(payload) = result {
            self.record_panic(part, payload);
        }
        self.finish_one();
    }

    /// Marks one part done; the job must not be touched after.
    fn finish_one(&self) {
        if self.pending.0.fetch_sub(1, Ordering::SeqCst) == 1 {
            // The last part's Dekker pair with `wait_done`: see there.
            fence(Ordering::SeqCst);
            if self.caller_waiting.load(Ordering::SeqCst) {
                let _guard = lock(&self.done_lock);
                self.done.notify_one();
            }
        }
    }

    /// Caller side: spins, then sleeps, until every part has finished.
    fn wait_done(&self) {
        if spin_until(self.spin, || self.pending.0.load(Ordering::Acquire) == 0) {
            return;
        }
        let mut guard = lock(&self.done_lock);
        self.caller_waiting.store(true, Ordering::SeqCst);
        // A Dekker pair with `finish_one` (a `pending` decrement, a fence, a load of
        // `caller_waiting`): either the last part sees the caller waiting and notifies under
        // the lock, or the caller sees `pending` at zero. Without the fences (SeqCst accesses
        // only) loom finds both asleep, and qemu-user lets it happen: see `publish`.
        fence(Ordering::SeqCst);
        while self.pending.0.load(Ordering::SeqCst) != 0 {
            guard = self
                .done
                .wait(guard)
                .unwrap_or_else(PoisonError::into_inner);
        }
        self.caller_waiting.store(false, Ordering::SeqCst);
    }

    fn record_panic(&self, part: usize, payload: Box<dyn Any + Send>) {
        let mut slot = lock(&self.panic);
        if slot.is_none() {
            *slot = Some((part, payload));
        }
        self.panicked.store(true, Ordering::Release);
    }
}

/// Calls the job a region was opened with.
///
/// # Safety
/// `job` must be the pointer passed to [`Shared::publish`] for a region that is still open,
/// i.e. it points at a `&Job` on the stack of a [`ThreadPool::run`] call that has not
/// returned. `run` guarantees this by not returning (not even by unwinding) before every
/// claimed part has called [`Shared::finish_one`], which happens only after this returns.
unsafe fn call_job(job: *const (), part: usize, n_threads: usize) {
    // SAFETY: per the contract above the pointee is a live `&Job` for the whole call; the
    // `'static` here is never observed beyond this call, during which the borrow is valid.
    let f: &&Job<'static> = unsafe { &*(job as *const &Job<'static>) };
    f(part, n_threads);
}

fn worker_main(
    shared: Arc<Shared>,
    index: usize,
    core: Option<core_affinity::CoreId>,
    start: Arc<Barrier>,
) {
    POOL_THREAD.with(|t| t.set(index));
    if let Some(core) = core
        && core_affinity::set_for_current(core)
    {
        shared.pinned[index].store(core.id, Ordering::Relaxed);
    }
    start.wait();
    drop(start);
    let _in_job = InJobGuard::enter();
    let mut seen = 0u64;
    loop {
        seen = shared.wait_for_generation(seen);
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        shared.claim_parts(seen);
    }
}

/// Accumulated profile, guarded by the run lock (which also serialises regions).
#[derive(Debug)]
struct RunState {
    /// Generation of the last region opened.
    generation: u64,
    regions: u64,
    stolen: u64,
    wall_ns: u64,
    busy_ns: Vec<u64>,
    wait_ns: Vec<u64>,
}

/// A persistent fork-join pool; see the module docs.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    state: Mutex<RunState>,
    profiling: AtomicBool,
    /// The pin [`PinPolicy::Cores`] put on the creating thread, taken off on drop.
    caller_pin: Option<CallerPin>,
    /// The threads' groups (NUMA nodes), when there are two or more.
    groups: Option<ThreadGroups>,
}

impl fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadPool")
            .field("n_threads", &self.shared.n_threads)
            .field("pinned", &self.pinned_cores())
            .field("profiling", &self.profiling.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl ThreadPool {
    /// Spawns `n_threads - 1` workers (the caller is thread 0) with the default spin time.
    pub fn new(n_threads: usize, pin: PinPolicy) -> Result<ThreadPool, PoolError> {
        Self::with_spin(n_threads, pin, DEFAULT_SPIN)
    }

    /// As [`ThreadPool::new`], with the time a waiting thread spins before it sleeps
    /// (`Duration::ZERO`: sleep at once, for oversubscribed machines).
    pub fn with_spin(
        n_threads: usize,
        pin: PinPolicy,
        spin: Duration,
    ) -> Result<ThreadPool, PoolError> {
        if n_threads == 0 || n_threads > MAX_THREADS {
            return Err(PoolError::BadThreadCount(n_threads));
        }
        let cores = match pin {
            PinPolicy::None => Vec::new(),
            PinPolicy::Cores => core_order(),
            PinPolicy::Cpus(cpus) => cpus
                .into_iter()
                .map(|id| core_affinity::CoreId { id })
                .collect(),
        };
        let core_for = |tid: usize| (!cores.is_empty()).then(|| cores[tid % cores.len()]);
        let shared = Arc::new(Shared {
            n_threads,
            spin,
            state: CachePadded(AtomicU64::new(0)),
            pending: CachePadded(AtomicUsize::new(0)),
            job: AtomicPtr::new(std::ptr::null_mut()),
            region_profiling: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
            caller_waiting: AtomicBool::new(false),
            done_lock: Mutex::new(()),
            done: Condvar::new(),
            panicked: AtomicBool::new(false),
            panic: Mutex::new(None),
            busy_ns: (0..n_threads)
                .map(|_| CachePadded(AtomicU64::new(0)))
                .collect(),
            pinned: (0..n_threads)
                .map(|_| AtomicUsize::new(NOT_PINNED))
                .collect(),
        });
        let mut caller_pin = None;
        if let Some(core) = core_for(0) {
            let (pin, pinned) = CallerPin::pin(core);
            caller_pin = Some(pin);
            if pinned {
                shared.pinned[0].store(core.id, Ordering::Relaxed);
            }
        }
        let start = Arc::new(Barrier::new(n_threads));
        let mut pool = ThreadPool {
            shared: Arc::clone(&shared),
            workers: Vec::with_capacity(n_threads - 1),
            state: Mutex::new(RunState {
                generation: 0,
                regions: 0,
                stolen: 0,
                wall_ns: 0,
                busy_ns: vec![0; n_threads],
                wait_ns: vec![0; n_threads],
            }),
            profiling: AtomicBool::new(false),
            caller_pin,
            groups: None,
        };
        for tid in 1..n_threads {
            let (shared, start, core) = (Arc::clone(&shared), Arc::clone(&start), core_for(tid));
            let spawned = thread::Builder::new()
                .name(format!("bitnet-pool-{tid}"))
                .spawn(move || worker_main(shared, tid, core, start));
            match spawned {
                Ok(handle) => pool.workers.push(handle),
                Err(source) => {
                    // The spawned workers are stuck at the start barrier, which can now never
                    // fill; they are leaked rather than risking a deadlock in `Drop`.
                    pool.workers.clear();
                    // The caller's pin is let go, so its thread gets its CPUs back.
                    drop(pool.caller_pin.take());
                    std::mem::forget(pool);
                    return Err(PoolError::Spawn { index: tid, source });
                }
            }
        }
        start.wait();
        Ok(pool)
    }

    /// Number of threads taking part in a region, the caller included.
    pub fn n_threads(&self) -> usize {
        self.shared.n_threads
    }

    /// The logical CPU each thread was pinned to (`None`: not pinned or pinning failed).
    pub fn pinned_cores(&self) -> Vec<Option<usize>> {
        self.shared
            .pinned
            .iter()
            .map(|p| match p.load(Ordering::Relaxed) {
                NOT_PINNED => None,
                id => Some(id),
            })
            .collect()
    }

    /// Puts the threads in groups (thread `t`, as pinned, in group `groups.of_thread(t)`):
    /// products then share their rows out by group ([`ChunkShares`]). One group is no
    /// grouping: [`ThreadPool::groups`] stays `None` and claims stay those of a plain pool.
    pub fn set_groups(&mut self, groups: ThreadGroups) -> Result<(), PoolError> {
        if groups.n_threads() != self.n_threads() {
            return Err(PoolError::GroupsMismatch {
                groups: groups.n_threads(),
                threads: self.n_threads(),
            });
        }
        self.groups = (groups.len() > 1).then_some(groups);
        Ok(())
    }

    /// The threads' groups, if there are two or more.
    pub fn groups(&self) -> Option<&ThreadGroups> {
        self.groups.as_ref()
    }

    /// The group of the pool thread calling this (inside a job: the thread running it);
    /// 0 without groups.
    pub fn current_group(&self) -> usize {
        match &self.groups {
            None => 0,
            Some(g) => g.of_thread(POOL_THREAD.with(Cell::get)),
        }
    }

    /// Turns per-thread busy/wait accounting on or off (off by default; when off a region
    /// reads no clock).
    pub fn set_profiling(&self, on: bool) {
        self.profiling.store(on, Ordering::Relaxed);
    }

    /// Returns the profile accumulated since the last call and resets it.
    pub fn take_wait_stats(&self) -> WaitStats {
        let mut st = lock(&self.state);
        let threads = st
            .busy_ns
            .iter()
            .zip(&st.wait_ns)
            .map(|(&b, &w)| ThreadStats {
                busy: Duration::from_nanos(b),
                wait: Duration::from_nanos(w),
            })
            .collect();
        let stats = WaitStats {
            regions: st.regions,
            stolen: st.stolen,
            wall: Duration::from_nanos(st.wall_ns),
            threads,
        };
        st.regions = 0;
        st.stolen = 0;
        st.wall_ns = 0;
        st.busy_ns.fill(0);
        st.wait_ns.fill(0);
        stats
    }

    /// Runs `f(tid, n_threads)` once for every `tid < n_threads`, in parallel on the pool's
    /// threads, and returns when all calls have returned. `tid` 0 runs on the caller; the
    /// others on whichever thread claims them first (usually one per worker, but the caller
    /// takes parts no worker has started): code must depend on `tid`, never on the OS
    /// thread. A panic in any call is re-raised here after all calls have finished; the pool
    /// stays usable. Called from inside a pool job, `f` runs inline as `f(0, 1)`. Concurrent
    /// calls from several threads are serialised.
    pub fn run(&self, f: &Job<'_>) {
        if let Err((_, payload)) = self.run_inner(f) {
            panic::resume_unwind(payload);
        }
    }

    /// As [`ThreadPool::run`], but a panic in `f` becomes [`PoolError::Panicked`].
    pub fn try_run(&self, f: &Job<'_>) -> Result<(), PoolError> {
        self.run_inner(f)
            .map_err(|(thread, payload)| PoolError::Panicked {
                thread,
                message: panic_message(payload.as_ref()),
            })
    }

    fn run_inner(&self, f: &Job<'_>) -> Result<(), (usize, Box<dyn Any + Send>)> {
        if IN_POOL_JOB.with(Cell::get) {
            return panic::catch_unwind(AssertUnwindSafe(|| f(0, 1))).map_err(|p| (0, p));
        }
        let mut state = lock(&self.state);
        let profiling = self.profiling.load(Ordering::Relaxed);
        let t_start = profiling.then(Instant::now);
        let n = self.shared.n_threads;
        let caller_result;
        let caller_busy;
        {
            let _in_job = InJobGuard::enter();
            if n > 1 {
                let job_ref: &Job<'_> = f;
                let job_ptr = &job_ref as *const &Job<'_> as *mut ();
                // Wrapping within the generation bits: a worker would have to sleep through
                // 2^44 regions between two looks at `state` to be confused.
                state.generation = (state.generation + 1) & (u64::MAX >> PART_BITS);
                self.shared.publish(state.generation, job_ptr, profiling);
                caller_result = panic::catch_unwind(AssertUnwindSafe(|| f(0, n)));
                caller_busy = t_start.map(|t| t.elapsed());
                // Parts no worker has claimed yet run here; then wait for the claimed ones,
                // which may still use `job_ref`, even if part 0 panicked.
                let stolen = self.shared.claim_parts(state.generation);
                self.shared.wait_done();
                if profiling {
                    state.stolen += stolen as u64;
                }
            } else {
                caller_result = panic::catch_unwind(AssertUnwindSafe(|| f(0, 1)));
                caller_busy = t_start.map(|t| t.elapsed());
            }
        }
        if let (Some(t0), Some(busy0)) = (t_start, caller_busy) {
            let wall = nanos(t0.elapsed());
            state.regions += 1;
            state.wall_ns += wall;
            for part in 0..n {
                let busy = if part == 0 {
                    nanos(busy0)
                } else {
                    self.shared.busy_ns[part].0.load(Ordering::Relaxed)
                };
                state.busy_ns[part] += busy;
                state.wait_ns[part] += wall.saturating_sub(busy);
            }
        }
        let worker_panic = if self.shared.panicked.swap(false, Ordering::Acquire) {
            lock(&self.shared.panic).take()
        } else {
            None
        };
        drop(state);
        match (caller_result, worker_panic) {
            (Err(payload), _) => Err((0, payload)),
            (Ok(()), Some(p)) => Err(p),
            (Ok(()), None) => Ok(()),
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        let generation = (st.generation + 1) & (u64::MAX >> PART_BITS);
        // No part left to claim (part index n_threads): workers only see the shutdown.
        let closed = (generation << PART_BITS) | self.shared.n_threads as u64;
        self.shared.state.0.store(closed, Ordering::SeqCst);
        {
            let _guard = lock(&self.shared.sleep_lock);
            self.shared.wake.notify_all();
        }
        for handle in self.workers.drain(..) {
            let _ = handle.join();
        }
        drop(self.caller_pin.take());
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Part `part` of `0..len` split into `n_parts` balanced contiguous ranges whose boundaries
/// are multiples of `align` (the last range ends at `len`). Parts differ by at most one
/// `align` block; surplus parts are empty (`len..len`). `align == 0` or `n_parts == 0` are
/// treated as 1.
pub fn split_range(len: usize, n_parts: usize, part: usize, align: usize) -> Range<usize> {
    let align = align.max(1);
    let n_parts = n_parts.max(1);
    if part >= n_parts {
        return len..len;
    }
    let blocks = len.div_ceil(align);
    let (base, extra) = (blocks / n_parts, blocks % n_parts);
    let first_block = part * base + part.min(extra);
    let n_blocks = base + usize::from(part < extra);
    let start = first_block.saturating_mul(align).min(len);
    let end = (first_block + n_blocks).saturating_mul(align).min(len);
    start..end
}
