//! The multi-sequence engine: a sequence evaluated inside a batch of others gives the
//! logits it gives alone; forks share blocks and copy on write; the prefix cache makes a
//! repeated prompt evaluate only its new tokens.

mod common;

use common::sched::{eval_last, seeded_tokens};

use std::path::PathBuf;
use std::sync::Arc;

use bitnet_core::engine::{BatchItem, Logits};
use bitnet_core::kv::SeqId;
use bitnet_core::model::Model;
use bitnet_kernels::Isa;
use common::models::{engine, preset, synth_model};

/// Grouped-query attention (4 heads on 2 KV heads) so the grouped kernels run.
fn model(tag: &str, isa: Isa) -> (Arc<Model>, PathBuf) {
    synth_model(tag, &preset("tiny-bitnet"), Some(isa))
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Largest absolute difference relative to the largest magnitude in `b`.
fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    common::metrics::max_rel_diff(b, a)
}

/// The float budget of a logits row computed by a different SIMD path (head products of
/// several rows against one): the engine tests' prefill-vs-decode bound.
const SIMD_TOL: f32 = 2e-3;

#[test]
fn a_sequence_in_a_batch_of_eight_matches_it_alone() {
    for isa in Isa::available() {
        let (m, path) = model(&format!("batch-{}", isa.name()), isa);
        let v = m.n_vocab();
        // Eight sequences of different prompt lengths, so they decode at different
        // positions (and cross block boundaries at different steps).
        let lens = [1usize, 5, 16, 17, 31, 40, 3, 64];
        let prompts: Vec<Vec<u32>> = lens
            .iter()
            .enumerate()
            .map(|(i, &n)| seeded_tokens(n, i as u32 + 1, v))
            .collect();
        let steps = 6;
        let streams: Vec<Vec<u32>> = (0..8).map(|i| seeded_tokens(steps, 50 + i, v)).collect();

        // Alone: each sequence on a fresh engine, prompt then one token at a time.
        let mut alone: Vec<Vec<Vec<f32>>> = Vec::new();
        for (p, s) in prompts.iter().zip(&streams) {
            let mut e = engine(&m, 256, 32, 2);
            let seq = e.kv_mut().new_sequence();
            let mut rows = vec![eval_last(&mut e, seq, p, 32)];
            for &t in s {
                rows.push(eval_last(&mut e, seq, &[t], 1));
            }
            alone.push(rows);
        }

        // Together: one engine; prompts packed into shared forward passes (chunks of
        // several sequences in one batch), then every step decodes all eight at once.
        for threads in [1, 2] {
            let mut e = engine(&m, 1024, 48, threads);
            let seqs: Vec<SeqId> = (0..8).map(|_| e.kv_mut().new_sequence()).collect();
            let mut got: Vec<Vec<Vec<f32>>> = vec![Vec::new(); 8];
            let mut fed = [0usize; 8];
            while (0..8).any(|i| fed[i] < lens[i]) {
                let mut items = Vec::new();
                let mut idx = Vec::new();
                let mut used = 0;
                for i in 0..8 {
                    let n = (lens[i] - fed[i]).min(48 - used).min(13);
                    if n == 0 {
                        continue;
                    }
                    let end = fed[i] + n;
                    items.push(BatchItem {
                        seq: seqs[i],
                        tokens: &prompts[i][fed[i]..end],
                        logits: if end == lens[i] {
                            Logits::Last
                        } else {
                            Logits::None
                        },
                    });
                    idx.push((i, n));
                    used += n;
                }
                e.forward(&items, |item, _, row| got[idx[item].0].push(row.to_vec()))
                    .unwrap();
                for (i, n) in idx {
                    fed[i] += n;
                }
            }
            #[allow(clippy::needless_range_loop)] // `step` indexes every sequence's stream
            for step in 0..steps {
                let items: Vec<BatchItem<'_>> = (0..8)
                    .map(|i| BatchItem {
                        seq: seqs[i],
                        tokens: std::slice::from_ref(&streams[i][step]),
                        logits: Logits::Last,
                    })
                    .collect();
                e.forward(&items, |item, _, row| got[item].push(row.to_vec()))
                    .unwrap();
            }
            for i in 0..8 {
                assert_eq!(got[i].len(), steps + 1);
                for (r, (a, b)) in alone[i].iter().zip(&got[i]).enumerate() {
                    let what = format!("{isa} t{threads} sequence {i} row {r}");
                    if isa == Isa::Scalar {
                        assert_eq!(bits(a), bits(b), "{what}: not bit-identical");
                    } else {
                        let d = max_rel_diff(b, a);
                        assert!(d <= SIMD_TOL, "{what}: differs by {d}");
                    }
                }
            }
        }
        std::fs::remove_file(&path).ok();
    }
}

#[test]
fn forks_share_blocks_and_copy_on_write() {
    let (m, path) = model("fork", Isa::Scalar);
    let v = m.n_vocab();
    let mut e = engine(&m, 256, 64, 1);
    let bt = e.kv().block_tokens();
    let a = e.kv_mut().new_sequence();
    let prompt = seeded_tokens(2 * bt + bt / 2, 3, v); // two full blocks and half of a third
    eval_last(&mut e, a, &prompt, 64);
    assert_eq!(e.kv().stats().pool.used, 3);
    let b = e.kv_mut().fork(a).unwrap();
    assert_eq!(e.kv().stats().pool.used, 3, "a fork shares every block");
    assert_eq!(
        e.kv().sequence(b).unwrap().blocks(),
        e.kv().sequence(a).unwrap().blocks()
    );
    // Writing into the shared, half-filled block copies it for the writer only.
    let la = eval_last(&mut e, b, &[7], 1);
    assert_eq!(
        e.kv().stats().pool.used,
        4,
        "the first write copies the partial block"
    );
    let (ba, bb) = (
        e.kv().sequence(a).unwrap().blocks().to_vec(),
        e.kv().sequence(b).unwrap().blocks().to_vec(),
    );
    assert_eq!(ba[..2], bb[..2], "full blocks stay shared");
    assert_ne!(ba[2], bb[2]);
    // The original continues as if it had never been forked, and the fork gives the
    // logits of a sequence that was never forked.
    let la2 = eval_last(&mut e, a, &[9], 1);
    let mut fresh = engine(&m, 256, 64, 1);
    let s = fresh.kv_mut().new_sequence();
    eval_last(&mut fresh, s, &prompt, 64);
    let s2 = fresh.kv_mut().fork(s).unwrap();
    assert_eq!(bits(&eval_last(&mut fresh, s, &[9], 1)), bits(&la2));
    fresh.kv_mut().free_sequence(s).unwrap();
    let mut plain = engine(&m, 256, 64, 1);
    let p = plain.kv_mut().new_sequence();
    let mut full = prompt.clone();
    full.push(7);
    assert_eq!(bits(&eval_last(&mut plain, p, &full, 64)), bits(&la));
    fresh.kv_mut().free_sequence(s2).unwrap();
    // Every block comes back.
    e.kv_mut().free_sequence(a).unwrap();
    e.kv_mut().free_sequence(b).unwrap();
    let st = e.kv().stats();
    assert_eq!(st.pool.used, 0);
    assert_eq!(st.pool.free + st.pool.cached, st.pool.n_blocks);
    assert!(
        e.kv().sequence(a).is_err(),
        "a freed sequence's id is refused"
    );
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_shared_300_token_prefix_is_not_evaluated_again() {
    let (m, path) = model("prefix", Isa::Scalar);
    let v = m.n_vocab();
    let mut e = engine(&m, 1024, 128, 1);
    let shared = seeded_tokens(300, 11, v);
    let a = e.kv_mut().new_sequence();
    eval_last(&mut e, a, &shared, 128);
    e.kv_mut().free_sequence(a).unwrap();
    assert!(
        e.kv().stats().pool.cached > 0,
        "finished blocks stay cached"
    );

    let mut second = shared.clone();
    second.extend(seeded_tokens(20, 12, v));
    let b = e.kv_mut().new_sequence();
    let reused = e.kv_mut().reuse_prefix(b, &second).unwrap();
    assert_eq!(reused, 300, "the whole shared prefix comes from the cache");
    let before = e.evaluated_tokens();
    let got = eval_last(&mut e, b, &second[reused..], 128);
    assert_eq!(
        e.evaluated_tokens() - before,
        20,
        "only the new tokens are evaluated"
    );
    // Same logits as evaluating everything from scratch.
    let mut cold = engine(&m, 1024, 128, 1);
    let c = cold.kv_mut().new_sequence();
    assert_eq!(bits(&eval_last(&mut cold, c, &second, 128)), bits(&got));

    // A prompt that diverges inside a cached block reuses the rows before the divergence.
    let mut third = shared[..150].to_vec();
    third.extend(seeded_tokens(10, 13, v));
    let d = e.kv_mut().new_sequence();
    assert_eq!(e.kv_mut().reuse_prefix(d, &third).unwrap(), 150);
    let got = eval_last(&mut e, d, &third[150..], 128);
    let c2 = cold.kv_mut().new_sequence();
    assert_eq!(bits(&eval_last(&mut cold, c2, &third, 128)), bits(&got));
    std::fs::remove_file(&path).ok();
}

#[test]
fn batch_errors_change_nothing() {
    let (m, path) = model("batch-errors", Isa::Scalar);
    let mut e = engine(&m, 64, 16, 1);
    let a = e.kv_mut().new_sequence();
    let t = [1u32, 2, 3];
    let twice = [
        BatchItem {
            seq: a,
            tokens: &t,
            logits: Logits::Last,
        },
        BatchItem {
            seq: a,
            tokens: &t,
            logits: Logits::Last,
        },
    ];
    assert!(
        e.forward(&twice, |_, _, _| {}).is_err(),
        "one sequence twice"
    );
    let big = seeded_tokens(17, 1, m.n_vocab());
    let over = [BatchItem {
        seq: a,
        tokens: &big,
        logits: Logits::Last,
    }];
    assert!(
        e.forward(&over, |_, _, _| {}).is_err(),
        "over the batch size"
    );
    assert_eq!(e.kv().sequence(a).unwrap().len(), 0);
    e.kv_mut().free_sequence(a).unwrap();
    let stale = [BatchItem {
        seq: a,
        tokens: &t,
        logits: Logits::Last,
    }];
    assert!(e.forward(&stale, |_, _, _| {}).is_err(), "a freed sequence");
    std::fs::remove_file(&path).ok();
}
