//! Decoding one token on 2 threads splits each GQA group's heads over two units when the
//! groups do not divide evenly among the threads; every head's sums stay its own, so the
//! logits are the bits of the 1-thread run, on every kernel set and KV type (and for the
//! XNOR and int8 query paths).

mod common;

use std::sync::Arc;

use bitnet_core::kv::KvType;
use bitnet_core::model::{BatchItem, Engine, EngineOptions, LoadOptions, Logits, Model};
use bitnet_core::synth::{SynthSpec, write_model};
use bitnet_kernels::Isa;

/// Groups of 4 query heads over 3 KV heads of 64: 3 units a decoded token, which 2 threads
/// cannot share evenly.
fn model(isa: Isa) -> Arc<Model> {
    let path = common::tmp_dir(&format!("attn-split-{isa}")).join("model.gguf");
    let spec = SynthSpec {
        n_embd: 768,
        n_head: 12,
        n_head_kv: 3,
        ..SynthSpec::preset("tiny").expect("preset")
    };
    write_model(&spec, &path, |_, _| {}).unwrap();
    let opts = LoadOptions {
        isa: Some(isa),
        ..LoadOptions::default()
    };
    let m = Arc::new(Model::load(&path, &opts).unwrap());
    std::fs::remove_file(&path).ok();
    assert_eq!(m.config().gqa_group(), 4);
    m
}

/// The logits of a 40-token prompt and 4 decoded tokens (the prompt's last row, then one
/// row per decoded token).
fn run(m: &Arc<Model>, threads: usize, k: KvType, v: KvType, xnor: bool) -> Vec<Vec<f32>> {
    let opts = EngineOptions {
        threads,
        pin: false,
        n_ctx: 128,
        batch: 64,
        k_type: k,
        v_type: v,
        kv_xnor: xnor,
        ..EngineOptions::default()
    };
    let mut e = Engine::new(m.clone(), &opts).unwrap();
    let seq = e.new_sequence();
    let prompt: Vec<u32> = (0..40).map(|i| (i * 37 + 5) % 512).collect();
    let mut rows = Vec::new();
    let mut feed = |e: &mut Engine, tokens: &[u32]| {
        let item = BatchItem {
            seq,
            tokens,
            logits: Logits::Last,
        };
        e.forward(&[item], |_, _, r| rows.push(r.to_vec())).unwrap();
    };
    feed(&mut e, &prompt);
    for t in [9u32, 140, 2, 77] {
        feed(&mut e, &[t]);
    }
    rows
}

#[test]
fn split_groups_give_the_bits_of_one_thread() {
    let isas: Vec<Isa> = Isa::available()
        .into_iter()
        .filter(|&i| i <= Isa::from_env().expect("BITNET_KERNEL names a runnable set"))
        .collect();
    for isa in isas {
        let m = model(isa);
        let mut cases: Vec<(KvType, KvType, bool)> =
            KvType::ALL.into_iter().map(|t| (t, t, false)).collect();
        cases.push((KvType::B1, KvType::Q8_0, true));
        for (k, v, xnor) in cases {
            let one = run(&m, 1, k, v, xnor);
            let two = run(&m, 2, k, v, xnor);
            assert_eq!(one.len(), 5);
            assert!(one.iter().flatten().all(|x| x.is_finite()));
            assert_eq!(one, two, "{isa} K {k:?} V {v:?} xnor {xnor}");
        }
    }
}
