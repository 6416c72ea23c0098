//! H2O-style eviction: `Engine::evict` of arbitrary positions equals a fresh sequence fed
//! the kept tokens at their compacted positions; the attention mass stays in step with the
//! positions through eviction, shift, truncation and fork; the scheduler's heavy-hitter
//! policy generates far past the context in constant blocks and gives every block back;
//! budgets that cannot work are refused.

mod common;

use common::sched::{bounded_params, eval_last, run_bounded, seeded_tokens};

use std::sync::Arc;

use bitnet_core::engine::{Engine, EngineOptions};
use bitnet_core::kv::KvType;
use bitnet_core::model::Model;
use bitnet_core::scheduler::StopReason;
use bitnet_core::scheduler::{ContextPolicy, Scheduler, SchedulerOptions};
use bitnet_kernels::Isa;
use common::models::{engine_with, synth_model, tiny, unpinned};

/// How far the logits after an eviction may be from a fresh evaluation, relative to the
/// largest logit, with an f16 cache: each moved key is rounded to f16 once more. The tiny
/// random model amplifies such roundings through its int8 activations: an f16 cache alone
/// (fresh, against an f32 cache) moves its logits by up to 1.8% of the largest on these
/// cases, and one more rounding costs about as much.
const EVICT_LOGIT_BUDGET: f32 = 2.5e-2;
/// The same with an f32 cache: only the extra rotation's rounding is left.
const EVICT_LOGIT_BUDGET_F32: f32 = 1e-4;

fn model(tag: &str, n_layer: usize) -> Arc<Model> {
    synth_model(tag, &tiny(n_layer), Some(Isa::Scalar)).0
}

fn engine(m: &Arc<Model>, n_ctx: usize, threads: usize) -> Engine {
    common::models::engine(m, n_ctx, 32, threads)
}

fn engine_kv(m: &Arc<Model>, n_ctx: usize, threads: usize, kv: KvType) -> Engine {
    let opts = EngineOptions {
        threads,
        n_ctx,
        batch: 32,
        k_type: kv,
        v_type: kv,
        ..unpinned()
    };
    engine_with(m, opts)
}

/// `n` token ids in `3..503`, different for each `seed`.
fn tokens(n: usize, seed: u32) -> Vec<u32> {
    seeded_tokens(n, seed, 500)
        .into_iter()
        .map(|t| t + 3)
        .collect()
}

#[test]
fn evicting_arbitrary_positions_equals_a_fresh_sequence_of_the_kept_tokens() {
    // One layer: its keys and values depend only on each token and its position, so after
    // the eviction the next token sees exactly what a fresh evaluation of the kept tokens
    // gives (deeper layers' rows also carry what the evicted tokens contributed).
    let m = model("evict-fresh", 1);
    let toks = tokens(70, 5);
    let next = 42u32;
    let removals: [&[usize]; 4] = [
        &[0],
        &[3, 7, 8, 20, 21, 22, 35, 69],
        &[15, 16, 17, 31, 32, 48],
        &[
            1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 40, 60,
        ],
    ];
    for (threads, kv, budget) in [
        (1, KvType::F32, EVICT_LOGIT_BUDGET_F32),
        (2, KvType::F32, EVICT_LOGIT_BUDGET_F32),
        (2, KvType::F16, EVICT_LOGIT_BUDGET),
    ] {
        for remove in removals {
            let mut e = engine_kv(&m, 128, threads, kv);
            let seq = e.kv_mut().new_sequence();
            e.kv_mut().track_attention_mass(seq, true).unwrap();
            eval_last(&mut e, seq, &toks, 32);
            let blocks_before = e.kv().stats().pool.used;
            let mass_before = e
                .kv()
                .sequence(seq)
                .unwrap()
                .attention_mass()
                .unwrap()
                .to_vec();
            e.evict(seq, remove).unwrap();
            let kept: Vec<u32> = (0..toks.len())
                .filter(|p| !remove.contains(p))
                .map(|p| toks[p])
                .collect();
            let s = e.kv().sequence(seq).unwrap();
            assert_eq!(s.tokens(), &kept[..]);
            let want_mass: Vec<f32> = (0..toks.len())
                .filter(|p| !remove.contains(p))
                .map(|p| mass_before[p])
                .collect();
            assert_eq!(
                s.attention_mass().unwrap(),
                &want_mass[..],
                "mass moves too"
            );
            let bt = e.kv().block_tokens();
            assert_eq!(s.blocks().len(), kept.len().div_ceil(bt));
            assert!(e.kv().stats().pool.used <= blocks_before);
            let got = eval_last(&mut e, seq, &[next], 32);

            let mut f = engine_kv(&m, 128, threads, kv);
            let fresh = f.kv_mut().new_sequence();
            let mut all = kept.clone();
            all.push(next);
            let want = eval_last(&mut f, fresh, &all, 32);
            let scale = want.iter().fold(1e-3f32, |a, x| a.max(x.abs()));
            let d = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(
                d <= budget * scale,
                "{threads} threads, {kv:?} cache, removing {remove:?}: logits off by {d} (scale {scale})"
            );
            e.kv_mut().free_sequence(seq).unwrap();
            assert_eq!(e.kv().stats().pool.used, 0, "every block back");
        }
    }
}

#[test]
fn bad_evictions_are_refused() {
    let m = model("evict-bad", 1);
    let mut e = engine(&m, 64, 1);
    let seq = e.kv_mut().new_sequence();
    eval_last(&mut e, seq, &tokens(10, 1), 32);
    assert!(e.evict(seq, &[3, 3]).is_err(), "repeated");
    assert!(e.evict(seq, &[4, 2]).is_err(), "out of order");
    assert!(e.evict(seq, &[10]).is_err(), "past the end");
    e.evict(seq, &[]).unwrap();
    assert_eq!(e.kv().sequence(seq).unwrap().len(), 10);
}

#[test]
fn the_mass_follows_shift_truncate_and_fork() {
    let m = model("evict-mass", 2);
    let mut e = engine(&m, 128, 2);
    let seq = e.kv_mut().new_sequence();
    assert!(
        e.kv().sequence(seq).unwrap().attention_mass().is_none(),
        "off by default"
    );
    e.kv_mut().track_attention_mass(seq, true).unwrap();
    eval_last(&mut e, seq, &tokens(40, 2), 32);
    let mass = |e: &Engine, s| {
        e.kv()
            .sequence(s)
            .unwrap()
            .attention_mass()
            .unwrap()
            .to_vec()
    };
    let m0 = mass(&e, seq);
    assert_eq!(m0.len(), 40);
    // The first position is read by every row of 2 layers x 4 heads: the most mass.
    assert!(m0[0] > m0[39], "{m0:?}");
    let child = e.kv_mut().fork(seq).unwrap();
    assert_eq!(mass(&e, child), m0, "a fork starts with its parent's mass");
    e.shift(seq, 4, 10).unwrap();
    let want: Vec<f32> = m0[..4].iter().chain(&m0[14..]).copied().collect();
    assert_eq!(mass(&e, seq), want);
    e.kv_mut().truncate(seq, 20).unwrap();
    assert_eq!(mass(&e, seq), want[..20]);
    assert_eq!(mass(&e, child), m0, "the fork's own copy is untouched");
    eval_last(&mut e, child, &[7], 32);
    assert_eq!(mass(&e, child).len(), 41);
    assert_eq!(mass(&e, seq).len(), 20);
    e.kv_mut().track_attention_mass(seq, false).unwrap();
    assert!(e.kv().sequence(seq).unwrap().attention_mass().is_none());
}

#[test]
fn heavy_hitters_generate_far_past_the_context_in_constant_blocks() {
    let m = model("evict-h2o", 2);
    let mut s = Scheduler::new(engine(&m, 128, 2), SchedulerOptions { max_running: 4 });
    let bt = s.engine().kv().block_tokens();
    let n_blocks = s.engine().kv().stats().pool.n_blocks;
    let policy = ContextPolicy::HeavyHitters {
        sinks: 4,
        recent: 16,
        budget: 64,
    };
    // A prompt longer than the budget is read through it too.
    let prompt = tokens(100, 3);
    let seq = s.submit(&prompt, bounded_params(1000, policy)).unwrap();
    let stats = run_bounded(&mut s, seq, 64, 64usize.div_ceil(bt), Some(200));
    assert_eq!(stats.stop_reason, StopReason::MaxTokens);
    assert_eq!(stats.gen_tokens, 1000, "generation went on past -c 128");
    let held = s.engine().kv().sequence(seq).unwrap();
    let all: Vec<u32> = prompt.iter().chain(&stats.tokens[..999]).copied().collect();
    assert_eq!(stats.discarded_tokens, all.len() - held.len());
    assert_eq!(&held.tokens()[..4], &all[..4], "the sinks stay");
    let n = held.len();
    assert_eq!(
        &held.tokens()[n - 16..],
        &all[all.len() - 16..],
        "the recent positions stay"
    );
    assert_eq!(held.attention_mass().unwrap().len(), n);
    s.engine_mut().kv_mut().free_sequence(seq).unwrap();
    let pool = s.engine().kv().stats().pool;
    assert_eq!(
        (pool.used, pool.available()),
        (0, n_blocks),
        "every block back"
    );
}

#[test]
fn budgets_that_cannot_work_are_refused() {
    let m = model("evict-budget", 1);
    let mut s = Scheduler::new(engine(&m, 64, 1), SchedulerOptions { max_running: 1 });
    let bad = [
        (4, 16, 128, "past the context"),
        (4, 0, 32, "no recent position"),
        (4, 16, 23, "no room for heavy hitters"),
        (44, 20, 64, "sinks and recent fill it"),
    ];
    for (sinks, recent, budget, why) in bad {
        let policy = ContextPolicy::HeavyHitters {
            sinks,
            recent,
            budget,
        };
        assert!(policy.validate(64).is_err(), "{why}");
        assert!(
            s.submit(&[1, 2, 3], bounded_params(5, policy)).is_err(),
            "{why}"
        );
    }
    let ok = ContextPolicy::HeavyHitters {
        sinks: 4,
        recent: 16,
        budget: 24,
    };
    ok.validate(64).unwrap();
    assert_eq!(
        s.engine().kv().stats().sequences,
        0,
        "refused requests leave nothing"
    );
}

/// Under heavy-hitter eviction a request does not start from a cached prefix: its positions
/// would have no attention of their own to rank, and a repeated request generated other text
/// (found by a helper's fuzzing of `serve --kv-evict h2o`). Three at once from one cached
/// prompt also ran the pool out of blocks (HTTP 500 "KV cache is full").
#[test]
fn heavy_hitter_requests_start_from_nothing_cached() {
    let m = model("evict-h2o-cache", 2);
    let mut s = Scheduler::new(engine(&m, 128, 2), SchedulerOptions { max_running: 4 });
    let n_blocks = s.engine().kv().stats().pool.n_blocks;
    let policy = ContextPolicy::HeavyHitters {
        sinks: 4,
        recent: 16,
        budget: 64,
    };
    let params = |n| bitnet_core::scheduler::GenParams {
        keep: false,
        ..bounded_params(n, policy)
    };
    let prompt = tokens(66, 5);
    let run = |s: &mut Scheduler, ids: &[bitnet_core::kv::SeqId]| {
        let mut done = std::collections::HashMap::new();
        let mut steps = 0;
        while !s.is_idle() {
            s.step(&mut |ev| match ev {
                bitnet_core::scheduler::Event::Done { seq, stats } => {
                    done.insert(seq, stats);
                }
                bitnet_core::scheduler::Event::Error { error, .. } => panic!("{error}"),
                _ => {}
            })
            .unwrap();
            steps += 1;
            assert!(steps < 10_000, "the scheduler does not finish");
        }
        ids.iter()
            .map(|id| done.remove(id).unwrap())
            .collect::<Vec<_>>()
    };
    let first = s.submit(&prompt, params(62)).unwrap();
    let first = run(&mut s, &[first]).remove(0);
    let again = s.submit(&prompt, params(62)).unwrap();
    let again = run(&mut s, &[again]).remove(0);
    assert_eq!(again.cached_tokens, 0);
    assert_eq!(again.tokens, first.tokens, "the same text as the first");
    // Batched, the prompt's chunks (and so where eviction cuts) differ: only the room is
    // checked here.
    let ids: Vec<bitnet_core::kv::SeqId> = (0..3)
        .map(|_| s.submit(&prompt, params(62)).unwrap())
        .collect();
    for r in run(&mut s, &ids) {
        assert_eq!((r.cached_tokens, r.gen_tokens), (0, 62));
    }
    let pool = s.engine().kv().stats().pool;
    assert_eq!(
        (pool.used, pool.available()),
        (0, n_blocks),
        "every block back"
    );
}
