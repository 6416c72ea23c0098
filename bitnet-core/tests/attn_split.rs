//! Decoding one token on 2 threads splits each GQA group's heads over two units when the
//! groups do not divide evenly among the threads, or, for rows past 512 positions, shares
//! out the row's chunks; every head's sums stay its own and chunks merge in one order, so
//! the logits are the bits of the 1-thread run, on every kernel set and KV type (and for
//! the XNOR and int8 query paths).

mod common;

use std::sync::Arc;

use bitnet_core::engine::{BatchItem, Engine, EngineOptions, Logits};
use bitnet_core::kv::KvType;
use bitnet_core::model::Model;
use bitnet_core::synth::SynthSpec;
use bitnet_kernels::Isa;
use common::models::{preset, synth_model};

fn model(isa: Isa, n_embd: usize) -> Arc<Model> {
    let spec = SynthSpec {
        n_embd,
        n_head: n_embd / 64,
        n_head_kv: n_embd / 256,
        n_ctx: 2048,
        ..preset("tiny")
    };
    let (m, path) = synth_model(&format!("attn-split-{isa}"), &spec, Some(isa));
    std::fs::remove_file(&path).ok();
    assert_eq!(m.config().gqa_group(), 4);
    m
}

/// The logits of a `prompt_len`-token prompt and 4 decoded tokens (the prompt's last row,
/// then one row per decoded token).
fn run(
    m: &Arc<Model>,
    threads: usize,
    (k, v, xnor): (KvType, KvType, bool),
    prompt_len: u32,
) -> Vec<Vec<f32>> {
    let opts = EngineOptions {
        threads,
        pin: false,
        n_ctx: prompt_len as usize + 8,
        batch: 64,
        k_type: k,
        v_type: v,
        kv_xnor: xnor,
        ..EngineOptions::default()
    };
    let mut e = Engine::new(m.clone(), &opts).unwrap();
    let seq = e.kv_mut().new_sequence();
    let prompt: Vec<u32> = (0..prompt_len).map(|i| (i * 37 + 5) % 512).collect();
    let mut rows = Vec::new();
    let mut feed = |e: &mut Engine, tokens: &[u32], logits: Logits| {
        let item = BatchItem {
            seq,
            tokens,
            logits,
        };
        e.forward(&[item], |_, _, r| rows.push(r.to_vec())).unwrap();
    };
    // In pieces of the engine's batch (64 tokens), the last one asking for logits.
    let pieces = prompt.len().div_ceil(64);
    for (i, piece) in prompt.chunks(64).enumerate() {
        let logits = if i + 1 == pieces {
            Logits::Last
        } else {
            Logits::None
        };
        feed(&mut e, piece, logits);
    }
    for t in [9u32, 140, 2, 77] {
        feed(&mut e, &[t], Logits::Last);
    }
    rows
}

/// The kernel sets this run may use (`BITNET_KERNEL` caps them).
fn kernel_sets() -> Vec<Isa> {
    let cap = Isa::from_env().expect("BITNET_KERNEL names a runnable set");
    Isa::available().into_iter().filter(|&i| i <= cap).collect()
}

#[test]
fn split_groups_give_the_bits_of_one_thread() {
    for isa in kernel_sets() {
        // 3 KV heads: 3 units a decoded token, which 2 threads cannot share evenly.
        let m = model(isa, 768);
        let mut cases: Vec<(KvType, KvType, bool)> =
            KvType::ALL.into_iter().map(|t| (t, t, false)).collect();
        cases.push((KvType::B1, KvType::Q8_0, true));
        for case in cases {
            let one = run(&m, 1, case, 40);
            let two = run(&m, 2, case, 40);
            assert_eq!(one.len(), 5);
            assert!(one.iter().flatten().all(|x| x.is_finite()));
            assert_eq!(one, two, "{isa} {case:?}");
        }
    }
}

/// Rows past 512 positions are attended in chunks merged after. Decoding one token on 2
/// threads hands the chunks of each row to both threads and merges them on the caller;
/// one thread runs them in turn: the same bits, on every kernel set. The 1,030-token
/// prompt makes rows of three chunks (512, 512 and the rest), so the merge folds a chunk
/// into an already merged pair.
#[test]
fn shared_chunks_give_the_bits_of_one_thread() {
    for isa in kernel_sets() {
        // One KV head, to keep the long prompt cheap; the merge does not depend on the
        // format, so one case for each way keys are scored (float, int8 and XNOR queries),
        // with q4_0's integer-weighted values among them.
        let m = model(isa, 256);
        let cases = [
            (KvType::F16, KvType::F16, false),
            (KvType::Q8_0, KvType::Q4_0, false),
            (KvType::B1, KvType::Q8_0, true),
        ];
        for case in cases {
            let one = run(&m, 1, case, 1030);
            let two = run(&m, 2, case, 1030);
            assert!(one.iter().flatten().all(|x| x.is_finite()));
            assert_eq!(one, two, "{isa} {case:?}");
        }
    }
}
