//! The GGUF the repository ships is what the converter makes of the shipped checkpoint
//! (`models/shakespeare-hf`, written by `tools/train`), byte for byte: the model in the repo
//! can always be rebuilt from its source.

use std::path::PathBuf;

#[test]
fn the_shipped_gguf_is_reproduced_byte_for_byte() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = bitnet_test_scratch::fresh_dir("shipped").join("shakespeare.gguf");
    bitnet_convert::convert(
        &root.join("models/shakespeare-hf"),
        &out,
        &bitnet_convert::Options::default(),
        &mut |_| {},
    )
    .unwrap();
    let made = std::fs::read(&out).unwrap();
    let shipped = std::fs::read(root.join("models/shakespeare.gguf")).unwrap();
    assert_eq!(made.len(), shipped.len(), "sizes differ");
    assert!(
        made == shipped,
        "the shipped GGUF differs from a fresh conversion"
    );
}

/// `--calibration`: the plan lands in the metadata, reads back from the GGUF as it was, and
/// the model still loads; a plan for another depth is refused before anything is written.
#[test]
fn a_calibration_plan_is_kept_in_the_metadata() {
    use bitnet_core::kv::{KvRotate, KvType};
    use bitnet_core::plan::{ActPrecision, LayerPlan, PrecisionPlan};
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = bitnet_test_scratch::fresh_dir("shipped-calibration");
    let layer = |k, v| LayerPlan {
        k,
        v,
        acts: ActPrecision::Int8,
    };
    let mut plan = PrecisionPlan::uniform(4, layer(KvType::Q8_0, KvType::Q4_0), KvRotate::Auto);
    plan.layers[0] = layer(KvType::F16, KvType::Q8_0);
    let convert = |plan: &PrecisionPlan, out: &std::path::Path| {
        bitnet_convert::convert(
            &root.join("models/shakespeare-hf"),
            out,
            &bitnet_convert::Options {
                calibration: Some(plan.clone()),
                ..bitnet_convert::Options::default()
            },
            &mut |_| {},
        )
        .map_err(|e| e.to_string())
    };
    let out = dir.join("planned.gguf");
    convert(&plan, &out).unwrap();
    assert_eq!(PrecisionPlan::read(&out).unwrap(), plan);
    let model = bitnet_core::Model::load(&out, &bitnet_core::LoadOptions::default()).unwrap();
    assert_eq!(model.config().n_layer, 4);

    let deeper = plan.stretched(6);
    let bad = dir.join("bad.gguf");
    let err = convert(&deeper, &bad).unwrap_err();
    assert!(err.contains("6 layers and the checkpoint 4"), "{err}");
    assert!(!bad.exists());
    // The shipped file keeps no plan: reading one from it says so.
    let err = PrecisionPlan::read(&root.join("models/shakespeare.gguf"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("keeps no plan"), "{err}");
}
