//! A log line that a flood cannot turn into a flood of lines: the first one is written, then
//! at most one per interval, with a count of those held back.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::output::note;

const INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
pub struct Throttled {
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttled {
    pub fn note(&self, line: impl FnOnce() -> String) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if s.0.is_some_and(|last| now.duration_since(last) < INTERVAL) {
            s.1 += 1;
            return;
        }
        let held = std::mem::take(&mut s.1);
        s.0 = Some(now);
        drop(s);
        if held > 0 {
            note!("{} ({held} more like it since the last such line)", line());
        } else {
            note!("{}", line());
        }
    }
}
