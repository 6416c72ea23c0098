//! The `[bench]` progress line, shared by the suite and the speculative tests.

use crate::output::Progress;

thread_local! {
    static PROGRESS: std::cell::RefCell<Progress> = std::cell::RefCell::new(Progress::default());
}

/// The `[bench]` progress line on stderr (redrawn on a terminal, one line per step in logs).
pub(super) fn progress(msg: &str) {
    PROGRESS.with(|p| p.borrow_mut().step(&format!("[bench] {msg}")));
}

pub(super) fn clear_progress() {
    PROGRESS.with(|p| p.borrow_mut().clear());
}
