//! Binding weight memory to NUMA nodes: `mbind(MPOL_BIND, nodes, MPOL_MF_MOVE)` over the
//! pages of each node's share of every weight matrix ([`bind_shares`]), so the rows a node's
//! threads compute are read from that node's memory; and `get_mempolicy` to read a page's
//! policy back ([`policy_of`]).
//!
//! Pages: a policy belongs to whole pages, and a share of a matrix rarely starts or ends on
//! a page boundary. **A page goes to the share that holds its first byte**: a share binds
//! from the first page boundary at or after its start to the first boundary at or after its
//! end ([`bound_pages`]). So of a page two shares straddle, the earlier share takes it; the
//! page holding a matrix's first byte belongs to whatever precedes the matrix, the page
//! holding its last byte to its last share. No page is bound twice, and a share too short to
//! hold a page boundary binds nothing.
//!
//! Before binding, each page is read once: a page of a mapped file that is not in memory yet
//! would otherwise land on the node of whichever thread reads it first (the kernel applies a
//! policy to file pages only when it moves them); read, it is moved with the rest. The
//! repacked matrices (private memory, written at load) are in memory already.
//!
//! The model is shared and immutable: binding moves its pages, never changes a byte of
//! them, so it works through `&[u8]`. A policy stays on the address range for the life of
//! the mapping: memory of a dropped model that goes back to the heap keeps it.

// mbind, get_mempolicy and sysconf are calls into the kernel without a safe wrapper:
// `unsafe`, fenced in three small functions with SAFETY comments.
#![allow(unsafe_code)]

use std::ops::Range;

use super::NumaMode;
use super::error::NumaError;
#[cfg(target_os = "linux")]
use super::topology::format_cpulist;

/// The page-aligned addresses `addr..addr + len` binds: from the first page boundary at or
/// after `addr` to the first at or after `addr + len` (a page goes to the range holding its
/// first byte; see the module docs). Empty when no page starts inside the range.
pub fn bound_pages(addr: usize, len: usize, page: usize) -> Range<usize> {
    let up = |a: usize| a.div_ceil(page).saturating_mul(page);
    let start = up(addr);
    start..up(addr.saturating_add(len)).max(start)
}

/// Binds each `(bytes, nodes)` of `shares` to its nodes, as `mode` asks (see the module
/// docs); returns the bytes bound. `numactl` binds nothing (the outer `numactl` keeps the
/// memory policy); off Linux the other modes are [`NumaError::BindUnsupported`].
pub fn bind_shares<'a>(
    mode: NumaMode,
    shares: impl IntoIterator<Item = (&'a [u8], &'a [usize])>,
) -> Result<usize, NumaError> {
    if !mode.binds_memory() {
        return Ok(0);
    }
    #[cfg(target_os = "linux")]
    {
        let page = sys::page_size();
        let with_memory = super::topology::nodes_with_memory();
        let mut bound = 0;
        let mut kept = Vec::new();
        for (bytes, nodes) in shares {
            // A node of CPUs without memory cannot hold pages (mbind would refuse it with
            // EINVAL): its share keeps the default policy, the nearest node's memory.
            kept.clear();
            kept.extend(nodes.iter().copied().filter(|n| {
                with_memory
                    .as_ref()
                    .is_none_or(|m| m.binary_search(n).is_ok())
            }));
            bound += bind_range(bytes, &kept, page)?;
        }
        Ok(bound)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = shares;
        Err(NumaError::BindUnsupported { mode: mode.name() })
    }
}

/// Reads every page of `bytes` that [`bound_pages`] gives it, then binds them to `nodes`.
#[cfg(target_os = "linux")]
fn bind_range(bytes: &[u8], nodes: &[usize], page: usize) -> Result<usize, NumaError> {
    let addr = bytes.as_ptr() as usize;
    let pages = bound_pages(addr, bytes.len(), page);
    if pages.is_empty() || nodes.is_empty() {
        return Ok(0);
    }
    // Every page of `pages` starts inside `bytes` (the last one holds its end).
    for p in pages.clone().step_by(page) {
        std::hint::black_box(bytes[p - addr]);
    }
    let mut mask = vec![0 as libc::c_ulong; nodes.iter().max().map_or(0, |&n| n) / WORD_BITS + 1];
    for &n in nodes {
        mask[n / WORD_BITS] |= 1 << (n % WORD_BITS);
    }
    // The page range lies within `bytes` rounded out to its pages: memory this process has
    // mapped, borrowed for the call.
    sys::mbind(pages.start as *const u8, pages.len(), &mask).map_err(|errno| {
        NumaError::BindRefused {
            call: "mbind",
            errno,
            reason: std::io::Error::from_raw_os_error(errno).to_string(),
            bytes: pages.len(),
            nodes: format_cpulist(nodes),
        }
    })?;
    Ok(pages.len())
}

#[cfg(target_os = "linux")]
const WORD_BITS: usize = libc::c_ulong::BITS as usize;

/// A page's memory policy, as `get_mempolicy` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemPolicy {
    /// The policy's mode.
    pub mode: PolicyMode,
    /// The nodes of the policy's mask (empty for `Default` and `Local`).
    pub nodes: Vec<usize>,
    /// The node the page sits on.
    pub page_node: usize,
}

/// Linux's `MPOL_*` modes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PolicyMode {
    Default,
    Preferred,
    Bind,
    Interleave,
    Local,
    Other(i32),
}

/// The memory policy of the page holding `byte`, and the node it sits on (reading it in,
/// if it was not in memory).
#[cfg(target_os = "linux")]
pub fn policy_of(byte: &u8) -> Result<MemPolicy, NumaError> {
    let addr = byte as *const u8;
    let err = |errno: i32| NumaError::PolicyUnreadable {
        call: "get_mempolicy",
        errno,
        reason: std::io::Error::from_raw_os_error(errno).to_string(),
    };
    // Room for 1024 nodes, Linux's largest configuration.
    let mut mask = [0 as libc::c_ulong; 1024 / WORD_BITS];
    let mode = sys::get_mempolicy(addr, sys::MPOL_F_ADDR, &mut mask).map_err(err)?;
    let page_node =
        sys::get_mempolicy(addr, sys::MPOL_F_ADDR | sys::MPOL_F_NODE, &mut []).map_err(err)?;
    let mode = match mode {
        libc::MPOL_DEFAULT => PolicyMode::Default,
        libc::MPOL_PREFERRED => PolicyMode::Preferred,
        libc::MPOL_BIND => PolicyMode::Bind,
        libc::MPOL_INTERLEAVE => PolicyMode::Interleave,
        libc::MPOL_LOCAL => PolicyMode::Local,
        m => PolicyMode::Other(m),
    };
    let nodes = (0..mask.len() * WORD_BITS)
        .filter(|&n| mask[n / WORD_BITS] >> (n % WORD_BITS) & 1 == 1)
        .collect();
    Ok(MemPolicy {
        mode,
        nodes,
        page_node: usize::try_from(page_node).unwrap_or(0),
    })
}

/// The system calls, each in a function of its own.
#[cfg(target_os = "linux")]
mod sys {
    use libc::{c_int, c_ulong, c_void};

    // From <linux/mempolicy.h>; libc has the modes but not these flags.
    pub(super) const MPOL_MF_MOVE: c_ulong = 1 << 1;
    pub(super) const MPOL_F_NODE: c_ulong = 1 << 0;
    pub(super) const MPOL_F_ADDR: c_ulong = 1 << 1;

    /// The size of a page.
    pub(super) fn page_size() -> usize {
        // SAFETY: sysconf takes a constant and returns a number (-1 if unknown); it touches
        // no memory of ours.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
    }

    /// `mbind(start, len, MPOL_BIND, mask, MPOL_MF_MOVE)`; the errno if refused.
    pub(super) fn mbind(start: *const u8, len: usize, mask: &[c_ulong]) -> Result<(), i32> {
        // The kernel reads `maxnode - 1` bits of the mask.
        let maxnode = (mask.len() * c_ulong::BITS as usize + 1) as c_ulong;
        // SAFETY: mbind reads `mask.len()` words from `mask` (borrowed for the call) and sets
        // the policy of, and moves, the pages `start..start + len`: whole pages of memory
        // this process has mapped (the caller's rounded-out borrow of them). Moving a page
        // keeps its contents and its address, so no reference into it is invalidated and no
        // byte changes; a bad range or mask is an error return, not undefined behaviour.
        let r = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                start.cast_mut().cast::<c_void>(),
                len as c_ulong,
                libc::MPOL_BIND as c_ulong,
                mask.as_ptr(),
                maxnode,
                MPOL_MF_MOVE,
            )
        };
        if r == 0 { Ok(()) } else { Err(errno()) }
    }

    /// `get_mempolicy(&mode, mask, maxnode, addr, flags)`: the mode (with `MPOL_F_NODE`,
    /// the node of `addr`'s page); the errno if refused.
    pub(super) fn get_mempolicy(
        addr: *const u8,
        flags: c_ulong,
        mask: &mut [c_ulong],
    ) -> Result<c_int, i32> {
        let mut mode: c_int = 0;
        let (mask_ptr, maxnode) = if mask.is_empty() {
            (std::ptr::null_mut(), 0)
        } else {
            (
                mask.as_mut_ptr(),
                (mask.len() * c_ulong::BITS as usize) as c_ulong,
            )
        };
        // SAFETY: the kernel writes one int to `mode` and at most `maxnode` bits (`mask`'s
        // words) to `mask_ptr` (null: none), both exclusively borrowed for the call; `addr`
        // is only looked up (with MPOL_F_NODE its page may be read in, as reading the byte
        // the caller borrows would).
        let r = unsafe {
            libc::syscall(
                libc::SYS_get_mempolicy,
                &mut mode as *mut c_int,
                mask_ptr,
                maxnode,
                addr.cast::<c_void>(),
                flags,
            )
        };
        if r == 0 { Ok(mode) } else { Err(errno()) }
    }

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_goes_to_the_range_holding_its_first_byte() {
        let page = 4096;
        // A range starting mid-page leaves that page to what precedes it and takes the page
        // holding its end.
        assert_eq!(
            bound_pages(4096 + 10, 3 * 4096, page),
            8192..4 * 4096 + 4096
        );
        // Two shares meeting mid-page: the earlier one takes the page they share.
        let (a, b) = (100_000usize, 150_000usize);
        let first = bound_pages(a, b - a, page);
        let second = bound_pages(b, 70_000, page);
        assert_eq!(first.end, second.start);
        assert!(first.end > b && first.end - b < page);
        // Aligned ranges bind exactly themselves; a short one inside a page binds nothing.
        assert_eq!(bound_pages(8192, 8192, page), 8192..16384);
        assert!(bound_pages(8192 + 1, 100, page).is_empty());
        assert_eq!(bound_pages(8192 - 1, 2, page), 8192..12288);
    }

    #[test]
    fn numactl_binds_nothing() {
        let bytes = vec![1u8; 1 << 16];
        assert_eq!(
            bind_shares(NumaMode::Numactl, [(&bytes[..], &[0usize][..])]),
            Ok(0)
        );
    }

    /// On this machine's node 0: a buffer's pages are bound and read back so.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_bound_buffer_reads_back_bound_to_its_node() {
        let page = sys::page_size();
        // Large enough for its own mapping: freed, the policy goes with it.
        let bytes = vec![7u8; 4 << 20];
        let n = bind_shares(NumaMode::Distribute, [(&bytes[..], &[0usize][..])]).unwrap();
        assert!(n >= bytes.len() - page && n <= bytes.len() + page, "{n}");
        let inside =
            bound_pages(bytes.as_ptr() as usize, bytes.len(), page).start - bytes.as_ptr() as usize;
        let p = policy_of(&bytes[inside + page]).unwrap();
        assert_eq!(
            p,
            MemPolicy {
                mode: PolicyMode::Bind,
                nodes: vec![0],
                page_node: 0
            }
        );
        assert!(bytes.iter().all(|&b| b == 7), "binding changes no byte");
    }

    /// A node the machine does not have: the kernel refuses, and the error names the call
    /// and its errno. (`bind_shares` leaves out nodes without memory first, such a node
    /// among them: it binds nothing there.)
    #[cfg(target_os = "linux")]
    #[test]
    fn a_refused_binding_names_the_call_and_errno() {
        let bytes = vec![7u8; 1 << 20];
        let none = bind_shares(NumaMode::Isolate, [(&bytes[..], &[1000usize][..])]);
        assert_eq!(none.unwrap(), 0, "a node without memory is left out");
        let e = bind_range(&bytes, &[1000], sys::page_size()).unwrap_err();
        assert!(
            matches!(
                e,
                NumaError::BindRefused {
                    call: "mbind",
                    errno: libc::EINVAL,
                    ..
                }
            ),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("refused mbind (errno 22") && text.contains("node(s) 1000"),
            "{text}"
        );
    }
}
