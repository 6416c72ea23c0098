//! The sampled attention entropy: a model whose queries are all zero attends uniformly, so
//! every layer's entropy is ln(positions); sampling follows its interval; and turning the
//! statistics on changes no logit.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use bitnet_core::engine::{BatchItem, Engine, EngineOptions, Logits};
use bitnet_core::model::Model;
use bitnet_core::synth::SynthSpec;
use bitnet_kernels::Isa;
use common::models::{engine_with, synth_model, tiny, unpinned};

fn model(tag: &str, zero_share: f32) -> (Arc<Model>, PathBuf) {
    let spec = SynthSpec {
        n_ctx: 1024,
        zero_share,
        ..tiny(2)
    };
    synth_model(tag, &spec, Some(Isa::Scalar))
}

fn engine(m: &Arc<Model>, threads: usize, every: usize) -> Engine {
    let opts = EngineOptions {
        threads,
        n_ctx: 128,
        batch: 32,
        attn_entropy_every: every,
        ..unpinned()
    };
    engine_with(m, opts)
}

/// Every query row's probabilities sum to one, so the mass tracked over `n_tokens` tokens
/// is layers x heads x tokens, within `rel`.
fn assert_mass_sums_to_one_per_row(
    e: &Engine,
    seq: bitnet_core::kv::SeqId,
    n_tokens: usize,
    rel: f64,
    what: &str,
) {
    let cfg = e.model().config();
    let mass: f64 = e
        .kv()
        .sequence(seq)
        .unwrap()
        .attention_mass()
        .unwrap()
        .iter()
        .map(|&x| f64::from(x))
        .sum();
    let rows = (n_tokens * cfg.n_layer * cfg.n_head) as f64;
    assert!((mass - rows).abs() < rel * rows, "{what}: {mass} vs {rows}");
}

/// Feeds `prompt` then each of `decode` one at a time; returns every logits row.
fn run(e: &mut Engine, prompt: &[u32], decode: &[u32]) -> Vec<Vec<f32>> {
    let seq = e.kv_mut().new_sequence();
    let mut rows = Vec::new();
    let item = BatchItem {
        seq,
        tokens: prompt,
        logits: Logits::All,
    };
    e.forward(&[item], |_, _, r| rows.push(r.to_vec())).unwrap();
    for t in decode {
        let item = BatchItem {
            seq,
            tokens: std::slice::from_ref(t),
            logits: Logits::Last,
        };
        e.forward(&[item], |_, _, r| rows.push(r.to_vec())).unwrap();
    }
    e.kv_mut().free_sequence(seq).unwrap();
    rows
}

#[test]
fn zero_queries_attend_uniformly_so_the_entropy_is_ln_n() {
    // All but about one in 2^24 weights zero: with this seed none is, so every query is
    // zero, every score equal, and each row of n positions has entropy ln(n).
    let (m, path) = model("entropy-uniform", 1.0 - f32::EPSILON / 2.0);
    for threads in [1, 2] {
        let mut e = engine(&m, threads, 4);
        assert!(e.attention_entropy().is_none(), "nothing sampled yet");
        let seq = e.kv_mut().new_sequence();
        let prompt: Vec<u32> = (3..23).collect();
        let item = BatchItem {
            seq,
            tokens: &prompt,
            logits: Logits::Last,
        };
        e.forward(&[item], |_, _, _| {}).unwrap();
        assert!(
            e.attention_entropy().is_none(),
            "a prompt is not a decode row"
        );
        // The first decode pass is sampled: 21 positions.
        let item = BatchItem {
            seq,
            tokens: &[5],
            logits: Logits::Last,
        };
        e.forward(&[item], |_, _, _| {}).unwrap();
        let h = e.attention_entropy().expect("sampled").to_vec();
        assert_eq!(h.len(), 2, "one per layer");
        for (l, &h) in h.iter().enumerate() {
            assert!((h - 21f32.ln()).abs() < 1e-4, "layer {l}: {h} vs ln 21");
        }
        // Every 4th decode pass: passes 2..4 are not sampled, the 5th is.
        for t in 0..3 {
            let item = BatchItem {
                seq,
                tokens: &[6 + t],
                logits: Logits::Last,
            };
            e.forward(&[item], |_, _, _| {}).unwrap();
        }
        assert_eq!(e.attention_entropy_samples(), 1);
        let item = BatchItem {
            seq,
            tokens: &[9],
            logits: Logits::Last,
        };
        e.forward(&[item], |_, _, _| {}).unwrap();
        assert_eq!(e.attention_entropy_samples(), 2);
        let w = bitnet_core::engine::ENTROPY_EMA_WEIGHT;
        let want = 21f32.ln() + w * (25f32.ln() - 21f32.ln());
        for &h in e.attention_entropy().unwrap() {
            assert!((h - want).abs() < 1e-4, "{h} vs {want}");
        }
    }
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_real_model_gives_entropies_between_zero_and_ln_n() {
    let (m, path) = model("entropy-bounds", 1.0 / 3.0);
    let mut e = engine(&m, 2, 1);
    let prompt: Vec<u32> = (3..30).collect();
    run(&mut e, &prompt, &[7]);
    for &h in e.attention_entropy().unwrap() {
        assert!(h > 0.0 && h <= 28f32.ln() + 1e-4, "{h}");
    }
    std::fs::remove_file(&path).ok();
}

#[test]
fn the_statistics_change_no_logit() {
    let (m, path) = model("entropy-logits", 1.0 / 3.0);
    let prompt: Vec<u32> = (3..30).collect();
    let decode = [9u32, 14, 2, 77, 31];
    for threads in [1, 2] {
        let off = run(&mut engine(&m, threads, 0), &prompt, &decode);
        let on = run(&mut engine(&m, threads, 1), &prompt, &decode);
        assert_eq!(off, on, "entropy sampling on, {threads} threads");
        let mut e = engine(&m, threads, 0);
        let seq = e.kv_mut().new_sequence();
        e.kv_mut().track_attention_mass(seq, true).unwrap();
        let mut rows = Vec::new();
        let item = BatchItem {
            seq,
            tokens: &prompt,
            logits: Logits::All,
        };
        e.forward(&[item], |_, _, r| rows.push(r.to_vec())).unwrap();
        for t in &decode {
            let item = BatchItem {
                seq,
                tokens: std::slice::from_ref(t),
                logits: Logits::Last,
            };
            e.forward(&[item], |_, _, r| rows.push(r.to_vec())).unwrap();
        }
        assert_eq!(off, rows, "mass tracking on, {threads} threads");
        let n = prompt.len() + decode.len();
        assert_mass_sums_to_one_per_row(&e, seq, n, 1e-2, &format!("{threads} threads"));
    }
    std::fs::remove_file(&path).ok();
}

/// Rows past 512 positions are attended in chunks; the statistics then scale each chunk's
/// probabilities by its share of the row. A 600-token prompt (fed 128 at a time) and
/// decoded tokens at positions 600 and up (rows of two chunks): with zero queries the
/// entropy is still ln(positions); on a real model the statistics change no logit (with
/// them on, a decoded token's chunks run in turn on one thread; with them off, on both),
/// and the tracked mass still sums to one per query row.
#[test]
fn chunked_rows_keep_the_statistics_exact() {
    let engine_long = |m: &Arc<Model>, threads: usize, every: usize| {
        let opts = EngineOptions {
            threads,
            pin: false,
            n_ctx: 640,
            batch: 128,
            attn_entropy_every: every,
            ..EngineOptions::default()
        };
        Engine::new(m.clone(), &opts).unwrap()
    };
    let prompt: Vec<u32> = (0..600).map(|i| 3 + (i * 7) % 200).collect();
    let decode = [9u32, 14, 2];
    // The prompt in pieces, then the decoded tokens: the decoded tokens' logits.
    let feed = |e: &mut Engine, seq| {
        for piece in prompt.chunks(128) {
            let item = BatchItem {
                seq,
                tokens: piece,
                logits: Logits::None,
            };
            e.forward(&[item], |_, _, _| {}).unwrap();
        }
        let mut rows = Vec::new();
        for t in &decode {
            let item = BatchItem {
                seq,
                tokens: std::slice::from_ref(t),
                logits: Logits::Last,
            };
            e.forward(&[item], |_, _, r| rows.push(r.to_vec())).unwrap();
        }
        rows
    };

    let (m, path) = model("entropy-chunks-uniform", 1.0 - f32::EPSILON / 2.0);
    for threads in [1, 2] {
        let mut e = engine_long(&m, threads, 1);
        let seq = e.kv_mut().new_sequence();
        feed(&mut e, seq);
        // The last decoded token attends to 603 positions (EMA over 601..603: within 0.005).
        for &h in e.attention_entropy().unwrap() {
            assert!(
                (h - 603f32.ln()).abs() < 5e-3,
                "{threads} threads: {h} vs ln 603"
            );
        }
    }
    std::fs::remove_file(&path).ok();

    let (m, path) = model("entropy-chunks-logits", 1.0 / 3.0);
    for threads in [1, 2] {
        let mut e = engine_long(&m, threads, 0);
        let seq = e.kv_mut().new_sequence();
        let off = feed(&mut e, seq);
        let mut e = engine_long(&m, threads, 1);
        let seq = e.kv_mut().new_sequence();
        assert_eq!(off, feed(&mut e, seq), "entropy on, {threads} threads");
        let mut e = engine_long(&m, threads, 0);
        let seq = e.kv_mut().new_sequence();
        e.kv_mut().track_attention_mass(seq, true).unwrap();
        assert_eq!(off, feed(&mut e, seq), "mass on, {threads} threads");
        let n = prompt.len() + decode.len();
        assert_mass_sums_to_one_per_row(&e, seq, n, 1e-3, &format!("{threads} threads"));
    }
    std::fs::remove_file(&path).ok();
}
