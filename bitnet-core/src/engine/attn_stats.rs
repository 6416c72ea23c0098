//! Optional statistics of the attention probabilities, taken inside the attention pass
//! where the softmaxed score rows exist and nowhere else:
//!
//! - the mean Shannon entropy (nats) of the decode rows' attention, per layer, on every
//!   `every`-th forward pass that has decode rows (a health signal: attention collapsing
//!   onto a few positions, or spreading flat, shows up here before the text degrades);
//! - the attention mass each cached position of a sequence receives, summed over layers,
//!   heads and every query row that reads it (what H2O's heavy-hitter eviction ranks by).
//!
//! Both are off by default, and off costs one `Option` check per attention unit. The
//! attention units run on the pool's threads, so each writes only its own slots: one
//! entropy slot per unit, and one mass stripe per thread, indexed by the position's place
//! in the batch's block tables (`table start * block_tokens + position`, disjoint between
//! the batch's sequences). Both are reduced after the parallel section, on one thread, into
//! memory allocated when the statistic was turned on, so a decode step allocates nothing.

use super::batch::Batch;

/// Weight of a new sample in the entropy's exponential moving average. An EMA rather than
/// a mean over the whole run because the gauge is for watching a long-running server or
/// generation drift (a loop collapses attention within a few hundred tokens, and a mean
/// since start-up would hide it): with one sample every 16 decode steps the average
/// follows a change within about 8 samples (128 tokens) and smooths step-to-step noise.
pub const ENTROPY_EMA_WEIGHT: f32 = 0.125;

/// Shannon entropy (nats) of the probability row `p` (`0 ln 0 = 0`), accumulated in f64 so
/// a row of thousands of positions keeps its precision.
pub(super) fn row_entropy(p: &[f32]) -> f32 {
    let mut h = 0.0f64;
    for &x in p {
        if x > 0.0 {
            let x = f64::from(x);
            h -= x * x.ln();
        }
    }
    h as f32
}

/// What one attention call fills besides its output (see [`super::attention::attention`]).
#[derive(Debug, Default)]
pub(super) struct AttnProbe<'a> {
    /// One slot per (token, KV-head group) unit: the summed entropy of the unit's rows,
    /// written for decode tokens only.
    pub(super) entropy: Option<&'a mut [f32]>,
    /// One stripe of `mass_stride` floats per thread: each row's probabilities are added at
    /// `table start * block_tokens + position`.
    pub(super) mass: Option<&'a mut [f32]>,
    pub(super) mass_stride: usize,
}

/// The engine's statistics state; see the module docs.
#[derive(Debug, Default)]
pub(super) struct AttnStats {
    /// Sample every this many decode passes; 0 = entropy off.
    every: usize,
    /// Forward passes with decode rows so far.
    steps: u64,
    /// Whether the pass under way samples entropy.
    sampling: bool,
    /// Per-unit entropy sums of the pass under way (`chunk * units per token`).
    units: Vec<f32>,
    /// This pass's per-layer means.
    step: Vec<f32>,
    /// The moving average per layer, and how many samples it has seen.
    ema: Vec<f32>,
    samples: u64,
    /// Whether the pass under way accumulates mass.
    massing: bool,
    /// Per-thread mass stripes.
    mass: Vec<f32>,
    mass_stride: usize,
}

impl AttnStats {
    /// State for `n_layer` layers and up to `max_units` attention units per pass; entropy is
    /// sampled every `every` decode passes (0 = off; its buffers are then not allocated).
    pub(super) fn new(every: usize, n_layer: usize, max_units: usize) -> AttnStats {
        let on = every > 0;
        AttnStats {
            every,
            units: if on { vec![0.0; max_units] } else { Vec::new() },
            step: if on { vec![0.0; n_layer] } else { Vec::new() },
            ema: if on { vec![0.0; n_layer] } else { Vec::new() },
            ..AttnStats::default()
        }
    }

    /// Sets up the pass laid out in `batch`: whether it samples entropy, and whether it
    /// accumulates mass (`track`: some sequence of the batch asks for it). The mass stripes
    /// grow (rarely: the first tracked pass, or forked sequences making the block tables
    /// longer than the pool) and their used part is zeroed.
    pub(super) fn begin_pass(&mut self, batch: &Batch, track: bool, nt: usize, bt: usize) {
        let decode = batch.decode.iter().any(|&d| d);
        self.sampling = self.every > 0 && decode && self.steps.is_multiple_of(self.every as u64);
        if decode {
            self.steps += 1;
        }
        self.massing = track;
        if track {
            let need = batch.tables.len() * bt;
            if self.mass_stride < need || self.mass.len() < nt * self.mass_stride {
                self.mass_stride = self.mass_stride.max(need);
                self.mass = vec![0.0; nt * self.mass_stride];
            }
            for stripe in self.mass.chunks_exact_mut(self.mass_stride) {
                stripe[..need].fill(0.0);
            }
        }
    }

    /// The buffers the attention call of one layer fills.
    pub(super) fn probe(&mut self) -> AttnProbe<'_> {
        AttnProbe {
            entropy: self.sampling.then_some(&mut self.units[..]),
            mass: self.massing.then_some(&mut self.mass[..]),
            mass_stride: self.mass_stride,
        }
    }

    /// Reduces layer `l`'s unit entropies to the mean over the decode rows' heads.
    pub(super) fn end_layer(&mut self, l: usize, batch: &Batch, units_per_tok: usize) {
        if !self.sampling {
            return;
        }
        let gs_rows = |t: usize| &self.units[t * units_per_tok..(t + 1) * units_per_tok];
        let (mut sum, mut n) = (0.0f64, 0usize);
        for (t, _) in batch.decode.iter().enumerate().filter(|&(_, &d)| d) {
            sum += gs_rows(t).iter().map(|&h| f64::from(h)).sum::<f64>();
            n += 1;
        }
        self.step[l] = if n == 0 { 0.0 } else { (sum / n as f64) as f32 };
    }

    /// Folds a sampled pass into the moving average (`n_head` rows per decode token).
    pub(super) fn end_pass(&mut self, n_head: usize) {
        if !self.sampling {
            return;
        }
        let first = self.samples == 0;
        for (avg, &s) in self.ema.iter_mut().zip(&self.step) {
            let s = s / n_head as f32;
            *avg = if first {
                s
            } else {
                *avg + ENTROPY_EMA_WEIGHT * (s - *avg)
            };
        }
        self.samples += 1;
    }

    /// The per-layer moving averages, once at least one pass was sampled.
    pub(super) fn entropy(&self) -> Option<&[f32]> {
        (self.every > 0 && self.samples > 0).then_some(&self.ema[..])
    }

    pub(super) fn entropy_samples(&self) -> u64 {
        self.samples
    }

    pub(super) fn entropy_every(&self) -> usize {
        self.every
    }

    /// Adds the mass the pass gave positions `0..into.len()` of the sequence whose block
    /// table starts at `table_start` (summing the threads' stripes).
    pub(super) fn add_mass(&self, table_start: usize, bt: usize, into: &mut [f32]) {
        if !self.massing {
            return;
        }
        let (base, n) = (table_start * bt, into.len());
        for stripe in self.mass.chunks_exact(self.mass_stride) {
            for (m, &s) in into.iter_mut().zip(&stripe[base..base + n]) {
                *m += s;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_rows_have_entropy_ln_n_and_one_hot_zero() {
        for n in [1usize, 2, 7, 100, 4096] {
            let p = vec![1.0 / n as f32; n];
            let h = row_entropy(&p);
            assert!((h - (n as f32).ln()).abs() < 1e-4, "n {n}: {h}");
        }
        let mut one_hot = vec![0.0f32; 9];
        one_hot[3] = 1.0;
        assert_eq!(row_entropy(&one_hot), 0.0);
    }

    #[test]
    fn the_average_starts_at_the_first_sample_and_moves_by_its_weight() {
        let batch = Batch {
            decode: vec![true, false],
            ..Batch::default()
        };
        let mut s = AttnStats::new(1, 1, 4);
        assert!(s.entropy().is_none());
        // Two tokens of 2 units each; only the decode token's units count.
        for (i, h) in [1.0f32, 3.0, 100.0, 100.0].into_iter().enumerate() {
            s.units[i] = h;
        }
        s.sampling = true;
        s.end_layer(0, &batch, 2);
        s.end_pass(4);
        assert_eq!(s.entropy(), Some(&[1.0f32][..]), "(1 + 3) / 4 heads");
        s.units[..2].copy_from_slice(&[5.0, 7.0]);
        s.end_layer(0, &batch, 2);
        s.end_pass(4);
        let want = 1.0 + ENTROPY_EMA_WEIGHT * (3.0 - 1.0);
        assert!((s.entropy().unwrap()[0] - want).abs() < 1e-6);
    }
}
