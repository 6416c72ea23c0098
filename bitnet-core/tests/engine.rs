//! Engine tests on tiny synthetic models: prefill equals decode, results do not depend on the
//! thread count, the load mode or the prefill chunking, every weight layout and architecture
//! variant runs, and bad input gives typed errors.

mod common;

use std::path::PathBuf;

use bitnet_core::CoreError;
use bitnet_core::config::ActBits;
use bitnet_core::model::{HeadMode, LoadMode};
use bitnet_core::synth::SynthSpec;
use bitnet_gguf::TensorType;
use bitnet_kernels::Isa;
use bitnet_kernels::float::RowFormat;
use common::metrics::{max_rel_diff, rel_l2_f32};
use common::models::preset;
use common::setup::{decode_all, prefill_all, spread_prompt};

/// Largest |prefill - decode| logit difference, relative to the largest |logit|. Ternary
/// products are exact integers and attention reads the same f16 cache either way; only the
/// float head may sum in another order in its multi-token kernel.
const PREFILL_DECODE_TOL: f32 = 1e-5;

/// Scalar vs SIMD kernels: reductions (norms, softmax, head dots) round differently, and a
/// flipped int8 rounding step propagates; on a tiny random model this stays small.
const ISA_REL_L2_TOL: f32 = 0.05;

fn model_path(spec: &SynthSpec, tag: &str) -> PathBuf {
    common::models::synth_file(&format!("engine-test-{tag}"), spec)
}

fn opts(threads: usize) -> common::setup::Opts {
    common::setup::Opts {
        threads,
        pin: false,
        n_ctx: 64,
        ..common::setup::Opts::default()
    }
}

fn check_prefill_matches_decode(spec: &SynthSpec, tag: &str, o: &common::setup::Opts) {
    let path = model_path(spec, tag);
    let model = common::setup::load(&path, o).unwrap();
    // Longer than one head batch (32) so all-logits prefill crosses a batch boundary.
    let toks = spread_prompt(40, model.n_vocab());
    let a = prefill_all(&model, &toks);
    let b = decode_all(&model, &toks);
    assert_eq!(a.len(), toks.len() * model.n_vocab());
    assert!(a.iter().all(|v| v.is_finite()), "{tag}: non-finite logits");
    let d = max_rel_diff(&a, &b);
    assert!(
        d <= PREFILL_DECODE_TOL,
        "{tag}: prefill vs decode differ by {d}"
    );
    // The logits are not degenerate: positions differ from each other.
    let v = model.n_vocab();
    assert!(
        max_rel_diff(&a[..v], &a[v..2 * v]) > 1e-3,
        "{tag}: positions identical"
    );
    std::fs::remove_file(&path).ok();
}

#[test]
fn prefill_equals_decode_across_variants() {
    let mut cases: Vec<(&str, SynthSpec, common::setup::Opts)> = vec![
        ("tiny", preset("tiny"), opts(2)),
        ("tiny-bitnet", preset("tiny-bitnet"), opts(2)),
        ("tiny-llama", preset("tiny-llama"), opts(1)),
    ];
    for (tag, ty) in [
        ("i2s", TensorType::I2_S),
        ("tq1", TensorType::TQ1_0),
        ("q1", TensorType::Q1_0),
        ("f16w", TensorType::F16),
    ] {
        cases.push((
            tag,
            SynthSpec {
                weight_type: ty,
                ..preset("tiny")
            },
            opts(2),
        ));
    }
    cases.push((
        "binary-acts",
        SynthSpec {
            weight_type: TensorType::Q1_0,
            act_bits: ActBits::Binary,
            ..preset("tiny")
        },
        opts(2),
    ));
    cases.push((
        "scales-q6k-head",
        SynthSpec {
            proj_scales: true,
            head_type: Some(TensorType::Q6_K),
            ..preset("tiny")
        },
        opts(2),
    ));
    cases.push((
        "head-q8",
        preset("tiny"),
        common::setup::Opts {
            head: Some(HeadMode::Q8),
            ..opts(2)
        },
    ));
    cases.push((
        "chunk5",
        preset("tiny"),
        common::setup::Opts {
            prefill_chunk: 5,
            ..opts(2)
        },
    ));
    for (tag, spec, o) in &cases {
        check_prefill_matches_decode(spec, tag, o);
    }
}

#[test]
fn one_and_two_threads_and_load_modes_are_bit_identical() {
    let spec = SynthSpec {
        weight_type: TensorType::I2_S,
        ..preset("tiny")
    };
    let path = model_path(&spec, "threads");
    let toks = spread_prompt(23, 512);
    let run = |o: common::setup::Opts| {
        let model = common::setup::load(&path, &o).unwrap();
        (prefill_all(&model, &toks), decode_all(&model, &toks[..6]))
    };
    let (p1, d1) = run(opts(1));
    let (p2, d2) = run(opts(2));
    let (p3, d3) = run(opts(3));
    let (pr, dr) = run(common::setup::Opts {
        mode: LoadMode::Read,
        ..opts(2)
    });
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&p1), bits(&p2), "prefill: 1 vs 2 threads");
    assert_eq!(bits(&d1), bits(&d2), "decode: 1 vs 2 threads");
    assert_eq!(bits(&p1), bits(&p3), "prefill: 1 vs 3 threads");
    assert_eq!(bits(&d1), bits(&d3), "decode: 1 vs 3 threads");
    assert_eq!(bits(&p2), bits(&pr), "prefill: mmap vs read");
    assert_eq!(bits(&d2), bits(&dr), "decode: mmap vs read");
    std::fs::remove_file(&path).ok();
}

#[test]
fn many_chunks_per_thread_are_bit_identical_to_one_thread() {
    // Wide enough that every product is cut into several chunks per thread (chunks are at
    // least 64 KiB of weights): ffn 2048 x 512 I2_S is 256 KiB (4 chunks), the F16 head
    // 4096 x 512 is 4 MiB (dozens of chunks); threads claim chunks in whatever order the
    // scheduler lets them (a decode product's steps of its own share, then the others'),
    // and the result must not depend on it.
    let spec = SynthSpec {
        weight_type: TensorType::I2_S,
        n_embd: 512,
        n_ff: 2048,
        n_head: 8,
        n_head_kv: 2,
        n_layer: 1,
        n_vocab: 4096,
        ..preset("tiny")
    };
    let path = model_path(&spec, "chunks");
    let toks = spread_prompt(12, 4096);
    let run = |threads: usize, head: HeadMode| {
        let o = common::setup::Opts {
            head: Some(head),
            ..opts(threads)
        };
        let model = common::setup::load(&path, &o).unwrap();
        (prefill_all(&model, &toks), decode_all(&model, &toks[..4]))
    };
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for head in [HeadMode::Native, HeadMode::Q8] {
        let (p1, d1) = run(1, head);
        for threads in [2, 3] {
            let (p, d) = run(threads, head);
            assert_eq!(
                bits(&p1),
                bits(&p),
                "prefill: 1 vs {threads} threads, {head:?}"
            );
            assert_eq!(
                bits(&d1),
                bits(&d),
                "decode: 1 vs {threads} threads, {head:?}"
            );
        }
    }
    std::fs::remove_file(&path).ok();
}

/// Q8_0 head (weights and hidden state quantized to Q8_0) vs the file's F16 head.
const HEAD_Q8_REL_L2_TOL: f32 = 0.05;

/// A Q8_0 head whose vocabulary is not whole row groups of the kernels' layout (4100 = 256
/// groups of 16, and 4 rows): prefill equals decode, every thread count gives the same
/// bits, and the logits stay near the float head's. Then a tied Q8_0 embedding, which a Q8_0
/// head reads back from its own copy: the file's rows are neither kept nor mapped.
#[test]
fn a_q8_head_off_the_row_groups() {
    let spec = SynthSpec {
        n_vocab: 4100,
        ..preset("tiny")
    };
    let q8 = |o: common::setup::Opts| common::setup::Opts {
        head: Some(HeadMode::Q8),
        ..o
    };
    check_prefill_matches_decode(&spec, "q8-head-4100", &q8(opts(2)));
    let toks = spread_prompt(12, spec.n_vocab);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let path = model_path(&spec, "q8-head-4100-threads");
    let run = |o: common::setup::Opts| {
        let model = common::setup::load(&path, &o).unwrap();
        (prefill_all(&model, &toks), decode_all(&model, &toks[..4]))
    };
    let (p1, d1) = run(q8(opts(1)));
    for threads in [2, 3] {
        let (p, d) = run(q8(opts(threads)));
        assert_eq!(bits(&p1), bits(&p), "prefill: 1 vs {threads} threads");
        assert_eq!(bits(&d1), bits(&d), "decode: 1 vs {threads} threads");
    }
    let (pn, _) = run(opts(2));
    let e = rel_l2_f32(&p1, &pn);
    assert!(
        e > 0.0 && e <= HEAD_Q8_REL_L2_TOL,
        "q8 vs f16 head: rel-L2 {e}"
    );
    std::fs::remove_file(&path).ok();

    let tied = SynthSpec {
        embd_type: TensorType::Q8_0,
        ..spec
    };
    let path = model_path(&tied, "q8-head-4100-tied");
    let mut logits = Vec::new();
    for mode in [LoadMode::Mmap, LoadMode::Read] {
        let model =
            common::setup::load(&path, &q8(common::setup::Opts { mode, ..opts(2) })).unwrap();
        let m = model.load_stats().memory;
        assert_eq!((m.mapped, m.mapped_by_row), (0, 0), "{mode:?}: {m:?}");
        let head = tied.n_vocab.div_ceil(16) * tied.n_embd.div_ceil(128) * 2176;
        assert!(
            m.copied >= head as u64 && m.copied < (head + head / 4) as u64,
            "{mode:?}: {m:?}"
        );
        logits.push(prefill_all(&model, &toks));
    }
    assert_eq!(bits(&logits[0]), bits(&logits[1]), "mmap vs read");
    let native = prefill_all(&common::setup::load(&path, &opts(2)).unwrap(), &toks);
    let e = rel_l2_f32(&logits[0], &native);
    assert!(
        e > 0.0 && e <= HEAD_Q8_REL_L2_TOL,
        "tied: q8 vs native Q8_0 head: rel-L2 {e}"
    );
    std::fs::remove_file(&path).ok();
}

#[test]
fn scalar_and_best_kernels_agree() {
    let path = model_path(&preset("tiny"), "isa");
    let toks = spread_prompt(12, 512);
    let model_s = common::setup::load(
        &path,
        &common::setup::Opts {
            isa: Some(Isa::Scalar),
            ..opts(2)
        },
    )
    .unwrap();
    let model_b = common::setup::load(
        &path,
        &common::setup::Opts {
            isa: Some(Isa::best()),
            ..opts(2)
        },
    )
    .unwrap();
    let a = prefill_all(&model_s, &toks);
    let b = prefill_all(&model_b, &toks);
    let e = rel_l2_f32(&b, &a);
    assert!(e <= ISA_REL_L2_TOL, "scalar vs {}: rel-L2 {e}", Isa::best());
    std::fs::remove_file(&path).ok();
}

#[test]
fn bad_tokens_and_context_overflow_are_errors() {
    let path = model_path(&preset("tiny"), "errors");
    let model = common::setup::load(&path, &opts(2)).unwrap();
    let mut s = model.session(16).unwrap();
    assert!(matches!(
        s.eval(&[1, 512, 3], false),
        Err(CoreError::TokenOutOfRange {
            token: 512,
            index: 1,
            n_vocab: 512
        })
    ));
    assert!(matches!(s.eval(&[], false), Err(CoreError::EmptyInput)));
    assert_eq!(s.n_past(), 0, "a refused call changes nothing");
    s.eval(&spread_prompt(10, 512), false).unwrap();
    let err = s.eval(&spread_prompt(9, 512), false).unwrap_err();
    assert!(matches!(
        err,
        CoreError::ContextOverflow {
            n_past: 10,
            n_new: 9,
            n_ctx: 16
        }
    ));
    assert!(err.to_string().contains("by 3"), "{err}");
    assert_eq!(s.n_past(), 10);
    s.eval(&spread_prompt(6, 512), false).unwrap();
    assert_eq!(s.n_past(), 16);
    assert!(s.eval(&[1], false).is_err());

    // A context that is not whole KV blocks holds what was asked, not the rounded-up pool
    // (20 of 32 positions): the 21st position is refused.
    let mut s = model.session(20).unwrap();
    assert_eq!(s.n_ctx(), 20);
    s.eval(&spread_prompt(20, 512), false).unwrap();
    assert!(matches!(
        s.eval(&[1], false),
        Err(CoreError::ContextOverflow {
            n_past: 20,
            n_new: 1,
            n_ctx: 20
        })
    ));
    std::fs::remove_file(&path).ok();
}

#[test]
fn truncate_and_reset_replay_identically() {
    let path = model_path(&preset("tiny-bitnet"), "truncate");
    let model = common::setup::load(&path, &opts(2)).unwrap();
    let toks = spread_prompt(14, 512);
    let mut s = model.session(32).unwrap();
    s.eval(&toks[..10], false).unwrap();
    let want = s.eval(&toks[10..], false).unwrap().to_vec();
    s.truncate(10);
    assert_eq!(s.n_past(), 10);
    assert_eq!(s.eval(&toks[10..], false).unwrap(), &want[..]);
    s.reset();
    assert_eq!(s.n_past(), 0);
    assert_eq!(s.eval(&toks, false).unwrap(), &want[..]);
    std::fs::remove_file(&path).ok();
}

#[test]
fn profile_counts_ops_when_enabled() {
    let path = model_path(&preset("tiny"), "profile");
    let model = common::setup::load(&path, &opts(2)).unwrap();
    let mut s = model.session(32).unwrap();
    s.eval(&spread_prompt(4, 512), false).unwrap();
    assert!(s.profile().rows().is_empty(), "off by default");
    s.set_profiling(true);
    let t = std::time::Instant::now();
    s.eval(&spread_prompt(4, 512), false).unwrap();
    s.eval(&[5], false).unwrap();
    let wall = t.elapsed().as_secs_f64();
    let rows = s.profile().rows().to_vec();
    // Rows are disjoint slices of the evals' wall time (pool waits are split out).
    let total = s.profile().total_seconds();
    assert!(
        total <= wall * 1.001 + 1e-4,
        "rows {total}s exceed wall {wall}s"
    );
    assert!(
        total >= 0.3 * wall,
        "rows {total}s cover too little of {wall}s"
    );
    let get = |n: &str| rows.iter().find(|r| r.name == n).map(|r| r.calls);
    // 2 layers x (qkv + o + gate/up + down) = 8 ternary product groups per eval.
    assert_eq!(get("matmul_ternary"), Some(16));
    assert_eq!(get("head"), Some(2));
    assert_eq!(get("attention"), Some(4));
    assert!(get("act_quant").is_some() && get("rmsnorm").is_some());
    // Loading (repacking) runs on the physical cores; the engine on the case's 2 threads.
    let stats = model.load_stats();
    assert!(
        stats.weight_bytes > 0
            && stats.mapped_bytes > 0
            && stats.threads == bitnet_core::engine::default_threads()
    );
    assert_eq!(s.threads(), 2);
    std::fs::remove_file(&path).ok();
}

#[test]
fn generate_streams_greedy_tokens_and_honours_stops() {
    use bitnet_core::engine::Engine;
    use bitnet_core::sampling::SamplerConfig;
    use bitnet_core::scheduler::{GenParams, Scheduler, SchedulerOptions};
    use bitnet_core::scheduler::{StopReason, generate};
    use bitnet_core::tokenizer::StreamDecoder;

    let vocab = bitnet_testdata::path("vocab/ggml-vocab-llama-spm.gguf");
    let spec = SynthSpec {
        vocab: Some(vocab),
        ..preset("tiny")
    };
    let path = model_path(&spec, "generate");
    let model = common::setup::load(&path, &opts(2)).unwrap();
    let tok = model.tokenizer().expect("tokenizer from metadata");
    let prompt_ids = tok.encode("Once upon a time", true, false);
    let n_vocab = model.n_vocab();
    // generate() runs on a scheduler over a fresh engine, one request.
    let sched = || {
        let mut e = model.engine.clone();
        e.n_ctx = 64;
        Scheduler::new(
            Engine::new(model.model.clone(), &e).unwrap(),
            SchedulerOptions::default(),
        )
    };
    let params = |stop: Vec<String>| GenParams {
        max_tokens: 10,
        sampler: SamplerConfig::greedy(),
        stop,
        ..GenParams::default()
    };

    // Reference: argmax decoding by hand.
    let mut s = model.session(64).unwrap();
    let mut logits = s.eval(&prompt_ids, false).unwrap().to_vec();
    let mut want = Vec::new();
    for _ in 0..10 {
        let best = (0..n_vocab)
            .max_by(|&a, &b| logits[a].total_cmp(&logits[b]).then(b.cmp(&a)))
            .unwrap() as u32;
        if tok.is_eog(best) {
            break;
        }
        want.push(best);
        logits = s.eval(&[best], false).unwrap().to_vec();
    }

    let mut s = sched();
    let mut text = String::new();
    let stats = generate(&mut s, &prompt_ids, params(Vec::new()), |t| {
        text.push_str(t);
        true
    })
    .unwrap()
    .1;
    assert_eq!(stats.tokens, want);
    assert_eq!(stats.gen_tokens, want.len());
    assert_eq!(stats.prompt_tokens, prompt_ids.len());
    let expected_reason = if want.len() == 10 {
        StopReason::MaxTokens
    } else {
        StopReason::Eog
    };
    assert_eq!(stats.stop_reason, expected_reason);
    let mut dec = StreamDecoder::new(tok);
    let mut whole: String = want.iter().map(|&t| dec.push(t)).collect();
    whole.push_str(&dec.finish());
    assert_eq!(text, whole);

    assert!(
        whole.chars().count() >= 4,
        "generated text too short to test stops: {whole:?}"
    );
    // A stop string taken from the middle of that text ends generation before it.
    let chars: Vec<char> = whole.chars().collect();
    if chars.len() >= 4 {
        let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
        let at = whole.find(&stop).unwrap();
        let mut s = sched();
        let mut got = String::new();
        let st = generate(&mut s, &prompt_ids, params(vec![stop.clone()]), |t| {
            got.push_str(t);
            true
        })
        .unwrap()
        .1;
        assert_eq!(st.stop_reason, StopReason::StopString, "stop {stop:?}");
        assert_eq!(got, whole[..at]);
    }

    // The callback returning false stops at once.
    let mut s = sched();
    let mut calls = 0;
    let st = generate(&mut s, &prompt_ids, params(Vec::new()), |_| {
        calls += 1;
        false
    })
    .unwrap()
    .1;
    if !whole.is_empty() {
        assert_eq!(st.stop_reason, StopReason::Callback);
        assert_eq!(calls, 1);
    }
    std::fs::remove_file(&path).ok();
}

#[test]
fn mlock_loads_the_same_model_or_reports_why_not() {
    let path = model_path(&preset("tiny"), "mlock");
    let toks = spread_prompt(6, 512);
    let plain = prefill_all(&common::setup::load(&path, &opts(2)).unwrap(), &toks);
    for mode in [LoadMode::Mmap, LoadMode::Read] {
        let o = common::setup::Opts {
            mlock: true,
            mode,
            ..opts(2)
        };
        match common::setup::load(&path, &o) {
            Ok(m) => assert_eq!(prefill_all(&m, &toks), plain, "{mode:?}"),
            // Locking may be refused by the memlock limit; that must be a typed error.
            Err(CoreError::Io { what, .. }) => assert!(what.starts_with("mlock"), "{what}"),
            Err(e) => panic!("{mode:?}: unexpected error {e}"),
        }
    }
    std::fs::remove_file(&path).ok();
}

/// An 8-bit KV cache against the f16 one (the only difference is the cache rounding).
const KV_Q8_REL_L2_TOL: f32 = 0.05;

#[test]
fn q8_kv_cache_matches_f16_closely_and_prefill_equals_decode() {
    use bitnet_core::kv::KvType;
    let spec = preset("tiny-bitnet");
    let q8 = common::setup::Opts {
        k_type: KvType::Q8_0,
        v_type: KvType::Q8_0,
        ..opts(2)
    };
    check_prefill_matches_decode(&spec, "kv-q8", &q8);
    let path = model_path(&spec, "kv-q8-vs-f16");
    let toks = spread_prompt(20, 512);
    let a = prefill_all(&common::setup::load(&path, &q8).unwrap(), &toks);
    let b = prefill_all(&common::setup::load(&path, &opts(2)).unwrap(), &toks);
    let e = rel_l2_f32(&a, &b);
    assert!(e <= KV_Q8_REL_L2_TOL && e > 0.0, "q8 vs f16 KV: rel-L2 {e}");
    std::fs::remove_file(&path).ok();
}

#[test]
fn weight_memory_adds_up_and_says_where_the_bytes_live() {
    // Tied F16 embedding/head, ternary projections: the head is read in place, re-quantized
    // (then the mapped embedding is read only by row), or copied out with the embedding.
    let path = model_path(&preset("tiny"), "weight-memory");
    let file = bitnet_gguf::GgufFile::open(&path, bitnet_gguf::LoadMode::Mmap).unwrap();
    let embd = file.tensor("token_embd.weight").unwrap();
    let (embd_bytes, rows, cols) = (embd.n_bytes, embd.rows(), embd.row_len());
    // The Q8_0 head in the kernels' layout: 16-row groups, columns padded to 128.
    let q8_head = rows.div_ceil(16) * cols.div_ceil(128) * 2176;
    drop(file);
    for (mode, head) in [
        (LoadMode::Mmap, HeadMode::Native),
        (LoadMode::Mmap, HeadMode::Q8),
        (LoadMode::Read, HeadMode::Native),
        (LoadMode::Read, HeadMode::Q8),
        (LoadMode::Mmap, HeadMode::Q6K),
        (LoadMode::Mmap, HeadMode::Q4_0),
        (LoadMode::Read, HeadMode::Q4_0),
    ] {
        let model = common::setup::load(
            &path,
            &common::setup::Opts {
                mode,
                head: Some(head),
                ..opts(1)
            },
        )
        .unwrap();
        let st = model.load_stats();
        let m = st.memory;
        let case = format!("{mode:?} {head:?}: {m:?}");
        assert_eq!(m.in_use(), m.repacked + m.copied + m.mapped, "{case}");
        assert_eq!(st.weight_bytes, m.repacked + m.copied, "{case}");
        assert!(m.repacked > 0, "{case}");
        // A re-quantized head is a private copy; the embedding is then read a row at a time.
        let head_copy = match head {
            HeadMode::Native => 0,
            HeadMode::Q8 => q8_head,
            HeadMode::Q6K => rows * RowFormat::Q6K.row_bytes(cols as usize).unwrap() as u64,
            HeadMode::Q4_0 => rows * RowFormat::Q4_0.row_bytes(cols as usize).unwrap() as u64,
        };
        let (mapped, by_row, copied_floats) = match (mode, head) {
            (LoadMode::Mmap, HeadMode::Native) => (embd_bytes, 0, 0),
            (LoadMode::Mmap, _) => (0, embd_bytes, head_copy),
            (LoadMode::Read, _) => (0, 0, embd_bytes + head_copy),
        };
        assert_eq!((m.mapped, m.mapped_by_row), (mapped, by_row), "{case}");
        // Beside the float copies, only the f32 norms are copied.
        let norms = m.copied - copied_floats;
        assert!(norms > 0 && norms < m.repacked, "{case}");
        // The steps not run beside another add up to the load time.
        let steps: f64 = st.phases.iter().filter(|p| !p.beside).map(|p| p.secs).sum();
        assert!(
            (steps - st.load_secs).abs() < 1e-6,
            "{case}: {:?}",
            st.phases
        );
        for name in ["open", "repack", "tokenizer"] {
            assert!(st.phases.iter().any(|p| p.name == name), "{case}: {name}");
        }
    }
}
