//! Windows only: what the OS says about memory, where Linux reads `/proc`. The machine's
//! physical memory and its commit limit (physical memory plus the page file, Windows'
//! counterpart of RAM plus swap) from `GlobalMemoryStatusEx`, and this process's peak working
//! set (its peak resident set) from `GetProcessMemoryInfo`. Each is `None` where Windows does
//! not say, as the Linux readings are where `/proc` is missing.
//!
//! FFI with C structs the callee fills in: the unsafe blocks are confined to this file.
#![allow(unsafe_code)]

use windows_sys::Win32::System::ProcessStatus::{GetProcessMemoryInfo, PROCESS_MEMORY_COUNTERS};
use windows_sys::Win32::System::SystemInformation::{GlobalMemoryStatusEx, MEMORYSTATUSEX};
use windows_sys::Win32::System::Threading::GetCurrentProcess;

fn memory_status() -> Option<MEMORYSTATUSEX> {
    let mut status = MEMORYSTATUSEX {
        dwLength: u32::try_from(std::mem::size_of::<MEMORYSTATUSEX>()).ok()?,
        ..Default::default()
    };
    // SAFETY: `status` is a live MEMORYSTATUSEX whose dwLength is its size, as the call
    // requires; it only writes into that struct.
    let ok = unsafe { GlobalMemoryStatusEx(&mut status) };
    (ok != 0).then_some(status)
}

/// The machine's physical memory in bytes (Linux: `MemTotal`).
pub fn total_physical_bytes() -> Option<u64> {
    memory_status().map(|s| s.ullTotalPhys).filter(|&b| b > 0)
}

/// The commit limit in bytes: physical memory plus the page file (Linux: RAM plus swap).
pub fn commit_limit_bytes() -> Option<u64> {
    memory_status()
        .map(|s| s.ullTotalPageFile)
        .filter(|&b| b > 0)
}

/// This process's peak working set in bytes (Linux: `VmHWM`).
pub fn peak_working_set_bytes() -> Option<u64> {
    let mut counters = PROCESS_MEMORY_COUNTERS {
        cb: u32::try_from(std::mem::size_of::<PROCESS_MEMORY_COUNTERS>()).ok()?,
        ..Default::default()
    };
    // SAFETY: the pseudo-handle of this process is always valid; the pointer and size
    // describe `counters`, which the call fills in and which outlives it.
    let ok = unsafe { GetProcessMemoryInfo(GetCurrentProcess(), &mut counters, counters.cb) };
    (ok != 0).then_some(counters.PeakWorkingSetSize as u64)
}
