//! Every KV cache type through the engine: K and V chosen independently, prefill equals
//! decode (both read the same encoded rows), GQA group sizes 1, 2 and 4, the logits' distance
//! from the f16 cache within a budget per type, and a head dimension the type's block does
//! not divide refused by the type's name.

mod common;

use std::path::PathBuf;

use bitnet_core::CoreError;
use bitnet_core::kv::KvType;
use bitnet_core::synth::SynthSpec;
use common::metrics::{max_rel_diff, rel_l2_f32};
use common::setup::{Opts, decode_all, load, prefill_all, spread_prompt};

/// Prefill and decode read the same encoded rows; only summation order differs.
const PREFILL_DECODE_TOL: f32 = 1e-5;

/// Relative L2 distance of the logits from the f16 cache's, per type (the worse of K and V
/// decides a pair), on the tiny random models. A random tiny model amplifies rounding (f32
/// against f16 already moves them a few percent on the golden model), so these bound gross
/// errors, ordered by the formats' precision; the real accuracy figures come from perplexity
/// and KL divergence on the trained model (docs/kv-cache.md, "Against the golden logits").
fn rel_l2_budget(t: KvType) -> f32 {
    match t {
        KvType::F16 | KvType::F32 => 0.04,
        KvType::Q8_0 | KvType::Q8R => 0.06,
        KvType::Fp8 => 0.15,
        KvType::Q4_0 => 0.5,
        // Signs and a mean magnitude: only finite, non-degenerate logits are promised.
        KvType::B1 => f32::INFINITY,
    }
}

fn model_path(spec: &SynthSpec, tag: &str) -> PathBuf {
    common::models::synth_file(&format!("kv-types-test-{tag}"), spec)
}

fn opts(k: KvType, v: KvType) -> Opts {
    Opts {
        threads: 2,
        pin: false,
        n_ctx: 64,
        k_type: k,
        v_type: v,
        ..Opts::default()
    }
}

/// The pairs tested: every type for both, and the mixed pairs docs/kv-cache.md measures.
fn pairs() -> Vec<(KvType, KvType)> {
    let mut p: Vec<_> = KvType::ALL.iter().map(|&t| (t, t)).collect();
    p.extend([
        (KvType::Q8_0, KvType::Q4_0),
        (KvType::Q8_0, KvType::B1),
        (KvType::F16, KvType::Q8R),
        (KvType::B1, KvType::F16),
    ]);
    p
}

fn check_spec(spec: &SynthSpec, tag: &str) {
    let path = model_path(spec, tag);
    let base = load(&path, &opts(KvType::F16, KvType::F16)).unwrap();
    let toks = spread_prompt(40, base.n_vocab());
    let reference = prefill_all(&base, &toks);
    for (k, v) in pairs() {
        let what = format!("{tag} K {} V {}", k.name(), v.name());
        let model = load(&path, &opts(k, v)).unwrap();
        let a = prefill_all(&model, &toks);
        let b = decode_all(&model, &toks);
        assert!(a.iter().all(|x| x.is_finite()), "{what}: non-finite logits");
        let d = max_rel_diff(&a, &b);
        assert!(d <= PREFILL_DECODE_TOL, "{what}: prefill vs decode {d}");
        let n = model.n_vocab();
        assert!(
            max_rel_diff(&a[..n], &a[n..2 * n]) > 1e-3,
            "{what}: degenerate"
        );
        let e = rel_l2_f32(&a, &reference);
        let budget = rel_l2_budget(k).max(rel_l2_budget(v));
        eprintln!("{what}: rel-L2 vs f16 {e:.4} (budget {budget})");
        assert!(e <= budget, "{what}: rel-L2 vs f16 {e} > {budget}");
    }
    std::fs::remove_file(&path).ok();
}

#[test]
fn every_type_pair_runs_with_group_size_2() {
    // tiny-bitnet: head_dim 64, 4 query heads over 2 KV heads.
    check_spec(&SynthSpec::preset("tiny-bitnet").unwrap(), "g2");
}

#[test]
fn every_type_pair_runs_with_group_sizes_1_and_4() {
    let tiny = SynthSpec::preset("tiny").unwrap();
    let g1 = SynthSpec {
        n_head: 4,
        n_head_kv: 4,
        ..tiny.clone()
    };
    check_spec(&g1, "g1");
    // head_dim 32 (one block per head row), 8 query heads over 2 KV heads.
    let g4 = SynthSpec {
        n_head: 8,
        n_head_kv: 2,
        ..tiny
    };
    check_spec(&g4, "g4");
}

#[test]
fn a_head_dim_the_block_does_not_divide_is_refused_by_name() {
    // head_dim 48: whole f16 / f32 rows, but not whole blocks of 32.
    let spec = SynthSpec {
        n_embd: 768,
        n_head: 16,
        n_head_kv: 4,
        ..SynthSpec::preset("tiny").unwrap()
    };
    let path = model_path(&spec, "hd48");
    for t in KvType::ALL {
        for (k, v) in [(t, KvType::F16), (KvType::F16, t)] {
            let r = load(&path, &opts(k, v)).and_then(|m| m.session(0).map(|_| ()));
            if t.format().block_len == 1 {
                r.unwrap();
                continue;
            }
            let side = if k == t { "k_type" } else { "v_type" };
            match r {
                Err(CoreError::InvalidOption { option, reason }) => {
                    assert_eq!(option, side);
                    assert!(reason.contains(t.name()), "{reason}");
                    assert!(reason.contains("48"), "{reason}");
                }
                other => panic!("{} on {side}: {other:?}", t.name()),
            }
        }
    }
    std::fs::remove_file(&path).ok();
}
