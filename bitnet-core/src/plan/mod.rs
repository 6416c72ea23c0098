//! Precision chosen per layer: a [`PrecisionPlan`] says, for every layer, the format of its
//! K cache, of its V cache and the precision of the activations its attention and FFN
//! inputs are quantized to. `bitnet calibrate` measures what each choice costs in accuracy
//! ([`calibrate`]) and picks the plan that saves the most memory under a KL-divergence
//! budget ([`select`]); the front ends run a plan with `--plan` ([`PrecisionPlan::apply`]).
//!
//! Files: `file.rs` the plan as a small JSON file (and as a GGUF metadata string);
//! `select.rs` the choice under a budget; `calibrate.rs` the measurements; `error.rs`.

mod calibrate;
mod error;
mod file;
mod select;

pub use calibrate::{
    Calibration, CalibrationOptions, CalibrationProgress, LayerSensitivity, Setting, SettingKld,
    windows_of,
};
pub use error::PlanError;
pub use file::{PLAN_FORMAT, PLAN_METADATA_KEY, PLAN_VERSION};
pub use select::{Choice, select_plan};

pub use crate::engine::ActPrecision;
use crate::engine::EngineOptions;
use crate::kv::{KvRotate, KvType};

/// One layer's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LayerPlan {
    pub k: KvType,
    pub v: KvType,
    pub acts: ActPrecision,
}

impl Default for LayerPlan {
    /// What runs without a plan: f16 K and V, int8 activations.
    fn default() -> Self {
        LayerPlan {
            k: KvType::F16,
            v: KvType::F16,
            acts: ActPrecision::Int8,
        }
    }
}

/// A plan for every layer of one model shape; see the module docs.
#[derive(Debug, Clone, PartialEq)]
pub struct PrecisionPlan {
    pub layers: Vec<LayerPlan>,
    /// How the low-bit KV rows are stored (`auto`: q4_0 and b1 rotated, as calibrated).
    pub kv_rotate: KvRotate,
    /// What the plan was chosen for, as measured by `bitnet calibrate` (kept for the
    /// record: a plan runs the same without it).
    pub provenance: Option<Provenance>,
}

/// Where a plan came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Provenance {
    /// The model file's name.
    pub model: String,
    /// The KL-divergence budget asked for (mean nats a scored token).
    pub budget_kld: f64,
    /// The plan's own KL divergence on the calibration text, measured with every layer's
    /// settings at once.
    pub measured_kld: f64,
    /// Scored tokens of calibration text behind the figures.
    pub tokens: usize,
}

impl PrecisionPlan {
    /// Every layer at `layer`, no provenance.
    pub fn uniform(n_layer: usize, layer: LayerPlan, kv_rotate: KvRotate) -> PrecisionPlan {
        PrecisionPlan {
            layers: vec![layer; n_layer],
            kv_rotate,
            provenance: None,
        }
    }

    pub fn n_layer(&self) -> usize {
        self.layers.len()
    }

    /// Sets `opts` to run this plan on a model of `n_layer` layers: the per-layer KV formats,
    /// the per-layer activation precision and the rotation. A plan made for another number
    /// of layers is refused: its layers would land on the wrong ones.
    pub fn apply(&self, n_layer: usize, opts: &mut EngineOptions) -> Result<(), PlanError> {
        if self.layers.len() != n_layer {
            return Err(PlanError::LayerCount {
                plan: self.layers.len(),
                model: n_layer,
            });
        }
        opts.kv_layers = self.layers.iter().map(|l| (l.k, l.v)).collect();
        opts.act_layers = if self.layers.iter().all(|l| l.acts == ActPrecision::Int8) {
            Vec::new()
        } else {
            self.layers.iter().map(|l| l.acts).collect()
        };
        opts.kv_rotate = self.kv_rotate;
        Ok(())
    }

    /// KV bytes one token takes in every layer's K and V (rows of `n_kv_heads` heads of
    /// `head_dim`), or `None` where a format does not fit the head dimension.
    pub fn kv_bytes_per_token(&self, n_kv_heads: usize, head_dim: usize) -> Option<u64> {
        self.layers.iter().try_fold(0u64, |sum, l| {
            let row = l.k.row_bytes(head_dim)? + l.v.row_bytes(head_dim)?;
            Some(sum + row * n_kv_heads as u64)
        })
    }

    /// For messages: `4 layers: K q8_0 x3, q4_0 x1; V q4_0 x4; acts int8 x4`.
    pub fn describe(&self) -> String {
        fn runs<T: PartialEq + Copy>(
            items: impl Iterator<Item = T>,
            name: fn(T) -> &'static str,
        ) -> String {
            let mut counts: Vec<(T, usize)> = Vec::new();
            for t in items {
                match counts.iter_mut().find(|(u, _)| *u == t) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((t, 1)),
                }
            }
            counts
                .iter()
                .map(|&(t, n)| format!("{} x{n}", name(t)))
                .collect::<Vec<_>>()
                .join(", ")
        }
        format!(
            "{} layers: K {}; V {}; acts {}",
            self.layers.len(),
            runs(self.layers.iter().map(|l| l.k), KvType::name),
            runs(self.layers.iter().map(|l| l.v), KvType::name),
            runs(self.layers.iter().map(|l| l.acts), ActPrecision::name),
        )
    }

    /// The plan laid over `n_layer` layers: layer `i` takes the settings of the plan's layer
    /// `i * len / n_layer` (the same relative depth). For trying a plan's mix on another
    /// shape of the same family (the benchmarks' 2B-4T shape); a calibrated plan is only
    /// exact for its own model.
    pub fn stretched(&self, n_layer: usize) -> PrecisionPlan {
        let len = self.layers.len().max(1);
        PrecisionPlan {
            layers: (0..n_layer)
                .map(|i| {
                    self.layers
                        .get(i * len / n_layer.max(1))
                        .copied()
                        .unwrap_or_default()
                })
                .collect(),
            kv_rotate: self.kv_rotate,
            provenance: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> PrecisionPlan {
        let l = |k, v, acts| LayerPlan { k, v, acts };
        PrecisionPlan {
            layers: vec![
                l(KvType::F16, KvType::Q8_0, ActPrecision::Int8),
                l(KvType::Q8_0, KvType::Q4_0, ActPrecision::Int8),
                l(KvType::Q4_0, KvType::Q4_0, ActPrecision::Int4),
            ],
            kv_rotate: KvRotate::Auto,
            provenance: None,
        }
    }

    #[test]
    fn bytes_per_token_sum_each_layers_rows() {
        // head_dim 64, 2 KV heads: f16 128 B, q8_0 68 B, q4_0 36 B a head row.
        let want = 2 * ((128 + 68) + (68 + 36) + (36 + 36));
        assert_eq!(plan().kv_bytes_per_token(2, 64), Some(want));
        assert_eq!(
            plan().kv_bytes_per_token(2, 48),
            None,
            "48 is not whole q8_0 blocks"
        );
    }

    #[test]
    fn apply_sets_every_layer_and_refuses_another_depth() {
        let mut opts = EngineOptions::default();
        plan().apply(3, &mut opts).unwrap();
        assert_eq!(opts.kv_layers[1], (KvType::Q8_0, KvType::Q4_0));
        assert_eq!(
            opts.act_layers,
            vec![ActPrecision::Int8, ActPrecision::Int8, ActPrecision::Int4]
        );
        assert_eq!(opts.kv_rotate, KvRotate::Auto);
        let err = plan().apply(4, &mut opts).unwrap_err();
        assert!(
            matches!(err, PlanError::LayerCount { plan: 3, model: 4 }),
            "{err}"
        );
        // All int8: no per-layer list, so the engine's uniform path runs.
        let mut int8 = plan();
        int8.layers[2].acts = ActPrecision::Int8;
        int8.apply(3, &mut opts).unwrap();
        assert!(opts.act_layers.is_empty());
    }

    #[test]
    fn describe_counts_runs() {
        assert_eq!(
            plan().describe(),
            "3 layers: K f16 x1, q8_0 x1, q4_0 x1; V q8_0 x1, q4_0 x2; acts int8 x2, int4 x1"
        );
    }

    #[test]
    fn stretched_keeps_relative_depth() {
        let s = plan().stretched(6);
        let ks: Vec<KvType> = s.layers.iter().map(|l| l.k).collect();
        assert_eq!(
            ks,
            [
                KvType::F16,
                KvType::F16,
                KvType::Q8_0,
                KvType::Q8_0,
                KvType::Q4_0,
                KvType::Q4_0
            ]
        );
        assert_eq!(
            plan().stretched(3),
            PrecisionPlan {
                provenance: None,
                ..plan()
            }
        );
    }
}
