//! Runtime health signals of generated text that users of 1-bit models watch: a model that
//! degrades (a bad conversion, a broken kernel, too low a temperature) loops, and loops show
//! as repeated token 3-grams. The server exports the rate over recent outputs; `generate`
//! and chat can print it for one answer.

use std::collections::{HashSet, VecDeque};

/// The share of a text's token 3-grams that already appeared earlier in it: 0 for text
/// that never repeats itself, towards 1 for a loop. `None` below three tokens.
pub fn repetition_rate_3gram(tokens: &[u32]) -> Option<f64> {
    if tokens.len() < 3 {
        return None;
    }
    let mut seen = HashSet::with_capacity(tokens.len());
    let mut repeated = 0usize;
    let windows = tokens.windows(3);
    let total = windows.len();
    for w in windows {
        if !seen.insert((w[0], w[1], w[2])) {
            repeated += 1;
        }
    }
    Some(repeated as f64 / total as f64)
}

/// The 3-gram repetition rate over the last outputs, weighted by their 3-gram counts (a
/// long looping answer counts more than a short clean one).
#[derive(Clone, Debug)]
pub struct RepetitionWindow {
    /// `(repeated, total)` 3-grams of each recent output, oldest first.
    recent: VecDeque<(usize, usize)>,
    cap: usize,
}

impl RepetitionWindow {
    /// A window over the last `cap` outputs (at least one).
    pub fn new(cap: usize) -> RepetitionWindow {
        RepetitionWindow {
            recent: VecDeque::with_capacity(cap.max(1)),
            cap: cap.max(1),
        }
    }

    /// Adds one output's tokens; outputs shorter than three tokens are not counted.
    pub fn push(&mut self, tokens: &[u32]) {
        let Some(rate) = repetition_rate_3gram(tokens) else {
            return;
        };
        let total = tokens.len() - 2;
        let repeated = (rate * total as f64).round() as usize;
        if self.recent.len() == self.cap {
            self.recent.pop_front();
        }
        self.recent.push_back((repeated, total));
    }

    /// The rate over the window; `None` before any output counted.
    pub fn rate(&self) -> Option<f64> {
        let (r, t) = self
            .recent
            .iter()
            .fold((0, 0), |(r, t), &(a, b)| (r + a, t + b));
        (t > 0).then(|| r as f64 / t as f64)
    }

    /// Outputs in the window.
    pub fn len(&self) -> usize {
        self.recent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.recent.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_repeat_is_zero_and_a_loop_is_high() {
        assert_eq!(repetition_rate_3gram(&[1, 2]), None);
        assert_eq!(repetition_rate_3gram(&[1, 2, 3, 4, 5]), Some(0.0));
        // 1 2 3 1 2 3 1 2 3: 7 trigrams, the first 3 new, the other 4 repeats.
        let r = repetition_rate_3gram(&[1, 2, 3, 1, 2, 3, 1, 2, 3]).unwrap();
        assert!((r - 4.0 / 7.0).abs() < 1e-12, "{r}");
        let looped: Vec<u32> = std::iter::repeat_n(7, 100).collect();
        assert!(repetition_rate_3gram(&looped).unwrap() > 0.98);
    }

    #[test]
    fn window_weights_by_length_and_forgets_old_outputs() {
        let mut w = RepetitionWindow::new(2);
        assert_eq!(w.rate(), None);
        w.push(&[1, 2]);
        assert!(w.is_empty());
        w.push(&[1, 2, 3, 4, 5]); // 0 of 3
        w.push(&[9, 9, 9, 9, 9]); // 2 of 3
        assert!((w.rate().unwrap() - 2.0 / 6.0).abs() < 1e-12);
        w.push(&[9, 9, 9, 9, 9]); // the clean one leaves the window
        assert!((w.rate().unwrap() - 4.0 / 6.0).abs() < 1e-12);
        assert_eq!(w.len(), 2);
    }
}
