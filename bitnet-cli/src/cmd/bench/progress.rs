//! The `[bench]` progress line, shared by the suite and the speculative tests, and how it
//! counts repetitions.

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

/// "warmup 1/1" for the untimed runs, then "rep 1/5" counting only the timed ones (a
/// warm-up counted as the first round made `-r 3` end at "round 4").
pub(super) fn rep_label(run: usize, warmup: usize, reps: usize) -> String {
    if run < warmup {
        format!("warmup {}/{warmup}", run + 1)
    } else {
        format!("rep {}/{reps}", run - warmup + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rep_labels_count_warmups_and_timed_runs_apart() {
        let labels: Vec<String> = (0..3).map(|r| rep_label(r, 1, 2)).collect();
        assert_eq!(labels, ["warmup 1/1", "rep 1/2", "rep 2/2"]);
        assert_eq!(rep_label(0, 0, 1), "rep 1/1");
    }
}
