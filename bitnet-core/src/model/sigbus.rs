//! A clear last word when a mapped model file is truncated or replaced under a running
//! process. Reading a page of a memory map whose file has shrunk raises SIGBUS, which by
//! default kills the process without a message (llama.cpp behaves the same). The handler
//! installed here writes one prepared line naming the file to stderr and exits; it cannot
//! resume, because the bytes the program was reading no longer exist.
//!
//! A signal handler may only call async-signal-safe functions, so everything is prepared
//! before it is installed: the message is formatted into a leaked byte buffer published
//! through one atomic pointer, and the handler only loads that pointer, calls `write(2)` and
//! `_exit(2)`.
//!
//! Windows refuses to truncate a mapped file, and one deleted or replaced keeps its bytes
//! for the map, so the usual cause cannot happen there; a map can still lose its file (a network share or removable drive that goes away),
//! which Windows reports as an `EXCEPTION_IN_PAGE_ERROR`. A vectored exception handler
//! writes the same prepared line with `WriteFile` and ends the process with that exception's
//! code, as an unhandled one would.

// The handler and its installation are FFI by nature (`sigaction`, `write`, `_exit`; on
// Windows `AddVectoredExceptionHandler`, `WriteFile`, `TerminateProcess`); the unsafe blocks
// are confined to this file and each states why it holds.
#![allow(unsafe_code)]

use std::path::Path;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The line the handler writes. Never freed once published, so a handler running while a
/// newer message replaces it still reads valid memory.
struct Message {
    bytes: Box<[u8]>,
}

static MESSAGE: AtomicPtr<Message> = AtomicPtr::new(std::ptr::null_mut());

/// The exit status after the message: the shell's convention for "killed by SIGBUS".
#[cfg(unix)]
const EXIT_STATUS: i32 = 128 + libc::SIGBUS;

/// The text written when `path` is truncated or replaced while mapped.
pub fn sigbus_message(path: &Path) -> String {
    format!(
        "error: bus error reading the memory-mapped file {}: it was truncated or replaced \
         while this process was using it. Keep model files unchanged while they run, or use \
         --no-mmap to read the file into memory instead.\n",
        path.display()
    )
}

/// Installs (once per process) a SIGBUS handler that writes `sigbus_message(path)` for `path`
/// and exits with status 128 + SIGBUS (on Windows: an in-page-error handler that exits with
/// `EXCEPTION_IN_PAGE_ERROR`'s code). A later call only replaces the file named (the last
/// mapped file is the one reported). Returns an error if the handler could not be installed;
/// the process then keeps the default behaviour, which is safe, only silent.
pub fn install_sigbus_message(path: &Path) -> std::io::Result<()> {
    let msg = Box::into_raw(Box::new(Message {
        bytes: sigbus_message(path).into_bytes().into_boxed_slice(),
    }));
    // Published before the handler exists, so the handler never sees a null pointer after a
    // successful installation. The previous message is leaked on purpose (see `Message`).
    MESSAGE.store(msg, Ordering::Release);
    install_handler()
}

#[cfg(unix)]
fn install_handler() -> std::io::Result<()> {
    static INSTALLED: std::sync::OnceLock<std::io::Result<()>> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            // SAFETY: `sigaction` is a plain-old-data C struct; all-zero is a valid value
            // (empty mask, no flags) that the fields set below complete.
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            action.sa_sigaction = on_sigbus as extern "C" fn(libc::c_int) as libc::sighandler_t;
            // SAFETY: `sa_mask` is a valid, exclusively borrowed signal set.
            unsafe { libc::sigemptyset(&mut action.sa_mask) };
            // SAFETY: `action` is fully initialised and outlives the call; the handler only
            // performs async-signal-safe operations (an atomic load, write, _exit).
            let rc = unsafe { libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        })
        .as_ref()
        .map(|_| ())
        .map_err(|e| std::io::Error::new(e.kind(), e.to_string()))
}

#[cfg(windows)]
fn install_handler() -> std::io::Result<()> {
    use windows_sys::Win32::System::Diagnostics::Debug::AddVectoredExceptionHandler;
    static INSTALLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *INSTALLED.get_or_init(|| {
        // SAFETY: the handler is an `extern "system"` function of the required signature
        // that lives for the whole program; it only reads the exception record it is given
        // and the published message, and calls WriteFile and TerminateProcess.
        let handle = unsafe { AddVectoredExceptionHandler(1, Some(on_in_page_error)) };
        !handle.is_null()
    });
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::other(
            "AddVectoredExceptionHandler failed: the in-page-error message is not installed",
        ))
    }
}

/// Neither Unix nor Windows: no handler; a vanished map ends the process as the OS does.
#[cfg(not(any(unix, windows)))]
fn install_handler() -> std::io::Result<()> {
    Ok(())
}

#[cfg(windows)]
unsafe extern "system" fn on_in_page_error(
    info: *mut windows_sys::Win32::System::Diagnostics::Debug::EXCEPTION_POINTERS,
) -> i32 {
    use windows_sys::Win32::Foundation::EXCEPTION_IN_PAGE_ERROR;
    use windows_sys::Win32::Storage::FileSystem::WriteFile;
    use windows_sys::Win32::System::Console::{GetStdHandle, STD_ERROR_HANDLE};
    use windows_sys::Win32::System::Diagnostics::Debug::EXCEPTION_CONTINUE_SEARCH;
    use windows_sys::Win32::System::Threading::{GetCurrentProcess, TerminateProcess};
    // SAFETY: Windows passes a valid EXCEPTION_POINTERS whose record is readable for the
    // duration of the call; both pointers are checked for null first all the same.
    let code = unsafe {
        match info.as_ref().and_then(|i| i.ExceptionRecord.as_ref()) {
            Some(record) => record.ExceptionCode,
            None => return EXCEPTION_CONTINUE_SEARCH,
        }
    };
    if code != EXCEPTION_IN_PAGE_ERROR {
        // Every other exception goes on to the handlers after this one.
        return EXCEPTION_CONTINUE_SEARCH;
    }
    let msg = MESSAGE.load(Ordering::Acquire);
    if !msg.is_null() {
        // SAFETY: a non-null pointer in MESSAGE came from `Box::into_raw` and is never freed,
        // so it points to a live `Message` for the rest of the process.
        let bytes: &[u8] = unsafe { &(*msg).bytes };
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        let mut written = 0u32;
        // SAFETY: the buffer is valid for `len` bytes and `written` outlives the call; a
        // failed write (no console, closed handle) is ignored: nothing better can be done.
        let _ = unsafe {
            WriteFile(
                GetStdHandle(STD_ERROR_HANDLE),
                bytes.as_ptr(),
                len,
                &mut written,
                std::ptr::null_mut(),
            )
        };
    }
    // SAFETY: ends this process; no destructor runs, which is what we want while memory the
    // program was reading has vanished. The exit code is the exception's, as Windows reports
    // a process ended by an unhandled exception.
    unsafe { TerminateProcess(GetCurrentProcess(), code as u32) };
    EXCEPTION_CONTINUE_SEARCH
}

#[cfg(unix)]
extern "C" fn on_sigbus(_signal: libc::c_int) {
    let msg = MESSAGE.load(Ordering::Acquire);
    if !msg.is_null() {
        // SAFETY: a non-null pointer in MESSAGE came from `Box::into_raw` and is never freed,
        // so it points to a live `Message` for the rest of the process.
        let bytes: &[u8] = unsafe { &(*msg).bytes };
        // SAFETY: `write` is async-signal-safe; the buffer is valid for `bytes.len()` bytes.
        // A short or failed write is ignored: nothing better can be done from here.
        let _ = unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
    }
    // SAFETY: `_exit` is async-signal-safe and never returns; no destructor or atexit hook
    // runs, which is what we want while memory the program was reading has vanished.
    unsafe { libc::_exit(EXIT_STATUS) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_the_file_and_the_way_out() {
        let m = sigbus_message(Path::new("/models/m.gguf"));
        assert!(m.contains("/models/m.gguf"), "{m}");
        assert!(m.contains("--no-mmap"), "{m}");
        assert!(m.ends_with('\n'));
    }
}
