//! The open-file limit, which bounds how many connections a server can hold: each is a
//! descriptor, and past the limit `accept` fails and every client, a health probe included,
//! waits in the kernel's backlog. The soft limit is raised to the hard one (as Go's runtime
//! does), and a connection cap kept below it with room for the process's own files.
// getrlimit/setrlimit through libc, each call in its own small function.
#![allow(unsafe_code)]

/// Descriptors kept for the process itself: the model file, an async runtime's epoll and
/// wakers, standard streams, helper processes' pipes, a refused connection on its way out.
const RESERVED: u64 = 32;

/// Raises the soft limit to the hard one where it can, and returns the most connections it
/// leaves room for (`None`: no limit known).
#[cfg(unix)]
pub fn connection_room() -> Option<usize> {
    let mut lim = get()?;
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        if set(&raised) {
            lim = raised;
        }
    }
    if lim.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // rlim_t is u64 on Linux and macOS, not on every unix
    let soft = lim.rlim_cur as u64;
    Some(soft.saturating_sub(RESERVED).max(1).min(usize::MAX as u64) as usize)
}

#[cfg(not(unix))]
pub fn connection_room() -> Option<usize> {
    None
}

#[cfg(unix)]
fn get() -> Option<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for the call to fill.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    (rc == 0).then_some(lim)
}

#[cfg(unix)]
fn set(lim: &libc::rlimit) -> bool {
    // SAFETY: `lim` points to a valid rlimit; setrlimit only reads it.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, lim) == 0 }
}
