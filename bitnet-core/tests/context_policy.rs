//! What a request does when its sequence fills the context: stop (the default), shift like
//! llama.cpp (keep a front, remove half of the rest), or a window with attention sinks.
//! Shifting requests run far past the context in constant blocks, keep their front, read
//! prompts longer than the window, and give every block back.

mod common;

use common::sched::{bounded_params, random_tokens, run_bounded};

use std::path::PathBuf;
use std::sync::Arc;

use bitnet_core::model::Model;
use bitnet_core::scheduler::StopReason;
use bitnet_core::scheduler::{ContextPolicy, Scheduler};
use bitnet_kernels::Isa;
use common::models::{synth_model, tiny};

fn model(tag: &str) -> (Arc<Model>, PathBuf) {
    synth_model(tag, &tiny(2), Some(Isa::Scalar))
}

/// Passes of 32 tokens, up to 4 requests, 2 threads.
fn sched(model: &Arc<Model>, n_ctx: usize) -> Scheduler {
    common::models::sched(model, n_ctx, 32, 4, 2)
}

/// The positions a shifted sequence holds are the request's tokens with one gap: its
/// first `front`, then its most recent ones.
fn assert_front_and_tail(held: &[u32], all: &[u32], front: usize) {
    assert_eq!(&held[..front], &all[..front], "the front stays");
    let tail = held.len() - front;
    assert_eq!(
        &held[front..],
        &all[all.len() - tail..],
        "the rest is the most recent tokens"
    );
}

#[test]
fn a_window_generates_far_past_the_context_in_constant_blocks() {
    let (m, path) = model("policy-window");
    let mut s = sched(&m, 128);
    let bt = s.engine().kv().stats().pool.block_tokens;
    let n_blocks = s.engine().kv().stats().pool.n_blocks;
    let prompt = random_tokens(10, 1);
    let policy = ContextPolicy::Window {
        sinks: 4,
        window: 60,
    };
    let seq = s.submit(&prompt, bounded_params(1000, policy)).unwrap();
    let stats = run_bounded(&mut s, seq, 64, 64usize.div_ceil(bt) + 1, None);
    assert_eq!(stats.stop_reason, StopReason::MaxTokens);
    assert_eq!(stats.gen_tokens, 1000, "generation went on past -c 128");
    // Every token but the last sampled one went through the sequence.
    let all: Vec<u32> = prompt.iter().chain(&stats.tokens[..999]).copied().collect();
    let held = s.engine().kv().sequence(seq).unwrap().tokens().to_vec();
    assert_eq!(stats.discarded_tokens, all.len() - held.len());
    assert!(held.len() > 40, "a window's worth stays ({})", held.len());
    assert_front_and_tail(&held, &all, 4);
    s.engine_mut().kv_mut().free_sequence(seq).unwrap();
    let pool = s.engine().kv().stats().pool;
    assert_eq!(
        (pool.used, pool.available()),
        (0, n_blocks),
        "every block back"
    );
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_context_shift_keeps_its_front_and_goes_on() {
    let (m, path) = model("policy-shift");
    let mut s = sched(&m, 64);
    let prompt = random_tokens(20, 2);
    let seq = s
        .submit(
            &prompt,
            bounded_params(200, ContextPolicy::Shift { keep: 5 }),
        )
        .unwrap();
    let stats = run_bounded(&mut s, seq, 64, 4, None);
    assert_eq!(stats.stop_reason, StopReason::MaxTokens);
    assert_eq!(stats.gen_tokens, 200);
    let all: Vec<u32> = prompt.iter().chain(&stats.tokens[..199]).copied().collect();
    let held = s.engine().kv().sequence(seq).unwrap().tokens().to_vec();
    assert_eq!(stats.discarded_tokens, all.len() - held.len());
    assert_front_and_tail(&held, &all, 5);
    // Each shift removes half of what follows the front: the sequence never drops below
    // half the context after one.
    assert!(held.len() >= 5 + (64 - 5) / 2, "{}", held.len());
    std::fs::remove_file(&path).ok();
}

#[test]
fn the_same_request_without_a_policy_stops_at_the_context() {
    let (m, path) = model("policy-stop");
    let mut s = sched(&m, 64);
    let seq = s
        .submit(
            &random_tokens(20, 2),
            bounded_params(200, ContextPolicy::Stop),
        )
        .unwrap();
    let stats = run_bounded(&mut s, seq, 64, 4, None);
    assert_eq!(stats.stop_reason, StopReason::ContextFull);
    assert_eq!((stats.gen_tokens, stats.discarded_tokens), (44, 0));
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_prompt_longer_than_the_window_streams_through_it() {
    let (m, path) = model("policy-long-prompt");
    let mut s = sched(&m, 64);
    let prompt = random_tokens(300, 3);
    let err = s
        .submit(&prompt, bounded_params(5, ContextPolicy::Stop))
        .unwrap_err();
    assert!(err.to_string().contains("context"), "{err}");
    let policy = ContextPolicy::Window {
        sinks: 4,
        window: 32,
    };
    let seq = s.submit(&prompt, bounded_params(5, policy)).unwrap();
    let stats = run_bounded(&mut s, seq, 36, 3, None);
    assert_eq!(stats.gen_tokens, 5);
    let all: Vec<u32> = prompt.iter().chain(&stats.tokens[..4]).copied().collect();
    let held = s.engine().kv().sequence(seq).unwrap().tokens().to_vec();
    assert_front_and_tail(&held, &all, 4);
    assert_eq!(stats.discarded_tokens, all.len() - held.len());
    // A window that moved gives the same answer on a second run (scalar kernels).
    s.engine_mut().kv_mut().free_sequence(seq).unwrap();
    let again = s.submit(&prompt, bounded_params(5, policy)).unwrap();
    let second = run_bounded(&mut s, again, 36, 3, None);
    assert_eq!(second.tokens, stats.tokens);
    std::fs::remove_file(&path).ok();
}

#[test]
fn policies_that_cannot_work_are_refused_at_submit() {
    let (m, path) = model("policy-refused");
    let mut s = sched(&m, 64);
    let p = random_tokens(8, 4);
    for (policy, says) in [
        (
            ContextPolicy::Window {
                sinks: 4,
                window: 100,
            },
            "do not fit",
        ),
        (
            ContextPolicy::Window {
                sinks: 4,
                window: 2,
            },
            "too small",
        ),
        (ContextPolicy::Shift { keep: 40 }, "keep less than half"),
    ] {
        let err = s.submit(&p, bounded_params(4, policy)).unwrap_err();
        assert!(err.to_string().contains(says), "{policy:?}: {err}");
    }
    assert!(s.is_idle(), "nothing was queued");
    assert_eq!(
        s.engine().kv().stats().sequences,
        0,
        "no sequence left behind"
    );
    std::fs::remove_file(&path).ok();
}
