//! Speculative decoding through the scheduler, on the shipped model and its shipped draft
//! (`models/shakespeare-draft.gguf`, same tokenizer): greedy output with any draft source
//! (the draft model, the target as its own draft, prompt lookup) is the output without,
//! token for token, also for stop strings, short limits, kept sequences (the cache holds
//! exactly what it would) and requests batched with others; sampled output keeps the
//! target's distribution (chi-square goodness of fit of the first and second tokens
//! against the exact distributions, computed from the target's logits); a draft model with
//! another vocabulary is refused.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use bitnet_core::engine::{BatchItem, Logits};
use bitnet_core::kv::SeqId;
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::scheduler::{
    DraftSource, Event, GenParams, GenStats, Scheduler, SchedulerOptions, SpecParams, StopReason,
    SubmitOptions,
};
use bitnet_core::{Engine, EngineOptions, LoadOptions, Model};

fn model_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../models")
        .join(name)
}

fn load(name: &str) -> Arc<Model> {
    Arc::new(Model::load(model_path(name), &LoadOptions::default()).expect("load the model"))
}

/// An unpinned one-thread engine with passes of `batch` tokens and a KV pool of 1,024
/// positions (several sequences of the 256-position model at once).
fn engine(model: &Arc<Model>, batch: usize) -> Engine {
    let opts = EngineOptions {
        threads: 1,
        pin: false,
        batch,
        n_ctx: 1024,
        ..EngineOptions::default()
    };
    Engine::new(model.clone(), &opts).unwrap()
}

/// A scheduler over the shipped model with `draft` (a model file) as its draft model.
fn sched(draft: Option<&str>, max_running: usize, batch: usize) -> Scheduler {
    let mut s = Scheduler::new(
        engine(&load("shakespeare.gguf"), batch),
        SchedulerOptions { max_running },
    );
    if let Some(d) = draft {
        s.set_draft(engine(&load(d), batch)).unwrap();
    }
    s
}

fn greedy(max_tokens: usize, speculate: Option<SpecParams>) -> GenParams {
    GenParams {
        max_tokens,
        sampler: SamplerConfig::greedy(),
        speculate,
        ..GenParams::default()
    }
}

/// Speculation with drafts of `draft_max` tokens every step (the tests want verifications:
/// on the shipped model a longer pass costs more than it saves, so the adaptive length
/// would soon stop proposing).
fn spec(source: DraftSource, draft_max: usize, p_min: f32) -> SpecParams {
    SpecParams {
        source,
        draft_max,
        draft_min: 0,
        p_min,
        adaptive: false,
    }
}

/// [`spec`] with the adaptive length.
fn adaptive(source: DraftSource, draft_max: usize, p_min: f32) -> SpecParams {
    SpecParams {
        adaptive: true,
        ..spec(source, draft_max, p_min)
    }
}

/// The draft sources every greedy test runs (a description, the draft model file, the
/// parameters).
fn sources() -> Vec<(&'static str, Option<&'static str>, SpecParams)> {
    vec![
        (
            "draft model",
            Some("shakespeare-draft.gguf"),
            spec(DraftSource::Model, 6, 0.3),
        ),
        (
            "draft model, long drafts, no floor",
            Some("shakespeare-draft.gguf"),
            spec(DraftSource::Model, 16, 0.0),
        ),
        (
            "the target as its own draft",
            Some("shakespeare.gguf"),
            spec(DraftSource::Model, 5, 0.0),
        ),
        (
            "lookup 3",
            None,
            spec(DraftSource::Lookup { ngram: 3 }, 8, 0.0),
        ),
        (
            "lookup 1",
            None,
            spec(DraftSource::Lookup { ngram: 1 }, 4, 0.0),
        ),
        (
            "draft model, adaptive length",
            Some("shakespeare-draft.gguf"),
            adaptive(DraftSource::Model, 8, 0.5),
        ),
        (
            "lookup 2, adaptive length",
            None,
            adaptive(DraftSource::Lookup { ngram: 2 }, 8, 0.0),
        ),
    ]
}

fn prompts() -> Vec<Vec<u32>> {
    let m = load("shakespeare.gguf");
    let tk = m.tokenizer().unwrap();
    [
        "ROMEO:\nBut soft, what light through yonder window breaks?\n",
        "KING RICHARD III:\nNow is the winter of our discontent\n",
        // Something to copy: lookup drafts find the passage again.
        "First Citizen:\nWe are accounted poor citizens.\n\nFirst Citizen:\nWe are",
    ]
    .iter()
    .map(|p| tk.encode(p, true, false))
    .collect()
}

/// Runs one request to its end; its figures and the tokens its sequence holds (when kept).
fn run(s: &mut Scheduler, prompt: &[u32], params: GenParams) -> (GenStats, Vec<u32>) {
    let keep = params.keep;
    let seq = s.submit(prompt, params).unwrap();
    let mut done = None;
    while done.is_none() {
        s.step(&mut |ev| match ev {
            Event::Done { seq: d, stats } if d == seq => done = Some(stats),
            Event::Error { error, .. } => panic!("{error}"),
            _ => {}
        })
        .unwrap();
    }
    let held = if keep {
        let t = s.engine().kv().sequence(seq).unwrap().tokens().to_vec();
        s.engine_mut().kv_mut().free_sequence(seq).unwrap();
        t
    } else {
        Vec::new()
    };
    (done.unwrap(), held)
}

#[test]
fn greedy_output_is_the_same_with_every_draft_source() {
    let prompts = prompts();
    let mut plain = sched(None, 1, 64);
    let reference: Vec<GenStats> = prompts
        .iter()
        .map(|p| run(&mut plain, p, greedy(150, None)).0)
        .collect();
    for (what, draft, params) in sources() {
        let mut s = sched(draft, 1, 64);
        let mut verifies = 0;
        for (p, want) in prompts.iter().zip(&reference) {
            let (got, _) = run(&mut s, p, greedy(150, Some(params.clone())));
            assert_eq!(got.tokens, want.tokens, "{what}: the greedy tokens differ");
            assert_eq!(got.stop_reason, want.stop_reason, "{what}");
            assert!(got.draft_accepted <= got.draft_tokens);
            verifies += got.draft_verifies;
        }
        assert!(verifies > 0, "{what}: no draft was verified");
    }
}

#[test]
fn stops_limits_and_kept_sequences_hold_under_speculation() {
    let prompt = &prompts()[0];
    let mut plain = sched(None, 1, 64);
    for (what, draft, params) in sources() {
        let mut s = sched(draft, 1, 64);
        for max_tokens in [1, 2, 3, 5, 17] {
            let kept = |spec: Option<SpecParams>| GenParams {
                keep: true,
                ..greedy(max_tokens, spec)
            };
            let (want, want_held) = run(&mut plain, prompt, kept(None));
            let (got, got_held) = run(&mut s, prompt, kept(Some(params.clone())));
            assert_eq!(got.tokens, want.tokens, "{what}, {max_tokens} tokens");
            assert_eq!(got.stop_reason, StopReason::MaxTokens);
            // The cache holds the prompt and every generated token but the last.
            assert_eq!(got_held, want_held, "{what}, {max_tokens} tokens: cache");
        }
        // A stop string in the middle of an accepted draft ends the text there.
        let stopping = |spec| GenParams {
            stop: vec!["light".into(), "\n\n".into()],
            ..greedy(200, spec)
        };
        let (want, _) = run(&mut plain, prompt, stopping(None));
        let (got, _) = run(&mut s, prompt, stopping(Some(params.clone())));
        assert_eq!(got.tokens, want.tokens, "{what}: stop string");
        assert_eq!(got.stop_reason, want.stop_reason, "{what}: stop string");
        // Every block went back once the requests ended.
        assert_eq!(s.engine().kv().pool_stats().used, 0, "{what}: blocks held");
    }
}

#[test]
fn speculating_requests_share_batches_with_others() {
    let prompts = prompts();
    let mut plain = sched(None, 1, 64);
    let mut solo = Vec::new();
    for p in &prompts {
        solo.push(run(&mut plain, p, greedy(60, None)).0.tokens);
    }
    // A batch of 24 tokens: four decode items and their drafts compete for it.
    let mut s = sched(Some("shakespeare-draft.gguf"), 8, 24);
    let model_spec = spec(DraftSource::Model, 8, 0.0);
    let lookup_spec = spec(DraftSource::Lookup { ngram: 2 }, 8, 0.0);
    let mut ids: Vec<(SeqId, usize)> = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        for (j, speculate) in [Some(model_spec.clone()), Some(lookup_spec.clone()), None]
            .into_iter()
            .enumerate()
        {
            // One of them asks for log probabilities too.
            let extra = SubmitOptions {
                logprobs: (i == 0 && j == 0).then_some(3),
                ..SubmitOptions::default()
            };
            let id = s.submit_with(p, greedy(60, speculate), extra).unwrap();
            ids.push((id, i));
        }
    }
    let mut done = 0;
    let mut verified = 0;
    while done < ids.len() {
        s.step(&mut |ev| match ev {
            Event::Done { seq, stats } => {
                let &(_, i) = ids.iter().find(|(id, _)| *id == seq).unwrap();
                assert_eq!(stats.tokens, solo[i], "prompt {i}, sequence {seq}");
                verified += stats.draft_verifies;
                done += 1;
            }
            Event::Error { error, .. } => panic!("{error}"),
            _ => {}
        })
        .unwrap();
    }
    assert!(verified > 0);
    assert_eq!(s.engine().kv().pool_stats().used, 0);
}

/// The tokens a request reports and their log probabilities (with `top` alternatives).
fn logprob_run(s: &mut Scheduler, prompt: &[u32], params: GenParams) -> Vec<(u32, f32, Vec<u32>)> {
    let extra = SubmitOptions {
        logprobs: Some(3),
        ..SubmitOptions::default()
    };
    let seq = s.submit_with(prompt, params, extra).unwrap();
    let (mut out, mut done) = (Vec::new(), false);
    while !done {
        s.step(&mut |ev| match ev {
            Event::Token {
                seq: q,
                token,
                logprobs,
            } if q == seq => {
                let lp = logprobs.expect("asked for");
                out.push((token, lp.logprob, lp.top.iter().map(|&(t, _)| t).collect()));
            }
            Event::Done { seq: q, .. } if q == seq => done = true,
            Event::Error { error, .. } => panic!("{error}"),
            _ => {}
        })
        .unwrap();
    }
    out
}

#[test]
fn every_accepted_token_comes_with_its_log_probabilities() {
    let prompt = &prompts()[2];
    let want = logprob_run(&mut sched(None, 1, 64), prompt, greedy(60, None));
    assert_eq!(want.len(), 60);
    for (what, draft, params) in sources() {
        let mut s = sched(draft, 1, 64);
        let got = logprob_run(&mut s, prompt, greedy(60, Some(params)));
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.0, w.0, "{what}: token {i}");
            assert_eq!(g.2, w.2, "{what}: token {i}'s alternatives");
            // A row of a verification pass and a decode step's row may differ in the last
            // bits (the passes sum attention in another order).
            assert!(
                (g.1 - w.1).abs() < 1e-3,
                "{what}: token {i}: {} against {}",
                g.1,
                w.1
            );
        }
    }
}

#[test]
fn a_draft_with_another_vocabulary_is_refused() {
    let spec = common::models::tiny(1);
    let (other, _) = common::models::synth_model("spec-vocab", &spec, None);
    let mut s = sched(None, 1, 64);
    let err = s.set_draft(engine(&other, 64)).unwrap_err().to_string();
    assert!(err.contains("vocabulary"), "{err}");
    // A request that asks for a draft model where none is set is refused too.
    let p = &prompts()[0];
    let err = s
        .submit(p, greedy(4, Some(SpecParams::model())))
        .unwrap_err()
        .to_string();
    assert!(err.contains("draft model"), "{err}");
}

/// Softmax at temperature 1 (NaN-free logits).
fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &l| m.max(l));
    let e: Vec<f64> = logits.iter().map(|&l| f64::from(l - max).exp()).collect();
    let z: f64 = e.iter().sum();
    e.into_iter().map(|x| x / z).collect()
}

/// The exact distributions of the first token after `prompt` and of the second (over all
/// first tokens), at temperature 1 with nothing cut.
fn exact_first_two(prompt: &[u32]) -> (Vec<f64>, Vec<f64>) {
    let mut e = engine(&load("shakespeare.gguf"), 64);
    let seq = e.kv_mut().new_sequence();
    let mut p1 = Vec::new();
    e.forward(
        &[BatchItem {
            seq,
            tokens: prompt,
            logits: Logits::Last,
        }],
        |_, _, l| p1 = softmax(l),
    )
    .unwrap();
    let mut p2 = vec![0.0; p1.len()];
    for (t1, &w) in p1.iter().enumerate() {
        if w < 1e-7 {
            continue;
        }
        e.forward(
            &[BatchItem {
                seq,
                tokens: &[t1 as u32],
                logits: Logits::Last,
            }],
            |_, _, l| {
                for (acc, p) in p2.iter_mut().zip(softmax(l)) {
                    *acc += w * p;
                }
            },
        )
        .unwrap();
        e.kv_mut().truncate(seq, prompt.len()).unwrap();
    }
    (p1, p2)
}

/// Pearson's chi-square of `counts` against `probs` (bins expected below 5 pooled) and its
/// degrees of freedom.
fn chi_square(counts: &[usize], probs: &[f64]) -> (f64, usize) {
    let n: usize = counts.iter().sum();
    let (mut chi, mut bins) = (0.0, 0usize);
    let (mut pooled_obs, mut pooled_exp) = (0.0, 0.0);
    for (&c, &p) in counts.iter().zip(probs) {
        let e = p * n as f64;
        if e < 5.0 {
            pooled_obs += c as f64;
            pooled_exp += e;
        } else {
            chi += (c as f64 - e).powi(2) / e;
            bins += 1;
        }
    }
    if pooled_exp > 0.0 {
        chi += (pooled_obs - pooled_exp).powi(2) / pooled_exp.max(1e-9);
        bins += 1;
    }
    (chi, bins.saturating_sub(1).max(1))
}

/// The chi-square value a fit exceeds with probability 1e-4 (Wilson-Hilferty).
fn chi_square_critical(df: usize) -> f64 {
    let k = df as f64;
    let z = 3.719;
    k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3)
}

#[test]
fn sampled_tokens_keep_the_target_distribution() {
    let n_runs: usize = std::env::var("BITNET_SPEC_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let m = load("shakespeare.gguf");
    let prompt = m.tokenizer().unwrap().encode(
        "ROMEO:\nO, she doth teach the torches to burn bright!\nROMEO:\nO,",
        true,
        false,
    );
    let (p1, p2) = exact_first_two(&prompt);
    let hot = SamplerConfig {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        ..SamplerConfig::default()
    };
    // (what, draft model, parameters, verifications expected at least)
    let drafts = [
        (
            "draft model",
            Some("shakespeare-draft.gguf"),
            spec(DraftSource::Model, 4, 0.0),
            n_runs / 2,
        ),
        (
            "lookup 1",
            None,
            spec(DraftSource::Lookup { ngram: 1 }, 4, 0.0),
            n_runs / 20,
        ),
    ];
    for (what, draft, params, least) in drafts {
        let mut s = sched(draft, 1, 64);
        let (mut c1, mut c2) = (vec![0usize; p1.len()], vec![0usize; p2.len()]);
        let (mut verifies, mut accepted) = (0, 0);
        for seed in 0..n_runs as u64 {
            // Three tokens: the first comes from the prompt's pass, the second from the
            // verification of a one-token draft (a draft is proposed only where a token
            // may follow it).
            let gp = GenParams {
                max_tokens: 3,
                sampler: SamplerConfig {
                    seed,
                    ..hot.clone()
                },
                ignore_eos: true,
                speculate: Some(params.clone()),
                ..GenParams::default()
            };
            let (st, _) = run(&mut s, &prompt, gp);
            assert_eq!(st.tokens.len(), 3);
            c1[st.tokens[0] as usize] += 1;
            c2[st.tokens[1] as usize] += 1;
            verifies += st.draft_verifies;
            accepted += st.draft_accepted;
        }
        // The second token came out of a verification in many runs, and drafts were both
        // taken and refused: the test sees the acceptance rule at work.
        assert!(verifies > least, "{what}: {verifies} verifications");
        assert!(
            accepted > 0 && accepted < verifies,
            "{what}: {accepted} accepted"
        );
        for (which, counts, probs) in [("first", &c1, &p1), ("second", &c2, &p2)] {
            let (chi, df) = chi_square(counts, probs);
            let crit = chi_square_critical(df);
            assert!(
                chi < crit,
                "{what}: the {which} token's distribution is off the target's: chi-square \
                 {chi:.1} with {df} degrees of freedom (critical {crit:.1})"
            );
        }
    }
}
