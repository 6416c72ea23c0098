//! The measurements behind a plan. Calibration text is cut into windows (as `perplexity`
//! cuts it: BOS first, each window from an empty cache, the second half of each scored); the
//! reference is the run with every layer at f16 K and V and int8 activations. Then, for each
//! layer and each cheaper setting of it (a K format, a V format, int4 activations), only that
//! layer changes and the mean KL divergence of the scored tokens' distributions from the
//! reference's is measured: the layer's sensitivity to that setting. [`Calibration::choose`]
//! picks the plan with the fewest KV bytes whose summed sensitivities fit a budget, then
//! measures that plan as a whole and tightens the sum until the whole fits too.
//!
//! Activation precision is measured but never chosen: int4 inputs run on the int8 kernels
//! (no x86 or ARM dot-product instruction multiplies 4-bit lanes faster than 8-bit ones, and
//! activations are not stored), so they save neither memory nor time on this engine and
//! only cost accuracy. A plan written by hand may still ask for them.

use std::sync::Arc;
use std::time::Instant;

use super::select::{Choice, select_plan};
use super::{ActPrecision, LayerPlan, PlanError, PrecisionPlan, Provenance};
use crate::engine::{EngineOptions, Session};
use crate::kv::{KvRotate, KvType};
use crate::model::Model;

/// What to measure.
#[derive(Debug, Clone)]
pub struct CalibrationOptions {
    /// Threads, batch and kernel settings of every run (its KV and activation settings are
    /// replaced per run; its `n_ctx` by the window).
    pub engine: EngineOptions,
    /// The K and V formats to try on each layer (f16, the reference, is always there).
    pub kv_types: Vec<KvType>,
    /// Measure int4 activations on each layer too.
    pub acts_int4: bool,
    /// How the low-bit formats are stored (`Auto`: q4_0 and b1 rotated).
    pub kv_rotate: KvRotate,
}

impl Default for CalibrationOptions {
    fn default() -> Self {
        CalibrationOptions {
            engine: EngineOptions::default(),
            kv_types: vec![KvType::Q8_0, KvType::Fp8, KvType::Q4_0, KvType::B1],
            acts_int4: true,
            kv_rotate: KvRotate::Auto,
        }
    }
}

/// One cheaper setting of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    K(KvType),
    V(KvType),
    Acts(ActPrecision),
}

impl Setting {
    /// For tables: `K q4_0`, `V b1`, `acts int4`.
    pub fn describe(self) -> String {
        match self {
            Setting::K(t) => format!("K {}", t.name()),
            Setting::V(t) => format!("V {}", t.name()),
            Setting::Acts(a) => format!("acts {}", a.name()),
        }
    }
}

/// A setting's measured cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SettingKld {
    pub setting: Setting,
    /// Mean KL divergence (nats) of the scored tokens from the reference.
    pub kld: f64,
    /// Share of scored tokens whose most likely next token is the reference's.
    pub top1: f64,
}

/// Every measured setting of one layer.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerSensitivity {
    pub layer: usize,
    pub settings: Vec<SettingKld>,
}

impl LayerSensitivity {
    /// The measured KL divergence of `setting` on this layer, if it was measured.
    pub fn kld(&self, setting: Setting) -> Option<f64> {
        self.settings
            .iter()
            .find(|s| s.setting == setting)
            .map(|s| s.kld)
    }
}

/// Where a calibration is, for a progress line.
#[derive(Debug, Clone)]
pub struct CalibrationProgress {
    pub done: usize,
    pub total: usize,
    /// The run just finished (`reference`, `layer 3 K q4_0`, `plan`).
    pub what: String,
    pub secs: f64,
}

/// Windows of `window` tokens cut from `tokens` one after another (at most `max`; all when
/// `max` is 0), each starting with `bos` where the model has one, as `perplexity` cuts them.
pub fn windows_of(tokens: &[u32], window: usize, max: usize, bos: Option<u32>) -> Vec<Vec<u32>> {
    if window < 2 {
        return Vec::new();
    }
    let n = tokens.len() / window;
    let n = if max == 0 { n } else { n.min(max) };
    (0..n)
        .map(|i| {
            let mut w = tokens[i * window..(i + 1) * window].to_vec();
            if let Some(b) = bos {
                w[0] = b;
            }
            w
        })
        .collect()
}

/// The reference distributions and every layer's sensitivities; see the module docs.
pub struct Calibration {
    model: Arc<Model>,
    opts: CalibrationOptions,
    windows: Vec<Vec<u32>>,
    /// Log-probabilities of every scored token, `[scored][n_vocab]`, windows in order.
    reference: Vec<f32>,
    n_vocab: usize,
    /// The measurements, one entry a layer.
    pub layers: Vec<LayerSensitivity>,
}

impl std::fmt::Debug for Calibration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The reference distributions are megabytes of floats: their size says enough.
        f.debug_struct("Calibration")
            .field("opts", &self.opts)
            .field("windows", &self.windows.len())
            .field("scored_tokens", &self.scored_tokens())
            .field("layers", &self.layers)
            .finish_non_exhaustive()
    }
}

/// The largest reference the calibration keeps in memory.
const MAX_REFERENCE_BYTES: u128 = 4 << 30;

impl Calibration {
    /// Runs the reference and every layer's settings over `windows` (each the same length,
    /// 2 or more tokens), reporting after each run.
    pub fn run(
        model: Arc<Model>,
        windows: Vec<Vec<u32>>,
        opts: CalibrationOptions,
        mut progress: impl FnMut(&CalibrationProgress),
    ) -> Result<Calibration, PlanError> {
        let len = windows.first().map_or(0, Vec::len);
        if len < 2 || windows.iter().any(|w| w.len() != len) {
            return Err(PlanError::Calibration(
                "the calibration text needs at least one window of 2 or more tokens, all of \
                 one length"
                    .into(),
            ));
        }
        let n_vocab = model.config.n_vocab;
        let scored = windows.len() * scored_positions(len).len();
        let bytes = scored as u128 * n_vocab as u128 * 4;
        if bytes > MAX_REFERENCE_BYTES {
            return Err(PlanError::Calibration(format!(
                "{scored} scored tokens of a {n_vocab}-token vocabulary need {} MiB of \
                 reference distributions (at most {} MiB): use fewer or shorter windows",
                bytes >> 20,
                MAX_REFERENCE_BYTES >> 20
            )));
        }
        let n_layer = model.config.n_layer;
        let per_layer = 2 * opts.kv_types.len() + usize::from(opts.acts_int4);
        let total = 1 + n_layer * per_layer;
        let mut cal = Calibration {
            model,
            opts,
            windows,
            reference: Vec::with_capacity(scored * n_vocab),
            n_vocab,
            layers: Vec::with_capacity(n_layer),
        };
        let t0 = Instant::now();
        let base = PrecisionPlan::uniform(n_layer, LayerPlan::default(), cal.opts.kv_rotate);
        let mut session = cal.session(&base)?;
        let mut reference = std::mem::take(&mut cal.reference);
        for w in &cal.windows {
            session.reset();
            let first = len / 2;
            session.eval_each(w, |j, row| {
                if j >= first && j + 1 < len {
                    let lse = log_sum_exp(row);
                    reference.extend(row.iter().map(|&x| (f64::from(x) - lse) as f32));
                }
            })?;
        }
        cal.reference = reference;
        drop(session);
        progress(&CalibrationProgress {
            done: 1,
            total,
            what: "reference (f16 K and V, int8 activations)".into(),
            secs: t0.elapsed().as_secs_f64(),
        });
        let mut settings: Vec<Setting> = Vec::with_capacity(per_layer);
        settings.extend(cal.opts.kv_types.iter().map(|&t| Setting::K(t)));
        settings.extend(cal.opts.kv_types.iter().map(|&t| Setting::V(t)));
        if cal.opts.acts_int4 {
            settings.push(Setting::Acts(ActPrecision::Int4));
        }
        let mut done = 1;
        for layer in 0..n_layer {
            let mut measured = Vec::with_capacity(settings.len());
            for &s in &settings {
                let t = Instant::now();
                let mut plan = base.clone();
                let l = &mut plan.layers[layer];
                match s {
                    Setting::K(t) => l.k = t,
                    Setting::V(t) => l.v = t,
                    Setting::Acts(a) => l.acts = a,
                }
                let (kld, top1) = cal.measure(&plan)?;
                measured.push(SettingKld {
                    setting: s,
                    kld,
                    top1,
                });
                done += 1;
                progress(&CalibrationProgress {
                    done,
                    total,
                    what: format!("layer {layer} {}: KLD {kld:.6}", s.describe()),
                    secs: t.elapsed().as_secs_f64(),
                });
            }
            cal.layers.push(LayerSensitivity {
                layer,
                settings: measured,
            });
        }
        Ok(cal)
    }

    /// Scored tokens (windows x scored positions a window).
    pub fn scored_tokens(&self) -> usize {
        self.reference.len() / self.n_vocab.max(1)
    }

    pub fn windows(&self) -> usize {
        self.windows.len()
    }

    /// The options the calibration ran with.
    pub fn options(&self) -> &CalibrationOptions {
        &self.opts
    }

    fn session(&self, plan: &PrecisionPlan) -> Result<Session, PlanError> {
        let mut opts = self.opts.engine.clone();
        opts.n_ctx = self.windows[0].len();
        plan.apply(self.model.config.n_layer, &mut opts)?;
        Ok(Session::new(self.model.clone(), &opts)?)
    }

    /// Mean KL divergence of `plan`'s distributions from the reference's over the scored
    /// tokens, and the share of them with the reference's most likely token.
    pub fn measure(&self, plan: &PrecisionPlan) -> Result<(f64, f64), PlanError> {
        let mut session = self.session(plan)?;
        let len = self.windows[0].len();
        let first = len / 2;
        let (mut sum, mut same, mut n) = (0.0f64, 0u64, 0usize);
        let nv = self.n_vocab;
        for w in &self.windows {
            session.reset();
            session.eval_each(w, |j, row| {
                if j < first || j + 1 >= len {
                    return;
                }
                let base = &self.reference[n * nv..(n + 1) * nv];
                let lse = log_sum_exp(row);
                let mut d = 0.0f64;
                for (&lp, &x) in base.iter().zip(row) {
                    // Rounded to f32 as the reference was, so equal logits give exactly 0.
                    let lq = f64::from((f64::from(x) - lse) as f32);
                    let lp = f64::from(lp);
                    d += lp.exp() * (lp - lq);
                }
                sum += d.max(0.0);
                if argmax(base) == argmax(row) {
                    same += 1;
                }
                n += 1;
            })?;
        }
        let n = n.max(1) as f64;
        Ok((sum / n, same as f64 / n))
    }

    /// The plan with the fewest KV bytes a token whose measured KL divergence (the whole
    /// plan's, on the calibration text) is at most `budget`: the per-layer sensitivities
    /// are summed to choose, the choice is measured whole, and while it exceeds the budget
    /// the sum's allowance shrinks (six tries; then every layer stays f16). Reports each
    /// measurement.
    pub fn choose(
        &self,
        budget: f64,
        model_name: &str,
        mut progress: impl FnMut(&CalibrationProgress),
    ) -> Result<PrecisionPlan, PlanError> {
        if !budget.is_finite() || budget < 0.0 {
            return Err(PlanError::Budget(budget));
        }
        let cfg = &self.model.config;
        let row = |t: KvType| {
            t.row_bytes(cfg.head_dim)
                .map(|b| b * cfg.n_head_kv as u64)
                .ok_or_else(|| {
                    PlanError::Calibration(format!(
                        "the {} KV format does not fit the head dimension {}",
                        t.name(),
                        cfg.head_dim
                    ))
                })
        };
        // Groups: each layer's K, then its V; option 0 is f16 (no divergence).
        let mut groups: Vec<Vec<(KvType, Choice)>> = Vec::with_capacity(2 * self.layers.len());
        for l in &self.layers {
            for side in [Setting::K, Setting::V] {
                let mut g = vec![(
                    KvType::F16,
                    Choice {
                        kld: 0.0,
                        bytes: row(KvType::F16)?,
                    },
                )];
                for &t in &self.opts.kv_types {
                    if let Some(kld) = l.kld(side(t)) {
                        g.push((
                            t,
                            Choice {
                                kld,
                                bytes: row(t)?,
                            },
                        ));
                    }
                }
                groups.push(g);
            }
        }
        let choices: Vec<Vec<Choice>> = groups
            .iter()
            .map(|g| g.iter().map(|(_, c)| *c).collect())
            .collect();
        let n_layer = self.layers.len();
        let mut allowance = budget;
        for _ in 0..6 {
            let t = Instant::now();
            let picks = select_plan(&choices, allowance)?;
            let mut plan =
                PrecisionPlan::uniform(n_layer, LayerPlan::default(), self.opts.kv_rotate);
            for (layer, l) in plan.layers.iter_mut().enumerate() {
                l.k = groups[2 * layer][picks[2 * layer]].0;
                l.v = groups[2 * layer + 1][picks[2 * layer + 1]].0;
            }
            let (kld, _) = self.measure(&plan)?;
            progress(&CalibrationProgress {
                done: 0,
                total: 0,
                what: format!(
                    "plan for budget {budget} (sum of estimates at most {allowance:.6}): {}, \
                     KLD {kld:.6}",
                    plan.describe()
                ),
                secs: t.elapsed().as_secs_f64(),
            });
            if kld <= budget {
                plan.provenance = Some(self.provenance(model_name, budget, kld));
                return Ok(plan);
            }
            allowance *= (budget / kld).min(0.8);
        }
        let mut plan = PrecisionPlan::uniform(n_layer, LayerPlan::default(), self.opts.kv_rotate);
        plan.provenance = Some(self.provenance(model_name, budget, 0.0));
        Ok(plan)
    }

    fn provenance(&self, model_name: &str, budget: f64, kld: f64) -> Provenance {
        Provenance {
            model: model_name.to_owned(),
            budget_kld: budget,
            measured_kld: kld,
            tokens: self.scored_tokens(),
        }
    }
}

/// The positions of a window of `len` tokens that are scored: its second half, the last
/// excepted (it predicts nothing in the window).
fn scored_positions(len: usize) -> std::ops::Range<usize> {
    len / 2..len.saturating_sub(1)
}

fn log_sum_exp(row: &[f32]) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let s: f64 = row.iter().map(|&x| f64::from(x - max).exp()).sum();
    f64::from(max) + s.ln()
}

fn argmax(row: &[f32]) -> usize {
    let mut best = (0, f32::NEG_INFINITY);
    for (i, &x) in row.iter().enumerate() {
        if x > best.1 {
            best = (i, x);
        }
    }
    best.0
}
