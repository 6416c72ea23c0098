//! The optimized engine on the golden tiny model, against the logits of the engine that
//! wrote each file (bitnet.cpp for I2_S, llama.cpp for TQ2_0 / TQ1_0), with the tolerances
//! of testdata/README.md, for every kernel set this CPU runs, prefill and decode; and again
//! with a q8_0 K and V cache, which must move the logits by less than the same tolerances
//! (against the golden logits, and against our own f16-cache logits).
//!
//! `BITNET_TEST_KERNELS=neon,dotprod,i8mm` (the emulated ARM pass, `scripts/test-arm.sh`)
//! tests exactly the sets named, decode included for each; under emulation the scalar
//! reference is the slow part, and the x86 pass already runs it.

mod common;

use bitnet_core::kv::KvType;
use bitnet_kernels::Isa;
use common::metrics::{Agreement, compare};

const MAX_REL_L2: f64 = 0.07;
const MIN_COSINE: f64 = 0.998;
const MIN_TOP1: usize = 35;

fn check(what: &str, a: Agreement) {
    eprintln!("{what}: {a}");
    assert!(a.rel_l2 <= MAX_REL_L2, "{what}: {a}");
    assert!(a.cosine >= MIN_COSINE, "{what}: {a}");
    assert!(a.top1 >= MIN_TOP1, "{what}: {a}");
}

fn run(gguf: &str, json: &str, logits: &str) {
    run_with_kv(gguf, json, logits, KvType::F16);
    run_with_kv(gguf, json, logits, KvType::Q8_0);
}

/// The golden comparison with `kv` as both the K and the V cache type.
fn run_with_kv(gguf: &str, json: &str, logits: &str, kv: KvType) {
    let (g, j, l) = (
        common::golden(gguf),
        common::golden(json),
        common::golden(logits),
    );
    let tokens = common::golden_tokens(&j);
    let theirs = common::read_f32s(&l);
    let (sets, decode_sets) = kernel_sets();
    for isa in sets {
        let opts = common::setup::Opts {
            isa: Some(isa),
            threads: test_threads(),
            pin: false,
            n_ctx: 64,
            k_type: kv,
            v_type: kv,
            ..common::setup::Opts::default()
        };
        let model = common::setup::load(&g, &opts).unwrap();
        let n_vocab = model.n_vocab();
        let mut s = model.session(64).unwrap();
        let ours = s.eval(&tokens, true).unwrap().to_vec();
        let kv_name = kv.name();
        check(
            &format!("{gguf} {} kv {kv_name} prefill", isa.name()),
            compare(&ours, &theirs, n_vocab),
        );
        if kv != KvType::F16 {
            let f16 = common::setup::Opts {
                k_type: KvType::F16,
                v_type: KvType::F16,
                ..opts.clone()
            };
            let model = common::setup::load(&g, &f16).unwrap();
            let base = model
                .session(64)
                .unwrap()
                .eval(&tokens, true)
                .unwrap()
                .to_vec();
            check(
                &format!("{gguf} {} kv {kv_name} vs kv f16", isa.name()),
                compare(&ours, &base, n_vocab),
            );
        }
        if decode_sets.contains(&isa) {
            let mut s = model.session(64).unwrap();
            let mut dec = Vec::with_capacity(ours.len());
            for &t in &tokens {
                dec.extend_from_slice(s.eval(&[t], false).unwrap());
            }
            check(
                &format!("{gguf} {} kv {kv_name} decode", isa.name()),
                compare(&dec, &theirs, n_vocab),
            );
        }
    }
}

/// Two threads, or `BITNET_TEST_THREADS` (the emulated ARM pass runs one: see
/// `scripts/test-arm.sh`).
fn test_threads() -> usize {
    std::env::var("BITNET_TEST_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

/// The sets to run prefill with, and those to run decode with too: every set this CPU runs
/// and the best for decode, or the sets `BITNET_TEST_KERNELS` names (each must run here).
fn kernel_sets() -> (Vec<Isa>, Vec<Isa>) {
    match std::env::var("BITNET_TEST_KERNELS") {
        Ok(names) if !names.trim().is_empty() => {
            let sets: Vec<Isa> = names
                .split(',')
                .map(|n| Isa::parse(n).and_then(Isa::require).unwrap())
                .collect();
            (sets.clone(), sets)
        }
        _ => (Isa::available(), vec![Isa::best()]),
    }
}

#[test]
fn engine_matches_bitnet_cpp_on_i2_s() {
    run(
        "gguf/bitnet-tiny-i2_s.gguf",
        "bitnet-tiny-i2_s.json",
        "logits/bitnet-i2_s.t1.f32",
    );
}

#[test]
fn engine_matches_llama_cpp_on_tq2_0() {
    run(
        "gguf/upstream-tiny-tq2_0.gguf",
        "upstream-tiny-tq2_0.json",
        "logits/upstream-tq2_0.t1.f32",
    );
}

#[test]
fn engine_matches_llama_cpp_on_tq1_0() {
    run(
        "gguf/upstream-tiny-tq1_0.gguf",
        "upstream-tiny-tq1_0.json",
        "logits/upstream-tq2_0.t1.f32",
    );
}
