//! The scheduler: many requests through one engine, each with its own sampler and limits;
//! admission by KV room, chunked prefill, cancellation, prefix reuse, continuations, and
//! followers that fork a leader's prompt (OpenAI's `n`).

mod common;

use common::sched::random_tokens;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use bitnet_core::CoreError;
use bitnet_core::kv::SeqId;
use bitnet_core::model::Model;
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::scheduler::{Event, GenParams, RequestError, Scheduler, SubmitOptions};
use bitnet_core::scheduler::{GenStats, StopReason};
use bitnet_kernels::Isa;
use common::models::{synth_model, tiny};

/// The tiny model on the scalar kernels (bit-exact comparisons between runs).
fn model(tag: &str) -> (Arc<Model>, PathBuf) {
    model_on(tag, Isa::Scalar, 2)
}

fn model_on(tag: &str, isa: Isa, n_layer: usize) -> (Arc<Model>, PathBuf) {
    synth_model(tag, &tiny(n_layer), Some(isa))
}

/// Two threads.
fn sched(model: &Arc<Model>, n_ctx: usize, batch: usize, max_running: usize) -> Scheduler {
    common::models::sched(model, n_ctx, batch, max_running, 2)
}

fn greedy(max_tokens: usize) -> GenParams {
    GenParams {
        max_tokens,
        sampler: SamplerConfig {
            temperature: 0.0,
            ..SamplerConfig::default()
        },
        ..GenParams::default()
    }
}

/// Steps until idle; returns each request's stats and text.
fn run_all(s: &mut Scheduler) -> HashMap<SeqId, (GenStats, String)> {
    let mut text: HashMap<SeqId, String> = HashMap::new();
    let mut done = HashMap::new();
    let mut guard = 0;
    while !s.is_idle() {
        s.step(&mut |ev| match ev {
            Event::Text { seq, text: t } => text.entry(seq).or_default().push_str(t),
            Event::Done { seq, stats } => {
                done.insert(seq, stats);
            }
            Event::Error { seq, error } => panic!("{seq}: {error}"),
            Event::Token { .. } | Event::Embedding { .. } => {}
        })
        .unwrap();
        guard += 1;
        assert!(guard < 100_000, "the scheduler does not finish");
    }
    done.into_iter()
        .map(|(k, st)| {
            let t = text.remove(&k).unwrap_or_default();
            (k, (st, t))
        })
        .collect()
}

#[test]
fn requests_decoded_together_generate_what_they_generate_alone() {
    let (m, path) = model("sched-together");
    let prompts: Vec<Vec<u32>> = (0..6)
        .map(|i| random_tokens(3 + 11 * i, i as u64))
        .collect();
    let mut alone = Vec::new();
    for p in &prompts {
        let mut s = sched(&m, 512, 64, 8);
        let id = s.submit(p, greedy(12)).unwrap();
        alone.push(run_all(&mut s).remove(&id).unwrap());
    }
    // All six at once, with a small per-step budget so prefill chunks and decode tokens of
    // different requests share forward passes.
    let mut s = sched(&m, 512, 24, 8);
    let ids: Vec<SeqId> = prompts
        .iter()
        .map(|p| s.submit(p, greedy(12)).unwrap())
        .collect();
    let mut together = run_all(&mut s);
    for (i, id) in ids.iter().enumerate() {
        let (st, text) = together.remove(id).unwrap();
        assert_eq!(st.tokens, alone[i].0.tokens, "request {i}: other tokens");
        assert_eq!(text, alone[i].1, "request {i}: other text");
        assert_eq!(st.stop_reason, StopReason::MaxTokens);
        assert_eq!(st.gen_tokens, 12);
    }
    let st = s.engine().kv().stats();
    assert_eq!(st.pool.used, 0, "every block back after the requests end");
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_thousand_random_requests_with_cancels_return_every_block() {
    // What is checked is bookkeeping, not numbers: a one-layer model on the best kernels.
    let (m, path) = model_on("sched-thousand", Isa::best(), 1);
    let mut s = common::models::sched(&m, 384, 64, 16, 1);
    let n_blocks = s.engine().kv().stats().pool.n_blocks;
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut live: Vec<SeqId> = Vec::new();
    let (mut submitted, mut finished, mut cancelled) = (0usize, 0usize, 0usize);
    while submitted < 1000 || !s.is_idle() {
        while submitted < 1000 && s.n_waiting() < 8 {
            let len = 1 + next(40) as usize;
            let p = random_tokens(len, submitted as u64);
            let params = GenParams {
                max_tokens: 1 + next(12) as usize,
                sampler: SamplerConfig {
                    seed: submitted as u64,
                    ..SamplerConfig::default()
                },
                ..GenParams::default()
            };
            live.push(s.submit(&p, params).unwrap());
            submitted += 1;
        }
        if !live.is_empty() && next(5) == 0 {
            let victim = live[next(live.len() as u64) as usize];
            s.cancel(victim);
        }
        s.step(&mut |ev| match ev {
            Event::Done { seq, stats } => {
                finished += 1;
                if stats.stop_reason == StopReason::Cancelled {
                    cancelled += 1;
                }
                live.retain(|&l| l != seq);
            }
            Event::Error { seq, error } => panic!("{seq}: {error}"),
            Event::Text { .. } | Event::Token { .. } | Event::Embedding { .. } => {}
        })
        .unwrap();
    }
    assert_eq!(finished, 1000, "every request reports done exactly once");
    assert!(cancelled > 0, "the test cancelled some requests");
    let st = s.engine().kv().stats();
    assert_eq!(st.sequences, 0);
    assert_eq!(st.pool.used, 0, "blocks still held: {st:?}");
    assert_eq!(st.pool.free + st.pool.cached, n_blocks);
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_repeated_prefix_comes_from_the_cache() {
    let (m, path) = model("sched-prefix");
    let mut s = sched(&m, 1024, 128, 4);
    let shared = random_tokens(300, 7);
    let a = s.submit(&shared, greedy(4)).unwrap();
    let first = run_all(&mut s).remove(&a).unwrap().0;
    assert_eq!(first.cached_tokens, 0);
    let mut p2 = shared.clone();
    p2.extend(random_tokens(25, 8));
    let before = s.engine().evaluated_tokens();
    let b = s.submit(&p2, greedy(4)).unwrap();
    let second = run_all(&mut s).remove(&b).unwrap().0;
    assert_eq!(
        second.cached_tokens, 300,
        "the shared system prompt is reused"
    );
    // 25 new prompt tokens, then the 3 sampled tokens fed back (the 4th ends it).
    assert_eq!(s.engine().evaluated_tokens() - before, 25 + 3);
    // And it generates what it would with a cold cache.
    let mut cold = sched(&m, 1024, 128, 4);
    let c = cold.submit(&p2, greedy(4)).unwrap();
    assert_eq!(
        run_all(&mut cold).remove(&c).unwrap().0.tokens,
        second.tokens
    );
    std::fs::remove_file(&path).ok();
}

#[test]
fn zero_max_tokens_evaluates_the_prompt_and_generates_nothing() {
    let (m, path) = model("sched-zero");
    let mut s = sched(&m, 256, 32, 4);
    let before = s.engine().evaluated_tokens();
    let id = s.submit(&random_tokens(20, 4), greedy(0)).unwrap();
    let (stats, text) = run_all(&mut s).remove(&id).unwrap();
    assert_eq!((stats.gen_tokens, stats.tokens.len()), (0, 0), "{stats:?}");
    assert_eq!(stats.stop_reason, StopReason::MaxTokens);
    assert!(text.is_empty(), "{text:?}");
    assert_eq!(s.engine().evaluated_tokens() - before, 20);
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_kept_sequence_continues_with_only_its_new_tokens() {
    let (m, path) = model("sched-keep");
    let mut s = sched(&m, 512, 64, 4);
    let turn1 = random_tokens(40, 1);
    let keep = GenParams {
        keep: true,
        ..greedy(5)
    };
    let id = s.submit(&turn1, keep.clone()).unwrap();
    let r1 = run_all(&mut s).remove(&id).unwrap().0;
    let held = s.engine().kv().sequence(id).unwrap().tokens().to_vec();
    assert_eq!(
        held.len(),
        40 + 4,
        "prompt and all generated tokens but the last"
    );
    // The next turn: the last reply token plus the new message.
    let mut turn2 = vec![*r1.tokens.last().unwrap()];
    turn2.extend(random_tokens(10, 2));
    let before = s.engine().evaluated_tokens();
    s.submit_on(id, &turn2, keep).unwrap();
    let r2 = run_all(&mut s).remove(&id).unwrap().0;
    assert_eq!(s.engine().evaluated_tokens() - before, 11 + 4);
    // The same as one request over the whole conversation.
    let mut whole = turn1.clone();
    whole.extend(&r1.tokens[..r1.tokens.len() - 1]);
    whole.extend(&turn2);
    let mut fresh = sched(&m, 512, 64, 4);
    let f = fresh.submit(&whole, greedy(5)).unwrap();
    assert_eq!(run_all(&mut fresh).remove(&f).unwrap().0.tokens, r2.tokens);
    std::fs::remove_file(&path).ok();
}

#[test]
fn too_long_is_refused_and_too_many_wait() {
    let (m, path) = model("sched-limits");
    // 128 tokens of KV in all (8 blocks of 16).
    let mut s = sched(&m, 128, 32, 8);
    let err = s.submit(&random_tokens(129, 1), greedy(4)).unwrap_err();
    assert!(err.to_string().contains("context"), "{err}");
    assert!(s.submit(&[], greedy(4)).is_err(), "an empty prompt");
    assert!(matches!(
        s.submit(&[3, 100_000], greedy(4)),
        Err(CoreError::Request(RequestError::TokenOutOfRange {
            token: 100_000,
            index: 1,
            ..
        }))
    ));
    assert_eq!(
        s.engine().kv().stats().sequences,
        0,
        "a refused request leaves no sequence behind"
    );
    // Three requests of 60 tokens each (4 blocks each): two fit at once, one waits.
    let ids: Vec<SeqId> = (0..3)
        .map(|i| s.submit(&random_tokens(40, i), greedy(20)).unwrap())
        .collect();
    s.step(&mut |_| {}).unwrap();
    assert_eq!(s.n_running(), 2);
    assert_eq!(s.n_waiting(), 1, "the third waits for room");
    let done = run_all(&mut s);
    for id in ids {
        assert_eq!(done[&id].0.gen_tokens, 20, "{id} ran to its limit");
    }
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_request_as_large_as_the_pool_runs_after_one_that_left_a_matching_prefix() {
    // 128 tokens of KV (8 blocks of 16). The first request fills the pool and leaves its
    // blocks in the prefix cache. The second starts with the same 40 tokens: matching 39 of
    // them takes two whole blocks and a part of a third, which a write copies out of the
    // cache: one block more than the pool has. It used to wait for that block forever; now
    // the part block leaves the cache instead of being copied, and all 39 are reused.
    let (m, path) = model("sched-pool-sized");
    let mut s = sched(&m, 128, 32, 4);
    let prompt = random_tokens(40, 3);
    let a = s.submit(&prompt, greedy(88)).unwrap();
    assert_eq!(run_all(&mut s)[&a].0.gen_tokens, 88);
    let b = s.submit(&prompt, greedy(88)).unwrap();
    let done = run_all(&mut s);
    assert_eq!(done[&b].0.gen_tokens, 88);
    assert_eq!(done[&b].0.cached_tokens, 39);
    assert_eq!(done[&b].0.tokens, done_tokens_alone(&m, &prompt, 88));
    std::fs::remove_file(&path).ok();
}

fn done_tokens_alone(m: &Arc<Model>, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = sched(m, 128, 32, 4);
    let id = s.submit(prompt, greedy(n)).unwrap();
    run_all(&mut s).remove(&id).unwrap().0.tokens
}

#[test]
fn a_request_blocked_by_kept_sequences_with_nothing_running_ends_with_an_error() {
    // Kept sequences hold 6 of the 8 blocks; a request needing 4 can never be admitted
    // while nothing runs, so it ends with an error instead of waiting forever.
    let (m, path) = model("sched-kept-full");
    let mut s = sched(&m, 128, 32, 4);
    let keep = GenParams {
        keep: true,
        ..greedy(4)
    };
    for i in 0..2 {
        let id = s.submit(&random_tokens(40, 10 + i), keep.clone()).unwrap();
        run_all(&mut s).remove(&id).unwrap();
    }
    let id = s.submit(&random_tokens(40, 20), greedy(20)).unwrap();
    let mut errors = Vec::new();
    let mut steps = 0;
    while !s.is_idle() {
        s.step(&mut |ev| {
            if let Event::Error { seq, error } = ev {
                errors.push((seq, error.to_string()));
            }
        })
        .unwrap();
        steps += 1;
        assert!(steps < 1_000, "the request waits forever");
    }
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, id);
    assert!(errors[0].1.contains("KV cache is full"), "{errors:?}");
    std::fs::remove_file(&path).ok();
}

#[test]
fn cancel_takes_effect_during_a_long_prefill() {
    let (m, path) = model("sched-cancel");
    let mut s = sched(&m, 512, 16, 4);
    let id = s.submit(&random_tokens(300, 3), greedy(8)).unwrap();
    s.step(&mut |_| {}).unwrap();
    assert_eq!(s.engine().evaluated_tokens(), 16, "one chunk per step");
    assert!(s.cancel(id));
    let mut reason = None;
    s.step(&mut |ev| {
        if let Event::Done { stats, .. } = ev {
            reason = Some(stats.stop_reason);
        }
    })
    .unwrap();
    assert_eq!(reason, Some(StopReason::Cancelled));
    assert_eq!(
        s.engine().evaluated_tokens(),
        16,
        "nothing more was evaluated"
    );
    assert!(s.is_idle());
    assert_eq!(s.engine().kv().stats().pool.used, 0);
    assert!(!s.cancel(id), "a finished request cannot be cancelled");
    std::fs::remove_file(&path).ok();
}

#[test]
fn followers_fork_the_leaders_prompt_and_sample_as_if_alone() {
    let (m, path) = model("sched-follow");
    // A 16-token budget per step: the 50-token prompt takes several steps, so the followers
    // are admitted only after waiting for the leader.
    let (n, prompt_len, max_tokens) = (3usize, 50usize, 6usize);
    let prompt = random_tokens(prompt_len, 21);
    let sampled = |seed: u64| GenParams {
        max_tokens,
        sampler: SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed,
            ..SamplerConfig::default()
        },
        // Every answer runs to max_tokens, so the tokens evaluated are known.
        ignore_eos: true,
        ..GenParams::default()
    };
    let mut s = sched(&m, 512, 16, 8);
    let n_blocks = s.engine().kv().stats().pool.n_blocks;
    let leader = s.submit(&prompt, sampled(100)).unwrap();
    let mut ids = vec![leader];
    for i in 1..n {
        let extra = SubmitOptions {
            after: Some(leader),
            ..SubmitOptions::default()
        };
        ids.push(
            s.submit_with(&prompt, sampled(100 + i as u64), extra)
                .unwrap(),
        );
    }
    let mut done = run_all(&mut s);
    // The prompt once; each follower reads only the prompt's last token again (for logits
    // of its own), then every answer feeds back all its sampled tokens but the last.
    assert_eq!(
        s.engine().evaluated_tokens() as usize,
        prompt_len + (n - 1) + n * (max_tokens - 1),
        "the prompt is evaluated once for all {n} answers"
    );
    let mut answers = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let (st, text) = done.remove(id).unwrap();
        assert_eq!(st.stop_reason, StopReason::MaxTokens, "answer {i}");
        assert_eq!(st.prompt_tokens, prompt_len, "answer {i}");
        let want_cached = if i == 0 { 0 } else { prompt_len - 1 };
        assert_eq!(
            st.cached_tokens, want_cached,
            "answer {i}: forked from the leader"
        );
        // The same tokens as a request with that seed on an engine of its own.
        let mut alone = sched(&m, 512, 16, 8);
        let a = alone.submit(&prompt, sampled(100 + i as u64)).unwrap();
        let (alone_st, alone_text) = run_all(&mut alone).remove(&a).unwrap();
        assert_eq!(st.tokens, alone_st.tokens, "answer {i}: other tokens");
        assert_eq!(text, alone_text, "answer {i}: other text");
        answers.push(st.tokens);
    }
    assert!(
        answers.iter().any(|a| *a != answers[0]),
        "the seeds give different answers: {answers:?}"
    );
    let st = s.engine().kv().stats();
    assert_eq!(st.sequences, 0, "every sequence freed");
    assert_eq!(st.pool.used, 0, "blocks still held: {st:?}");
    assert_eq!(st.pool.free + st.pool.cached, n_blocks);
    std::fs::remove_file(&path).ok();
}

/// Token healing: with `heal`, the first generated token is one whose text begins with the
/// healed text even when another is far likelier, the reported text leaves the healed text
/// out, and the tokens after the first are free again; a text no token begins with is
/// refused, on a new request and on a continuation.
#[test]
fn a_healed_request_starts_with_a_token_carrying_the_healed_text() {
    let (m, _path) = model("sched-heal");
    let tk = m.tokenizer().expect("the tiny model has a vocabulary");
    let plain = tk.token_id("q").expect("a plain letter token");
    let spaced = tk.token_id("\u{2581}q").expect("a space-led token");
    assert_eq!(tk.token_to_piece(spaced), b" q");
    let biased = |bias: f32| {
        let mut p = greedy(4);
        p.sampler.logit_bias = vec![(plain, bias), (spaced, bias / 2.0)];
        p
    };
    let prompt = random_tokens(9, 3);
    // Not healed: the biased plain token comes first.
    let mut s = sched(&m, 256, 64, 4);
    let free = s.submit(&prompt, biased(60.0)).unwrap();
    let (stats, _) = run_all(&mut s).remove(&free).unwrap();
    assert_eq!(stats.tokens[0], plain);
    // Healed of a space: the best space-led token comes first, then the plain one again.
    let heal = SubmitOptions {
        heal: " ".into(),
        ..SubmitOptions::default()
    };
    let mut s = sched(&m, 256, 64, 4);
    let id = s.submit_with(&prompt, biased(60.0), heal.clone()).unwrap();
    let (stats, text) = run_all(&mut s).remove(&id).unwrap();
    assert_eq!(stats.tokens[0], spaced, "{stats:?}");
    assert_eq!(stats.tokens[1..], [plain, plain, plain]);
    assert_eq!(text, "qqqq", "the healed space is not reported");
    // The same on a continuation of a kept sequence.
    let mut s = sched(&m, 256, 64, 4);
    let keep = GenParams {
        keep: true,
        ..greedy(2)
    };
    let id = s.submit(&prompt, keep).unwrap();
    run_all(&mut s);
    s.submit_on_with(id, &random_tokens(4, 8), biased(60.0), heal.clone())
        .unwrap();
    let (stats, text) = run_all(&mut s).remove(&id).unwrap();
    assert_eq!((stats.tokens[0], text.as_str()), (spaced, "qqqq"));
    // A text no token begins with, and a shared prompt on a continuation, are refused.
    let snowman = SubmitOptions {
        heal: "\u{2603}".into(),
        ..SubmitOptions::default()
    };
    let err = s.submit_with(&prompt, greedy(2), snowman).unwrap_err();
    assert!(err.to_string().contains("begins with"), "{err}");
    let after = SubmitOptions {
        after: Some(id),
        ..SubmitOptions::default()
    };
    assert!(s.submit_on_with(id, &prompt, greedy(2), after).is_err());
    // A refused continuation that would evaluate the last token again (no new tokens)
    // leaves the sequence whole: the same request, healed of a space, then runs.
    let kept = GenParams {
        keep: true,
        ..greedy(2)
    };
    let id = s.submit(&prompt, kept).unwrap();
    run_all(&mut s);
    let held = s.engine().kv().sequence(id).unwrap().len();
    let snowman = SubmitOptions {
        heal: "\u{2603}".into(),
        ..SubmitOptions::default()
    };
    let err = s.submit_on_with(id, &[], greedy(2), snowman).unwrap_err();
    assert!(err.to_string().contains("begins with"), "{err}");
    assert_eq!(s.engine().kv().sequence(id).unwrap().len(), held);
    s.submit_on_with(id, &[], biased(60.0), heal).unwrap();
    let (stats, _) = run_all(&mut s).remove(&id).unwrap();
    assert_eq!(stats.tokens[0], spaced, "{stats:?}");
    assert!(s.is_idle());
}
