//! The pool's synchronisation primitives: std's in every real build, loom's when built with
//! `--cfg loom` (`scripts/loom.sh`), so that the loom models (`loom_models.rs`) check the
//! pool's own handshake, not a copy of it that could drift.
//!
//! Only what the sleep/wake and done handshakes use comes from here. [`super::ChunkQueue`]
//! and [`super::DisjointSlice`] keep std's types: they hand out work inside a region and take
//! no part in opening or closing one.

use std::sync::PoisonError;
use std::time::Duration;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Barrier, Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread::{self, JoinHandle};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, fence};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread::{self, JoinHandle};

/// Loom has no barrier (its `Barrier` is a stub that panics). The pool's start barrier only
/// makes the workers' pinning visible before `ThreadPool::new` returns, and models never pin,
/// so under loom it is a no-op: workers may then still be starting when the first region is
/// published, which is one more interleaving for the models to cover, not one less.
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct Barrier;

#[cfg(loom)]
impl Barrier {
    pub(crate) fn new(_n: usize) -> Barrier {
        Barrier
    }

    pub(crate) fn wait(&self) {}
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic happened while it was held; the data it guards
    // (unit, or an Option we overwrite) is still consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Polls `done` for up to `spin` of wall time; returns whether it became true. `spin` zero:
/// returns false at once (the caller sleeps straight away).
#[cfg(not(loom))]
pub(crate) fn spin_until(spin: Duration, mut done: impl FnMut() -> bool) -> bool {
    if spin.is_zero() {
        return false;
    }
    let start = std::time::Instant::now();
    let mut spins = 0u32;
    loop {
        if done() {
            return true;
        }
        spins = spins.wrapping_add(1);
        // Reading the clock costs more than a poll: once every 64.
        if spins.is_multiple_of(64) && start.elapsed() >= spin {
            return false;
        }
        std::hint::spin_loop();
    }
}

/// Polls a model spends before it sleeps when its pool has a non-zero spin time.
#[cfg(loom)]
const LOOM_SPINS: usize = 2;

/// Loom has no clock: a non-zero `spin` becomes [`LOOM_SPINS`] polls with a yield between
/// them (loom requires a spinning thread to yield), so a model still explores a wait that
/// ends while spinning as well as one that ends asleep, at a bounded cost.
#[cfg(loom)]
pub(crate) fn spin_until(spin: Duration, mut done: impl FnMut() -> bool) -> bool {
    if spin.is_zero() {
        return false;
    }
    for _ in 0..LOOM_SPINS {
        if done() {
            return true;
        }
        loom::thread::yield_now();
    }
    false
}
