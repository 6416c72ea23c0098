//! CPU affinity for [`super::PinPolicy::Cores`]: which CPUs a pool may use and in what order,
//! and the pin a pool puts on the thread that creates it.
//!
//! Pinning thread 0 pins the *caller's* thread. Two things follow, both handled here with a
//! per-thread record of the mask the thread had before the first of its live pools pinned
//! it:
//! - A second pool created on that thread while the first is alive (two engines of one
//!   process, `bench --interleave`) must not read the one CPU the first pool left it on: it
//!   would pin all its threads there and run them one at a time. [`core_order`] and
//!   [`physical_core_count`] read the recorded mask instead of the current one.
//! - Left pinned after its pools are gone, the thread would see a single CPU from then on,
//!   and every thread it spawns would inherit the one-CPU mask. The last live pool of the
//!   thread puts the recorded mask back when it is dropped (on that thread: a pool dropped
//!   elsewhere cannot reach its creator's record and leaves it as is), whatever the order
//!   the pools are dropped in.

use std::cell::RefCell;
use std::thread::{self, ThreadId};

#[cfg(windows)]
mod windows;

/// The CPUs this process may run on, ordered so that the first entries lie on distinct
/// physical cores (one hyper-thread of each core, then the siblings). Falls back to the OS
/// order when the topology cannot be read; empty when affinity is unsupported.
///
/// The set is the calling thread's affinity mask (threads may each have their own).
pub fn core_order() -> Vec<core_affinity::CoreId> {
    let ids = thread_cpus();
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

/// The CPU the calling thread runs on now (Linux; `None` elsewhere).
pub fn current_cpu() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sched_getcpu takes no argument and returns a CPU number or -1.
        let c = unsafe { libc::sched_getcpu() };
        usize::try_from(c).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Number of distinct physical cores available to this process (at least 1).
pub fn physical_core_count() -> usize {
    let ids = thread_cpus();
    let keys: Option<std::collections::HashSet<_>> =
        ids.iter().map(|id| physical_core_key(id.id)).collect();
    match keys {
        Some(keys) if !keys.is_empty() => keys.len(),
        _ => ids.len().max(1),
    }
}

/// The CPUs the calling thread may use, as they were before any of its live pools pinned it.
fn thread_cpus() -> Vec<core_affinity::CoreId> {
    UNPINNED
        .try_with(|u| u.borrow().as_ref().map(|(saved, _)| saved.cpus()))
        .ok()
        .flatten()
        .unwrap_or_else(|| core_affinity::get_core_ids().unwrap_or_default())
}

/// `(package, core)` of a logical CPU, from Linux sysfs (`(group, core)` on Windows, from
/// `GetLogicalProcessorInformationEx`).
#[cfg(not(windows))]
fn physical_core_key(cpu: usize) -> Option<(u32, u32)> {
    let read = |file: &str| -> Option<u32> {
        let path = format!("/sys/devices/system/cpu/cpu{cpu}/topology/{file}");
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    };
    Some((read("physical_package_id").unwrap_or(0), read("core_id")?))
}

#[cfg(windows)]
fn physical_core_key(cpu: usize) -> Option<(u32, u32)> {
    windows::physical_core_key(cpu)
}

thread_local! {
    /// This thread's mask from before the first of its live pools pinned it, and how many of
    /// its pools that pinned it are alive.
    static UNPINNED: RefCell<Option<(SavedAffinity, usize)>> = const { RefCell::new(None) };
}

/// A pool's pin of the thread that created it (see the module docs).
#[derive(Debug)]
pub(super) struct CallerPin {
    thread: ThreadId,
    /// Whether this pin is counted in the thread's record (false where no mask can be read:
    /// the thread stays pinned, as there is nothing to put back).
    recorded: bool,
}

impl CallerPin {
    /// Pins the calling thread to `core`, first recording its mask if none of its live pools
    /// has; returns the pin and whether pinning worked.
    pub(super) fn pin(core: core_affinity::CoreId) -> (CallerPin, bool) {
        let recorded = UNPINNED
            .try_with(|u| {
                let mut u = u.borrow_mut();
                match u.as_mut() {
                    Some((_, live)) => {
                        *live += 1;
                        true
                    }
                    None => match SavedAffinity::of_current_thread() {
                        Some(saved) => {
                            *u = Some((saved, 1));
                            true
                        }
                        None => false,
                    },
                }
            })
            .unwrap_or(false);
        let pin = CallerPin {
            thread: thread::current().id(),
            recorded,
        };
        (pin, core_affinity::set_for_current(core))
    }
}

impl Drop for CallerPin {
    fn drop(&mut self) {
        if !self.recorded || thread::current().id() != self.thread {
            return;
        }
        let _ = UNPINNED.try_with(|u| {
            let mut u = u.borrow_mut();
            if let Some((saved, live)) = u.as_mut() {
                *live -= 1;
                if *live == 0 {
                    saved.restore();
                    *u = None;
                }
            }
        });
    }
}

/// The affinity mask a thread had before the pool pinned it.
struct SavedAffinity {
    thread: ThreadId,
    #[cfg(target_os = "linux")]
    mask: libc::cpu_set_t,
    #[cfg(windows)]
    group: windows_sys::Win32::System::SystemInformation::GROUP_AFFINITY,
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
    fn of_current_thread() -> Option<SavedAffinity> {
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

    #[cfg(windows)]
    fn of_current_thread() -> Option<SavedAffinity> {
        windows::thread_group_affinity().map(|group| SavedAffinity {
            thread: thread::current().id(),
            group,
        })
    }

    /// Elsewhere (macOS, the BSDs) the mask cannot be read back, so a pinned caller stays
    /// pinned (see `CallerPin::recorded`).
    #[cfg(not(any(target_os = "linux", windows)))]
    fn of_current_thread() -> Option<SavedAffinity> {
        None
    }

    /// The CPUs of the mask.
    #[cfg(target_os = "linux")]
    fn cpus(&self) -> Vec<core_affinity::CoreId> {
        let max = usize::try_from(libc::CPU_SETSIZE).unwrap_or(0);
        (0..max)
            // SAFETY: `CPU_ISSET` reads bit `id` of the mask; `id` is below `CPU_SETSIZE`,
            // the number of bits a `cpu_set_t` holds.
            .filter(|&id| unsafe { libc::CPU_ISSET(id, &self.mask) })
            .map(|id| core_affinity::CoreId { id })
            .collect()
    }

    #[cfg(windows)]
    fn cpus(&self) -> Vec<core_affinity::CoreId> {
        windows::mask_cpus(&self.group)
    }

    #[cfg(not(any(target_os = "linux", windows)))]
    fn cpus(&self) -> Vec<core_affinity::CoreId> {
        core_affinity::get_core_ids().unwrap_or_default()
    }

    /// Puts the mask back if called on the thread it was saved from; returns whether it did.
    fn restore(&self) -> bool {
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
        #[cfg(windows)]
        {
            windows::set_thread_group_affinity(&self.group)
        }
        #[cfg(not(any(target_os = "linux", windows)))]
        {
            false
        }
    }
}
