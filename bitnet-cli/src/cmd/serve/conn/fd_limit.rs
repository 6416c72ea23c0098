//! The open-file limit, which bounds how many connections the server can hold: each is a
//! descriptor, and past the limit `accept` fails and every client, `/health` included, waits
//! in the kernel's backlog. The soft limit is raised to the hard one (as Go's runtime does),
//! and the connection cap kept below it with room for the server's own files.

/// Descriptors kept for the server itself: the model file, the runtime's epoll and wakers,
/// standard streams, the chat-template workers' pipes, a refused connection on its way out.
#[cfg(unix)]
const RESERVED: u64 = 32;

/// Raises the soft limit to the hard one where it can, and returns the most connections it
/// leaves room for (`None`: no limit known).
#[cfg(unix)]
pub fn connection_room() -> Option<usize> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    // `None` is unlimited.
    let below_hard = match (lim.current, lim.maximum) {
        (Some(soft), Some(hard)) => soft < hard,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if below_hard {
        let raised = Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        };
        // macOS refuses an unlimited soft limit for files; the old one then stands.
        if setrlimit(Resource::Nofile, raised).is_ok() {
            lim = raised;
        }
    }
    let soft = lim.current?;
    Some(usize::try_from(soft.saturating_sub(RESERVED).max(1)).unwrap_or(usize::MAX))
}

/// Windows has no per-process limit on open sockets to raise (they are handles, bounded
/// by memory, about 16 million a process): no limit is known, so only `--max-connections`
/// caps the connections.
#[cfg(not(unix))]
pub fn connection_room() -> Option<usize> {
    None
}
