//! Sampler and stop-string tests: greedy and filters against hand-computed expectations,
//! seeded reproducibility, penalties in the documented direction, the sampled distribution
//! against the softmax, and StopMatcher on split and near-miss streams.

use bitnet_core::sampling::{Sampler, SamplerConfig, SamplingError, StopMatcher, Xoshiro256};

fn unfiltered(temperature: f32, seed: u64) -> SamplerConfig {
    SamplerConfig {
        temperature,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        ..SamplerConfig::default()
    }
}

fn random_logits(rng: &mut Xoshiro256, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.next_f64() as f32 - 0.5) * 10.0)
        .collect()
}

fn argmax(l: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in l.iter().enumerate() {
        if x > l[best] {
            best = i;
        }
    }
    best as u32
}

fn softmax(l: &[f32], t: f32) -> Vec<f64> {
    let m = l.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f64> = l.iter().map(|&x| (((x - m) / t) as f64).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| x / s).collect()
}

fn frequencies(s: &mut Sampler, logits: &[f32], draws: usize) -> Vec<f64> {
    let mut counts = vec![0usize; logits.len()];
    for _ in 0..draws {
        counts[s.sample(logits, &[]) as usize] += 1;
    }
    counts.iter().map(|&c| c as f64 / draws as f64).collect()
}

#[test]
fn greedy_picks_argmax_and_lowest_id_on_ties() {
    let mut rng = Xoshiro256::new(1);
    let mut s = Sampler::new(SamplerConfig::greedy(), 300).unwrap();
    for _ in 0..50 {
        let l = random_logits(&mut rng, 300);
        assert_eq!(s.sample(&l, &[]), argmax(&l));
    }
    assert_eq!(s.sample(&[1.0; 300], &[]), 0);
    let mut l = vec![0.0; 300];
    l[7] = 5.0;
    l[9] = 5.0;
    assert_eq!(s.sample(&l, &[]), 7);
    // Temperature 0 with other filters set still means argmax.
    let cfg = SamplerConfig {
        temperature: 0.0,
        ..SamplerConfig::default()
    };
    let mut s = Sampler::new(cfg, 300).unwrap();
    assert_eq!(s.sample(&l, &[]), 7);
}

#[test]
fn same_seed_same_sequence_different_seed_differs() {
    let logits = vec![0.0f32; 1000];
    let run = |seed| {
        let mut s = Sampler::new(unfiltered(1.0, seed), 1000).unwrap();
        (0..64).map(|_| s.sample(&logits, &[])).collect::<Vec<_>>()
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));
    let mut s = Sampler::new(unfiltered(1.0, 42), 1000).unwrap();
    let first: Vec<_> = (0..64).map(|_| s.sample(&logits, &[])).collect();
    s.reseed(42);
    let again: Vec<_> = (0..64).map(|_| s.sample(&logits, &[])).collect();
    assert_eq!(first, again);
}

#[test]
fn xoshiro_is_uniform_enough() {
    let mut r = Xoshiro256::new(7);
    let n = 100_000;
    let mut buckets = [0usize; 10];
    for _ in 0..n {
        let x = r.next_f64();
        assert!((0.0..1.0).contains(&x));
        buckets[(x * 10.0) as usize] += 1;
    }
    for b in buckets {
        assert!((b as f64 / n as f64 - 0.1).abs() < 0.005, "{buckets:?}");
    }
}

#[test]
fn top_k_one_and_tiny_top_p_are_greedy() {
    let mut rng = Xoshiro256::new(2);
    for seed in 0..20 {
        let l = random_logits(&mut rng, 500);
        let mut k1 = Sampler::new(
            SamplerConfig {
                top_k: 1,
                temperature: 1.5,
                seed,
                ..SamplerConfig::default()
            },
            500,
        )
        .unwrap();
        let mut p0 = Sampler::new(
            SamplerConfig {
                top_p: 1e-6,
                top_k: 0,
                min_p: 0.0,
                temperature: 1.5,
                seed,
                ..SamplerConfig::default()
            },
            500,
        )
        .unwrap();
        for _ in 0..5 {
            assert_eq!(k1.sample(&l, &[]), argmax(&l));
            assert_eq!(p0.sample(&l, &[]), argmax(&l));
        }
    }
}

#[test]
fn top_k_restricts_to_the_k_best() {
    let l: Vec<f32> = (0..50).map(|i| i as f32 * 0.01).collect(); // nearly uniform
    let cfg = SamplerConfig {
        top_k: 3,
        ..unfiltered(1.0, 9)
    };
    let mut s = Sampler::new(cfg, 50).unwrap();
    let mut seen = [false; 50];
    for _ in 0..600 {
        let t = s.sample(&l, &[]) as usize;
        assert!(t >= 47, "token {t} is not in the top 3");
        seen[t] = true;
    }
    assert!(seen[47] && seen[48] && seen[49]);
}

#[test]
fn top_p_keeps_the_smallest_covering_set() {
    // Probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.75 keeps exactly the first two.
    let l: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
    let cfg = SamplerConfig {
        top_p: 0.75,
        ..unfiltered(1.0, 3)
    };
    let mut s = Sampler::new(cfg, 4).unwrap();
    let f = frequencies(&mut s, &l, 8000);
    assert_eq!(f[2] + f[3], 0.0, "{f:?}");
    // Renormalised: 0.5/0.8 and 0.3/0.8.
    assert!((f[0] - 0.625).abs() < 0.03, "{f:?}");
}

#[test]
fn min_p_filters_relative_to_the_best() {
    // p = 0.6, 0.3, 0.08, 0.02; min_p 0.1 => cut below 0.06: token 3 never drawn.
    let l: Vec<f32> = [0.6f32, 0.3, 0.08, 0.02].iter().map(|p| p.ln()).collect();
    let cfg = SamplerConfig {
        min_p: 0.1,
        ..unfiltered(1.0, 4)
    };
    let mut s = Sampler::new(cfg, 4).unwrap();
    let f = frequencies(&mut s, &l, 8000);
    assert_eq!(f[3], 0.0, "{f:?}");
    assert!(f[2] > 0.05, "token 2 survives min-p: {f:?}");
}

#[test]
fn sampled_frequencies_match_softmax() {
    let l = [1.0f32, 0.5, -0.3, 2.0, 0.0, -1.5, 1.2, 0.7];
    for (t, seed) in [(1.0f32, 11u64), (0.5, 12)] {
        let mut s = Sampler::new(unfiltered(t, seed), l.len()).unwrap();
        let f = frequencies(&mut s, &l, 20_000);
        let p = softmax(&l, t);
        for (i, (fi, pi)) in f.iter().zip(&p).enumerate() {
            assert!((fi - pi).abs() < 0.015, "temp {t} token {i}: {fi} vs {pi}");
        }
    }
}

fn penalised(cfg: SamplerConfig, logits: &[f32], history: &[u32]) -> u32 {
    Sampler::new(cfg, logits.len())
        .unwrap()
        .sample(logits, history)
}

#[test]
fn repetition_penalty_divides_positive_and_multiplies_negative() {
    let cfg = SamplerConfig {
        repeat_penalty: 1.5,
        ..SamplerConfig::greedy()
    };
    // 2.0 / 1.5 = 1.33 < 1.9: the repeated token loses.
    assert_eq!(penalised(cfg.clone(), &[2.0, 1.9, -1.0], &[]), 0);
    assert_eq!(penalised(cfg.clone(), &[2.0, 1.9, -1.0], &[0]), 1);
    // 2.0 / 1.5 = 1.33 > 1.3: still wins.
    assert_eq!(penalised(cfg.clone(), &[2.0, 1.3], &[0, 0, 0]), 0);
    // Negative logit: -1.0 * 1.5 = -1.5 < -1.2 (dividing would have raised it to -0.67).
    assert_eq!(penalised(cfg.clone(), &[-1.0, -1.2], &[]), 0);
    assert_eq!(penalised(cfg.clone(), &[-1.0, -1.2], &[0]), 1);
    // Out-of-vocabulary history ids are ignored.
    assert_eq!(penalised(cfg.clone(), &[2.0, 1.9], &[99, u32::MAX]), 0);
}

#[test]
fn penalties_only_look_at_the_last_n_tokens() {
    let cfg = SamplerConfig {
        repeat_penalty: 2.0,
        repeat_last_n: 3,
        ..SamplerConfig::greedy()
    };
    let l = [2.0, 1.5, 0.0];
    assert_eq!(
        penalised(cfg.clone(), &l, &[0, 2, 2, 2]),
        0,
        "0 is outside the window"
    );
    assert_eq!(penalised(cfg.clone(), &l, &[2, 0, 2, 2]), 1);
    let off = SamplerConfig {
        repeat_last_n: 0,
        ..cfg
    };
    assert_eq!(
        penalised(off, &l, &[0, 0]),
        0,
        "last_n 0 disables penalties"
    );
}

#[test]
fn frequency_and_presence_penalties_subtract() {
    let freq = SamplerConfig {
        frequency_penalty: 0.3,
        ..SamplerConfig::greedy()
    };
    // 3.0 - 0.3 = 2.7 > 2.5 ; 3.0 - 2 * 0.3 = 2.4 < 2.5.
    assert_eq!(penalised(freq.clone(), &[3.0, 2.5], &[0]), 0);
    assert_eq!(penalised(freq, &[3.0, 2.5], &[0, 0]), 1);
    let pres = SamplerConfig {
        presence_penalty: 0.6,
        ..SamplerConfig::greedy()
    };
    // Presence counts once however often the token appeared: 2.4 < 2.5 either way.
    assert_eq!(penalised(pres.clone(), &[3.0, 2.5], &[0]), 1);
    assert_eq!(penalised(pres.clone(), &[3.0, 2.5, 2.45], &[0, 0, 0, 0]), 1);
    assert_eq!(penalised(pres, &[3.0, 2.5, 2.45], &[0, 1]), 2);
    // Applying a sampler twice with the same history gives the same answer (counts reset).
    let cfg = SamplerConfig {
        frequency_penalty: 0.3,
        ..SamplerConfig::greedy()
    };
    let mut s = Sampler::new(cfg, 2).unwrap();
    assert_eq!(s.sample(&[3.0, 2.5], &[0]), 0);
    assert_eq!(s.sample(&[3.0, 2.5], &[0]), 0);
}

#[test]
fn logit_bias_can_ban_and_promote() {
    let cfg = SamplerConfig {
        logit_bias: vec![(0, f32::NEG_INFINITY), (2, 5.0)],
        ..SamplerConfig::greedy()
    };
    assert_eq!(penalised(cfg.clone(), &[10.0, 1.0, 0.0], &[]), 2);
    let cfg = SamplerConfig {
        logit_bias: vec![(0, f32::NEG_INFINITY)],
        ..unfiltered(1.0, 5)
    };
    let mut s = Sampler::new(cfg, 3).unwrap();
    for _ in 0..500 {
        assert_ne!(s.sample(&[10.0, 0.0, 0.0], &[]), 0);
    }
}

#[test]
fn nan_and_infinite_logits_never_panic() {
    let n = 16;
    for cfg in [
        SamplerConfig::greedy(),
        SamplerConfig::default(),
        unfiltered(1.0, 1),
        SamplerConfig {
            repeat_penalty: 1.3,
            frequency_penalty: -1e38,
            ..SamplerConfig::default()
        },
    ] {
        let mut s = Sampler::new(cfg, n).unwrap();
        let nan = vec![f32::NAN; n];
        assert!((s.sample(&nan, &[1, 2]) as usize) < n);
        let mut mixed = vec![f32::NAN; n];
        mixed[5] = 1.0;
        assert_eq!(s.sample(&mixed, &[]), 5);
        let mut inf = vec![0.0; n];
        inf[3] = f32::INFINITY;
        inf[4] = f32::NEG_INFINITY;
        assert_eq!(s.sample(&inf, &[]), 3);
        assert!((s.sample(&vec![f32::NEG_INFINITY; n], &[0]) as usize) < n);
        assert_eq!(s.sample(&[], &[]), 0);
        assert!((s.sample(&vec![0.0; 3 * n], &[]) as usize) < n);
    }
}

#[test]
fn wrong_logit_count_is_an_error_in_try_sample() {
    let mut s = Sampler::new(SamplerConfig::greedy(), 10).unwrap();
    assert_eq!(
        s.try_sample(&[0.0; 9], &[]),
        Err(SamplingError::LogitsLength {
            got: 9,
            n_vocab: 10
        })
    );
    assert_eq!(s.try_sample(&[0.0; 10], &[]), Ok(0));
}

#[test]
fn nonsense_configs_are_rejected() {
    let d = SamplerConfig::default;
    let bad = [
        SamplerConfig {
            temperature: -0.1,
            ..d()
        },
        SamplerConfig {
            temperature: f32::NAN,
            ..d()
        },
        SamplerConfig {
            temperature: f32::INFINITY,
            ..d()
        },
        SamplerConfig { top_p: 0.0, ..d() },
        SamplerConfig { top_p: 1.01, ..d() },
        SamplerConfig {
            top_p: f32::NAN,
            ..d()
        },
        SamplerConfig { min_p: -0.1, ..d() },
        SamplerConfig {
            min_p: f32::NAN,
            ..d()
        },
        SamplerConfig {
            repeat_penalty: 0.0,
            ..d()
        },
        SamplerConfig {
            frequency_penalty: f32::NAN,
            ..d()
        },
        SamplerConfig {
            presence_penalty: f32::INFINITY,
            ..d()
        },
        SamplerConfig {
            logit_bias: vec![(1, f32::INFINITY)],
            ..d()
        },
    ];
    for cfg in bad {
        assert!(
            matches!(
                Sampler::new(cfg.clone(), 10),
                Err(SamplingError::InvalidParam { .. })
            ),
            "{cfg:?} should be rejected"
        );
    }
    let oob = SamplerConfig {
        logit_bias: vec![(10, 1.0)],
        ..d()
    };
    assert!(matches!(
        Sampler::new(oob, 10),
        Err(SamplingError::BiasTokenOutOfRange { token: 10, .. })
    ));
    assert!(matches!(
        Sampler::new(d(), 0),
        Err(SamplingError::BadVocabSize(0))
    ));
    assert!(SamplerConfig::default().validate(10).is_ok());
    assert!(SamplerConfig::greedy().validate(10).is_ok());
}

#[test]
fn defaults_are_llama_cpp_like() {
    let d = SamplerConfig::default();
    assert_eq!(
        (
            d.temperature,
            d.top_k,
            d.top_p,
            d.min_p,
            d.repeat_penalty,
            d.repeat_last_n
        ),
        (0.8, 40, 0.95, 0.05, 1.0, 64)
    );
    assert_eq!(SamplerConfig::greedy().temperature, 0.0);
}

/// Feeds chunks, returning (all emitted text, stopped).
fn stream(stops: &[&str], chunks: &[&str]) -> (String, bool) {
    let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
    let mut out = String::new();
    for c in chunks {
        let f = m.feed(c);
        out.push_str(f.emit);
        if f.stopped {
            assert!(m.stopped());
            return (out, true);
        }
    }
    out.push_str(m.finish());
    (out, false)
}

#[test]
fn stop_matcher_without_stops_passes_everything() {
    let mut m = StopMatcher::new(vec![String::new()]);
    assert_eq!(m.feed("abc<").emit, "abc<");
    assert_eq!(m.finish(), "");
}

#[test]
fn stop_matcher_finds_stop_in_one_chunk() {
    assert_eq!(
        stream(&["</s>"], &["Hello</s>world"]),
        ("Hello".into(), true)
    );
    assert_eq!(stream(&["</s>"], &["</s>"]), ("".into(), true));
}

#[test]
fn stop_matcher_holds_back_and_catches_split_stop() {
    let mut m = StopMatcher::new(vec!["</s>".into()]);
    assert_eq!(m.feed("Hel").emit, "Hel");
    assert_eq!(m.feed("lo<").emit, "lo", "'<' could start the stop");
    assert_eq!(m.feed("/").emit, "");
    let f = m.feed("s>rest");
    assert!(f.stopped);
    assert_eq!(f.emit, "");
    assert_eq!(m.feed("more").emit, "", "nothing after a stop");
    assert_eq!(m.finish(), "");
}

#[test]
fn stop_matcher_near_miss_releases_held_text() {
    let mut m = StopMatcher::new(vec!["</s>".into()]);
    assert_eq!(m.feed("a<").emit, "a");
    let f = m.feed("/x");
    assert!(!f.stopped);
    assert_eq!(f.emit, "</x");
    assert_eq!(m.feed("</").emit, "");
    assert_eq!(m.finish(), "</", "held text comes out at the end");
    assert_eq!(
        stream(&["</s>"], &["x<", "/", "s", "!"]),
        ("x</s!".into(), false)
    );
}

#[test]
fn stop_matcher_earliest_stop_wins_and_overlaps_work() {
    assert_eq!(
        stream(&["END", "\n\n"], &["one\n", "\ntwo END"]),
        ("one".into(), true)
    );
    // The stop's prefix overlaps itself: "aab" inside "aaab".
    assert_eq!(stream(&["aab"], &["aa", "ab"]), ("a".into(), true));
    assert_eq!(
        stream(&["aab"], &["a", "a", "a", "c"]),
        ("aaac".into(), false)
    );
}

#[test]
fn stop_matcher_handles_multibyte_text() {
    assert_eq!(
        stream(&["。\n"], &["你好", "。", "\n后面"]),
        ("你好".into(), true)
    );
    let mut m = StopMatcher::new(vec!["éé".into()]);
    assert_eq!(m.feed("café").emit, "caf");
    assert_eq!(m.feed("s").emit, "és");
}

#[test]
fn top_p_on_a_large_vocab_matches_the_fully_sorted_path() {
    // top_k 0 takes the pruned top-p path; top_k = n_vocab sorts everything first. Both
    // must keep the same prefix, in the same order, hence draw the same tokens.
    let n = 5000;
    let mut rng = Xoshiro256::new(77);
    for (top_p, spread) in [(0.9f32, 10.0f32), (0.5, 1.0), (0.99, 0.1), (0.3, 40.0)] {
        let l: Vec<f32> = (0..n)
            .map(|_| (rng.next_f64() as f32 - 0.5) * spread)
            .collect();
        let cfg = |top_k| SamplerConfig {
            top_k,
            top_p,
            ..unfiltered(1.0, 5)
        };
        let mut pruned = Sampler::new(cfg(0), n).unwrap();
        let mut full = Sampler::new(cfg(n), n).unwrap();
        // Reference prefix: sort everything, accumulate in f64.
        let p = softmax(&l, 1.0);
        let mut ids: Vec<usize> = (0..n).collect();
        ids.sort_by(|&a, &b| l[b].total_cmp(&l[a]).then(a.cmp(&b)));
        let mut cum = 0.0;
        let keep = ids
            .iter()
            .position(|&i| {
                cum += p[i];
                cum >= top_p as f64
            })
            .map_or(n, |i| i + 1);
        let kept: std::collections::HashSet<u32> = ids[..keep].iter().map(|&i| i as u32).collect();
        for _ in 0..300 {
            let a = pruned.sample(&l, &[]);
            assert_eq!(a, full.sample(&l, &[]), "top_p {top_p} spread {spread}");
            assert!(kept.contains(&a), "token {a} outside the top-p set");
        }
    }
}

/// `restrict_next` (token healing): the next sample picks only allowed tokens, greedy or
/// not, with the allowed tokens' own relative odds; the sample after it is free again.
#[test]
fn a_restriction_holds_for_the_next_sample_only() {
    let mut rng = Xoshiro256::new(5);
    let n = 64;
    let allowed = vec![40u32, 3, 17, 3];
    for cfg in [
        unfiltered(0.0, 1),
        unfiltered(1.0, 2),
        SamplerConfig::default(),
    ] {
        let mut s = Sampler::new(cfg.clone(), n).unwrap();
        for _ in 0..50 {
            let mut logits = random_logits(&mut rng, n);
            // The best token overall is not allowed.
            logits[60] = 100.0;
            s.restrict_next(allowed.clone());
            let t = s.sample(&logits, &[]);
            assert!(allowed.contains(&t), "{cfg:?}: {t} is not allowed");
            if cfg.temperature == 0.0 {
                let best = *allowed
                    .iter()
                    .max_by(|&&a, &&b| logits[a as usize].total_cmp(&logits[b as usize]))
                    .unwrap();
                assert_eq!(t, best, "greedy takes the best allowed token");
            }
            assert_eq!(
                s.sample(&logits, &[]),
                60,
                "{cfg:?}: the next sample is free"
            );
        }
    }
    // Among the allowed, the odds are the softmax over them alone.
    let logits: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.5).collect();
    let mut s = Sampler::new(unfiltered(1.0, 9), n).unwrap();
    let draws = 20_000;
    let mut hits = [0usize; 3];
    let ids = [3u32, 17, 40];
    for _ in 0..draws {
        s.restrict_next(ids.to_vec());
        let t = s.sample(&logits, &[]);
        hits[ids.iter().position(|&i| i == t).expect("allowed")] += 1;
    }
    let sub: Vec<f32> = ids.iter().map(|&i| logits[i as usize]).collect();
    for (p, h) in softmax(&sub, 1.0).iter().zip(hits) {
        let f = h as f64 / draws as f64;
        assert!((f - p).abs() < 0.02, "frequency {f} vs probability {p}");
    }
    // A row whose allowed logits are all impossible still yields an allowed token.
    let mut broken = vec![f32::NAN; n];
    broken[60] = 1.0;
    let mut s = Sampler::new(unfiltered(0.0, 1), n).unwrap();
    s.restrict_next(vec![17, 9]);
    assert_eq!(s.sample(&broken, &[]), 9);
}
