//! Ctrl-C and SIGTERM, one handler for the whole binary (the signal crate allows one). On
//! Windows the same handler gets Ctrl-C, Ctrl-Break and the console being closed (ctrlc's
//! console control handler); a temporary still open there is removed all the same (Rust
//! opens files sharing deletion), gone once the process exits.
//!
//! By default an interrupt removes the temporaries of files being written (registered by
//! [`crate::output_file`] in [`pending_temporaries`]) and exits with status 130. A command that wants to handle
//! Ctrl-C itself (chat: stop the reply, keep the conversation) turns [`catch`] on while it
//! runs work that can be stopped, and polls [`take`].

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

static CATCH: AtomicBool = AtomicBool::new(false);
static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Temporaries not committed yet: what the interrupt handler removes.
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The temporaries an interrupt removes (output files not committed yet), locked.
pub fn pending_temporaries() -> MutexGuard<'static, Vec<PathBuf>> {
    // A panic while the lock was held cannot leave the list inconsistent (push/retain only).
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Removes every temporary not committed yet (the interrupt handler's clean-up).
fn remove_pending_temporaries() {
    for path in pending_temporaries().iter() {
        let _ = std::fs::remove_file(path);
    }
}

/// Installs the handler once; later calls do nothing.
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let installed = ctrlc::set_handler(|| {
            if CATCH.load(Ordering::SeqCst) {
                REQUESTED.store(true, Ordering::SeqCst);
                return;
            }
            remove_pending_temporaries();
            let _ = writeln!(std::io::stderr(), "\ninterrupted");
            std::process::exit(130);
        });
        if let Err(e) = installed {
            // Not fatal: files are still removed on every error path, just not on Ctrl-C.
            let _ = writeln!(
                std::io::stderr(),
                "warning: cannot handle Ctrl-C ({e}); an interrupted run may leave a temporary \
                 file, and Ctrl-C ends a chat instead of stopping the reply"
            );
        }
    });
}

/// While on, an interrupt is recorded for [`take`] instead of ending the process.
pub fn catch(on: bool) {
    install();
    REQUESTED.store(false, Ordering::SeqCst);
    CATCH.store(on, Ordering::SeqCst);
}

/// Whether an interrupt came since the last call (and forgets it).
pub fn take() -> bool {
    REQUESTED.swap(false, Ordering::SeqCst)
}

/// Whether an interrupt came and was not taken yet (a reply checks it before printing each
/// piece, so nothing prints after the `^C`).
pub fn pending() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}
