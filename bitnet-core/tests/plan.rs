//! Calibration on the shipped (trained) model: every layer's settings measured against the
//! all-f16 int8 reference, plans chosen under budgets and measured whole, and int4
//! activations run through the engine. Random weights would say nothing of sensitivity, so
//! this uses the trained model and its corpus.

use std::path::Path;
use std::sync::Arc;

use bitnet_core::kv::{KvRotate, KvType};
use bitnet_core::plan::{
    ActPrecision, Calibration, CalibrationOptions, LayerPlan, PrecisionPlan, Setting, windows_of,
};
use bitnet_core::{EngineOptions, LoadOptions, Model};

fn model() -> Arc<Model> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/shakespeare.gguf");
    Arc::new(Model::load(path, &LoadOptions::default()).unwrap())
}

fn windows(model: &Model, n: usize, len: usize) -> Vec<Vec<u32>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/text/tinyshakespeare.txt");
    let text = std::fs::read_to_string(path).unwrap();
    let tok = model.tokenizer().unwrap();
    let tokens = tok.encode(&text[..20_000], true, false);
    windows_of(&tokens, len, n, tok.bos_id())
}

fn calibration() -> Calibration {
    let m = model();
    let w = windows(&m, 3, 96);
    assert_eq!(w.len(), 3);
    let opts = CalibrationOptions {
        engine: EngineOptions {
            threads: 2,
            ..EngineOptions::default()
        },
        ..CalibrationOptions::default()
    };
    let mut seen = 0;
    let cal = Calibration::run(m, w, opts, |p| {
        seen += 1;
        assert_eq!(p.done, seen);
    })
    .unwrap();
    // The reference, then 4 layers x (4 K + 4 V + int4).
    assert_eq!(seen, 1 + 4 * 9);
    cal
}

#[test]
fn sensitivities_order_the_formats_and_plans_keep_their_budget() {
    let cal = calibration();
    assert_eq!(cal.scored_tokens(), 3 * (96 - 1 - 48));
    for l in &cal.layers {
        let k = |t| l.kld(Setting::K(t)).unwrap();
        let v = |t| l.kld(Setting::V(t)).unwrap();
        for s in &l.settings {
            assert!(s.kld >= 0.0 && (0.0..=1.0).contains(&s.top1), "{s:?}");
        }
        // Fewer bits, more divergence: sign bits cost far more than 8-bit codes on every
        // layer, and 4-bit codes more than 8-bit ones.
        assert!(
            k(KvType::B1) > 10.0 * k(KvType::Q8_0),
            "layer {}: {l:?}",
            l.layer
        );
        assert!(
            v(KvType::B1) > 10.0 * v(KvType::Q8_0),
            "layer {}: {l:?}",
            l.layer
        );
        assert!(
            k(KvType::Q4_0) > k(KvType::Q8_0),
            "layer {}: {l:?}",
            l.layer
        );
        assert!(l.kld(Setting::Acts(ActPrecision::Int4)).unwrap() > 0.0);
    }

    // The all-f16 plan through per-layer lists is the reference bit for bit.
    let f16 = PrecisionPlan::uniform(4, LayerPlan::default(), KvRotate::Auto);
    assert_eq!(cal.measure(&f16).unwrap(), (0.0, 1.0));

    let bytes = |p: &PrecisionPlan| p.kv_bytes_per_token(2, 64).unwrap();
    let zero = cal.choose(0.0, "shakespeare.gguf", |_| {}).unwrap();
    assert_eq!(zero.layers, f16.layers);
    let huge = cal.choose(100.0, "shakespeare.gguf", |_| {}).unwrap();
    assert!(
        huge.layers
            .iter()
            .all(|l| l.k == KvType::B1 && l.v == KvType::B1)
    );
    let mut last = bytes(&f16);
    for budget in [0.0005, 0.003, 0.02] {
        let plan = cal.choose(budget, "shakespeare.gguf", |_| {}).unwrap();
        let p = plan.provenance.as_ref().unwrap();
        assert_eq!((p.budget_kld, p.tokens), (budget, cal.scored_tokens()));
        // The recorded figure is the plan's own, measured whole, and within budget.
        assert_eq!(cal.measure(&plan).unwrap().0, p.measured_kld);
        assert!(p.measured_kld <= budget, "{budget}: {}", plan.describe());
        assert!(plan.layers.iter().all(|l| l.acts == ActPrecision::Int8));
        assert!(bytes(&plan) <= last, "a larger budget never costs bytes");
        last = bytes(&plan);
    }
    assert!(
        last < bytes(&f16) / 2,
        "0.02 nats buys more than half of f16's bytes"
    );
}

#[test]
fn int4_activations_change_only_the_layer_asked_and_stay_close() {
    let m = model();
    let w = windows(&m, 2, 64);
    let run = |acts: [ActPrecision; 4]| -> Vec<f32> {
        let plan = PrecisionPlan {
            layers: acts
                .iter()
                .map(|&acts| LayerPlan {
                    acts,
                    ..LayerPlan::default()
                })
                .collect(),
            kv_rotate: KvRotate::Off,
            provenance: None,
        };
        let mut opts = EngineOptions {
            threads: 1,
            ..EngineOptions::default()
        };
        plan.apply(4, &mut opts).unwrap();
        let mut s = bitnet_core::Session::new(m.clone(), &opts).unwrap();
        s.eval(&w[0], true).unwrap().to_vec()
    };
    use ActPrecision::{Int4, Int8};
    let base = run([Int8; 4]);
    let one = run([Int8, Int4, Int8, Int8]);
    let all = run([Int4; 4]);
    assert_ne!(base, one, "int4 on layer 1 changes the logits");
    assert_ne!(one, all);
    // The first position's logits depend on every layer, so they differ too; but int4
    // keeps the prediction sensible: the logits stay correlated with int8's.
    let corr = |a: &[f32], b: &[f32]| {
        let n = a.len() as f64;
        let (ma, mb) = (
            a.iter().map(|&x| x as f64).sum::<f64>() / n,
            b.iter().map(|&x| x as f64).sum::<f64>() / n,
        );
        let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
        for (&x, &y) in a.iter().zip(b) {
            let (x, y) = (x as f64 - ma, y as f64 - mb);
            ab += x * y;
            aa += x * x;
            bb += y * y;
        }
        ab / (aa * bb).sqrt()
    };
    assert!(corr(&base, &one) > 0.95, "{}", corr(&base, &one));
    assert!(corr(&base, &all) > 0.8, "{}", corr(&base, &all));
}
