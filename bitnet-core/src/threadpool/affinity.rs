//! CPU affinity for [`super::PinPolicy::Cores`]: which CPUs a pool may use and in what order,
//! and a saved copy of the calling thread's affinity mask, put back when the pool is dropped.
//!
//! Pinning thread 0 pins the *caller's* thread. Left pinned after the pool is gone, that
//! thread would see a single CPU from then on: the next pool it creates would find one core
//! in [`core_order`] and pin all its threads there (running them one at a time), and every
//! thread it spawns would inherit the one-CPU mask. So the mask is saved before pinning and
//! restored by the pool's `Drop` (on the same thread; a pool dropped elsewhere cannot reach
//! its creator's mask and leaves it as is).

use std::thread::{self, ThreadId};

/// The CPUs this process may run on, ordered so that the first entries lie on distinct
/// physical cores (one hyper-thread of each core, then the siblings). Falls back to the OS
/// order when the topology cannot be read; empty when affinity is unsupported.
///
/// The set is the calling thread's affinity mask (threads may each have their own).
pub fn core_order() -> Vec<core_affinity::CoreId> {
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    let mut keys = Vec::with_capacity(ids.len());
    for id in &ids {
        match physical_core_key(id.id) {
            Some(key) => keys.push(key),
            None => return ids,
        }
    }
    let mut seen = std::collections::HashSet::new();
    let (mut first, mut rest) = (Vec::new(), Vec::new());
    for (id, key) in ids.into_iter().zip(keys) {
        if seen.insert(key) {
            first.push(id);
        } else {
            rest.push(id);
        }
    }
    first.extend(rest);
    first
}

/// Number of distinct physical cores available to this process (at least 1).
pub fn physical_core_count() -> usize {
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    let keys: Option<std::collections::HashSet<_>> =
        ids.iter().map(|id| physical_core_key(id.id)).collect();
    match keys {
        Some(keys) if !keys.is_empty() => keys.len(),
        _ => ids.len().max(1),
    }
}

/// `(package, core)` of a logical CPU, from Linux sysfs.
fn physical_core_key(cpu: usize) -> Option<(u32, u32)> {
    let read = |file: &str| -> Option<u32> {
        let path = format!("/sys/devices/system/cpu/cpu{cpu}/topology/{file}");
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    };
    Some((read("physical_package_id").unwrap_or(0), read("core_id")?))
}

/// The affinity mask a thread had before the pool pinned it.
pub(super) struct SavedAffinity {
    thread: ThreadId,
    #[cfg(target_os = "linux")]
    mask: libc::cpu_set_t,
}

impl std::fmt::Debug for SavedAffinity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SavedAffinity")
            .field("thread", &self.thread)
            .finish_non_exhaustive()
    }
}

impl SavedAffinity {
    /// The calling thread's current mask (`None` where it cannot be read).
    #[cfg(target_os = "linux")]
    pub(super) fn of_current_thread() -> Option<SavedAffinity> {
        // SAFETY: `cpu_set_t` is a plain bit array, valid when zeroed.
        let mut mask: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: pid 0 is the calling thread; the pointer and size describe `mask`, which
        // outlives the call.
        let rc = unsafe {
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut mask)
        };
        (rc == 0).then(|| SavedAffinity {
            thread: thread::current().id(),
            mask,
        })
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn of_current_thread() -> Option<SavedAffinity> {
        None
    }

    /// Puts the mask back if called on the thread it was saved from; returns whether it did.
    pub(super) fn restore(&self) -> bool {
        if thread::current().id() != self.thread {
            return false;
        }
        #[cfg(target_os = "linux")]
        {
            // SAFETY: pid 0 is the calling thread; the pointer and size describe the saved
            // mask, a valid `cpu_set_t` read by `sched_getaffinity`.
            let rc = unsafe {
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.mask)
            };
            rc == 0
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }
}
