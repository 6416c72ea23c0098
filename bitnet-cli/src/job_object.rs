//! Windows only: the memory cap of a template worker (`bitnet __render-template`), the
//! counterpart of the `RLIMIT_AS` it sets on Unix. The worker puts itself in a Job Object
//! whose per-process committed-memory limit is the budget, before it reads anything; an
//! allocation past it fails, which aborts the worker alone (Rust prints the same
//! "memory allocation of N bytes failed" line the parent looks for). Jobs nest since
//! Windows 8, so a worker started inside a job (a CI runner's, a service's) gets the
//! stricter of the two limits, as a hard `RLIMIT_AS` would keep.
//!
//! The one `unsafe` of this binary: Win32 calls with raw handles and a C struct.
#![allow(unsafe_code)]

use windows_sys::Win32::Foundation::CloseHandle;
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JOB_OBJECT_LIMIT_PROCESS_MEMORY,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JobObjectExtendedLimitInformation,
    SetInformationJobObject,
};
use windows_sys::Win32::System::Threading::GetCurrentProcess;

/// Caps the committed memory of this process at `bytes`; the job lives as long as the
/// process (its handle is kept open on purpose, closed only by the process's end).
pub fn limit_own_memory(bytes: u64) -> std::io::Result<()> {
    let cap = usize::try_from(bytes).unwrap_or(usize::MAX);
    // SAFETY: no security attributes and no name (both null): an anonymous job, returned
    // as a handle this function owns, or null on failure.
    let job = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
    if job.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    let mut info = JOBOBJECT_EXTENDED_LIMIT_INFORMATION::default();
    info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_PROCESS_MEMORY;
    info.ProcessMemoryLimit = cap;
    let size = u32::try_from(std::mem::size_of_val(&info)).unwrap_or(u32::MAX);
    // SAFETY: `job` is the live handle made above; the pointer and size describe `info`, the
    // struct this information class reads, which outlives the call.
    let set = unsafe {
        SetInformationJobObject(
            job,
            JobObjectExtendedLimitInformation,
            std::ptr::from_ref(&info).cast(),
            size,
        )
    };
    // SAFETY: both handles are valid: `job` as above, and the pseudo-handle of this process.
    if set == 0 || unsafe { AssignProcessToJobObject(job, GetCurrentProcess()) } == 0 {
        let err = std::io::Error::last_os_error();
        // SAFETY: `job` is a live handle this function owns and no longer uses.
        unsafe { CloseHandle(job) };
        return Err(err);
    }
    Ok(())
}
