//! KV formats chosen per layer (`EngineOptions::kv_layers`): one pair for every layer is the
//! uniform option bit for bit; a mixed cache stores each layer in its own format (checked row
//! by row against an encoding done here), runs batches, decodes and forks as a sequence run
//! alone does, and lands between its formats in accuracy; wrong lists are refused by name;
//! its snapshots go through a file and back, and only into a cache of the same layout; its
//! bytes are the sum of its layers'.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use KvType::*;
use bitnet_core::CoreError;
use bitnet_core::engine::{BatchItem, Engine, EngineOptions, Logits};
use bitnet_core::kv::snapshot_file::{SnapshotKey, read_snapshot, write_snapshot};
use bitnet_core::kv::{
    KvError, KvRotate, KvStorage, KvType, SeqId, describe_layer_types, uniform_layer_types,
};
use bitnet_core::model::Model;
use bitnet_core::synth::SynthSpec;
use bitnet_kernels::Isa;
use common::metrics::rel_l2_f32;
use common::models::{engine_with, preset, synth_model, unpinned};
use common::sched::{eval_last, seeded_tokens};

/// The mixed cache the tests run: layer 0 in f16, layer 1 in q4_0 keys and q8_0 values.
const MIXED: [(KvType, KvType); 2] = [(F16, F16), (Q4_0, Q8_0)];

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Two layers, head_dim 32 and 8 query heads over 2 KV heads (GQA 4): a block of 16 q4_0
/// or q8_0 rows is padded to 64 bytes, f16 rows are not, so the two layers of [`MIXED`]
/// read their blocks differently (joined runs in layer 0, one block at a time in layer 1).
fn spec() -> SynthSpec {
    SynthSpec {
        n_head: 8,
        n_head_kv: 2,
        ..preset("tiny")
    }
}

fn model(tag: &str, spec: &SynthSpec, isa: Option<Isa>) -> (Arc<Model>, PathBuf) {
    synth_model(&format!("kv-layers-{tag}"), spec, isa)
}

/// One thread (results independent of the split), 256 positions, passes of 64 tokens.
fn options(kv_layers: &[(KvType, KvType)]) -> EngineOptions {
    EngineOptions {
        threads: 1,
        n_ctx: 256,
        batch: 64,
        kv_layers: kv_layers.to_vec(),
        ..unpinned()
    }
}

fn uniform(k: KvType, v: KvType) -> EngineOptions {
    EngineOptions {
        k_type: k,
        v_type: v,
        ..options(&[])
    }
}

/// Every logits row of a 40-token prompt (three blocks, the last partly filled) in one
/// pass, then the last row of each of 4 decoded tokens.
fn prompt_and_decode(m: &Arc<Model>, opts: EngineOptions) -> Vec<f32> {
    let mut e = engine_with(m, opts);
    let toks = seeded_tokens(44, 5, m.config().n_vocab);
    let seq = e.kv_mut().new_sequence();
    let mut out = Vec::new();
    let item = BatchItem {
        seq,
        tokens: &toks[..40],
        logits: Logits::All,
    };
    e.forward(&[item], |_, _, row| out.extend_from_slice(row))
        .unwrap();
    for t in &toks[40..] {
        out.extend(eval_last(&mut e, seq, std::slice::from_ref(t), 1));
    }
    out
}

#[test]
fn one_pair_for_every_layer_is_the_uniform_option_bit_for_bit() {
    for (tag, spec) in [("g2", preset("tiny-bitnet")), ("g4", spec())] {
        let (m, path) = model(&format!("same-{tag}"), &spec, None);
        let n_layer = m.config().n_layer;
        let cases = [
            (F16, F16, KvRotate::Off, false),
            (Q8_0, Q4_0, KvRotate::Off, false),
            (Q4_0, Q4_0, KvRotate::Auto, false),
            (B1, F16, KvRotate::Auto, false),
            (B1, Q8_0, KvRotate::K, true),
            (Q8R, Fp8, KvRotate::Kv, false),
        ];
        for (k, v, rot, xnor) in cases {
            let what = format!("{tag} K {} V {} rotate {}", k.name(), v.name(), rot.name());
            let one = EngineOptions {
                kv_rotate: rot,
                kv_xnor: xnor,
                ..uniform(k, v)
            };
            let listed = EngineOptions {
                kv_layers: vec![(k, v); n_layer],
                ..one.clone()
            };
            let want = prompt_and_decode(&m, one.clone());
            let got = prompt_and_decode(&m, listed.clone());
            assert!(want.iter().all(|x| x.is_finite()), "{what}: non-finite");
            assert_eq!(bits(&got), bits(&want), "{what}: not bit-identical");
            let (a, b) = (engine_with(&m, one), engine_with(&m, listed));
            assert_eq!(a.kv().bytes(), b.kv().bytes(), "{what}");
            assert_eq!(b.kv().uniform_types(), Some((k, v)), "{what}");
            assert_eq!(a.kv().layer_rotations(), b.kv().layer_rotations(), "{what}");
        }
        std::fs::remove_file(&path).ok();
    }
}

/// Positions 0..n of `layer`'s K (`is_k`) or V rows of `seq`, decoded.
fn stored(e: &Engine, seq: SeqId, layer: usize, is_k: bool, n: usize) -> Vec<f32> {
    let width = e.model().config().kv_dim();
    let mut all = vec![0.0; n * width];
    for (pos, row) in all.chunks_exact_mut(width).enumerate() {
        e.kv().read_row(seq, layer, pos, is_k, row).unwrap();
    }
    all
}

/// `rows` (head rows of `hd` floats) encoded in `t` and decoded again, as the cache does.
fn round_trip(t: KvType, hd: usize, rows: &[f32]) -> Vec<f32> {
    let f = t.format();
    let rb = (f.row_bytes)(hd).unwrap();
    // u64 storage keeps the rows aligned as the pool's are.
    let mut store = vec![0u64; (rows.len() / hd * rb).div_ceil(8)];
    let bytes: &mut [u8] = &mut bytemuck::cast_slice_mut(&mut store)[..rows.len() / hd * rb];
    (f.encode)(Isa::Scalar, hd, rows, bytes);
    let mut out = vec![0.0; rows.len()];
    for (src, dst) in bytes.chunks_exact(rb).zip(out.chunks_exact_mut(hd)) {
        (f.decode)(Isa::Scalar, src, dst);
    }
    out
}

#[test]
fn each_layer_stores_its_rows_in_its_own_format() {
    let (m, path) = model("rows", &spec(), None);
    let hd = m.config().head_dim;
    let toks = seeded_tokens(37, 7, m.config().n_vocab);
    let run = |opts: EngineOptions| {
        let mut e = engine_with(&m, opts);
        let s = e.kv_mut().new_sequence();
        eval_last(&mut e, s, &toks, 64);
        (e, s)
    };
    let (mixed, a) = run(options(&MIXED));
    // Layer 0's rows come before any attention: an f16 cache holds the same ones.
    let (f16, b) = run(uniform(F16, F16));
    // Layer 1's inputs follow from layer 0 alone, which is f16 here too: this cache keeps
    // them exactly.
    let (exact, c) = run(options(&[(F16, F16), (F32, F32)]));
    let n = toks.len();
    for is_k in [true, false] {
        let side = if is_k { "K" } else { "V" };
        let l0 = stored(&mixed, a, 0, is_k, n);
        assert_eq!(
            bits(&l0),
            bits(&stored(&f16, b, 0, is_k, n)),
            "layer 0 {side}"
        );
        assert_eq!(
            bits(&l0),
            bits(&stored(&exact, c, 0, is_k, n)),
            "layer 0 {side}"
        );
        let (t, plain) = (MIXED[1], stored(&exact, c, 1, is_k, n));
        let t = if is_k { t.0 } else { t.1 };
        let want = round_trip(t, hd, &plain);
        let got = stored(&mixed, a, 1, is_k, n);
        assert_eq!(bits(&got), bits(&want), "layer 1 {side} in {}", t.name());
        assert_ne!(bits(&got), bits(&plain), "layer 1 {side}: not quantized");
    }
    assert_eq!(mixed.kv().layer_types(), MIXED.to_vec());
    assert_eq!(mixed.kv().uniform_types(), None);
    assert_eq!(
        describe_layer_types(&mixed.kv().layer_types()),
        "per layer: k f16 x1, q4_0 x1; v f16 x1, q8_0 x1"
    );
    std::fs::remove_file(&path).ok();
}

/// Runs the scenario of [`a_mixed_cache_batches_decodes_and_forks_as_sequences_run_alone`]
/// on one engine: two prompts in one pass, three decode steps of both in one pass, then
/// `a` forked into `c` (sharing `a`'s partly filled block) and both decoding one token in one
/// pass. Returns each sequence's logits rows in order.
fn together(m: &Arc<Model>, t: &Tokens) -> [Vec<Vec<f32>>; 3] {
    let mut e = engine_with(m, options(&MIXED));
    let (a, b) = (e.kv_mut().new_sequence(), e.kv_mut().new_sequence());
    let mut rows: [Vec<Vec<f32>>; 3] = Default::default();
    let items = [
        BatchItem {
            seq: a,
            tokens: &t.a_prompt,
            logits: Logits::Last,
        },
        BatchItem {
            seq: b,
            tokens: &t.b_prompt,
            logits: Logits::Last,
        },
    ];
    e.forward(&items, |i, _, row| rows[i].push(row.to_vec()))
        .unwrap();
    for step in 0..3 {
        let items = [
            BatchItem {
                seq: a,
                tokens: std::slice::from_ref(&t.a_steps[step]),
                logits: Logits::Last,
            },
            BatchItem {
                seq: b,
                tokens: std::slice::from_ref(&t.b_steps[step]),
                logits: Logits::Last,
            },
        ];
        e.forward(&items, |i, _, row| rows[i].push(row.to_vec()))
            .unwrap();
    }
    let used = e.kv().pool_stats().used;
    let c = e.kv_mut().fork(a).unwrap();
    assert_eq!(e.kv().pool_stats().used, used, "a fork shares every block");
    let items = [
        BatchItem {
            seq: a,
            tokens: std::slice::from_ref(&t.a_steps[3]),
            logits: Logits::Last,
        },
        BatchItem {
            seq: c,
            tokens: &t.c_step,
            logits: Logits::Last,
        },
    ];
    let [ra, _, rc] = &mut rows;
    e.forward(&items, |i, _, row| {
        if i == 0 { &mut *ra } else { &mut *rc }.push(row.to_vec())
    })
    .unwrap();
    // Both wrote into the partly filled block they shared: one of them got a copy.
    assert_eq!(e.kv().pool_stats().used, used + 1, "copy on write");
    rows
}

struct Tokens {
    a_prompt: Vec<u32>,
    b_prompt: Vec<u32>,
    a_steps: Vec<u32>,
    b_steps: Vec<u32>,
    c_step: Vec<u32>,
}

/// `prompt` in one pass, then `steps` one token at a time, on a fresh engine: every row.
fn alone(m: &Arc<Model>, opts: EngineOptions, prompt: &[u32], steps: &[u32]) -> Vec<Vec<f32>> {
    let mut e = engine_with(m, opts);
    let s = e.kv_mut().new_sequence();
    let mut rows = vec![eval_last(&mut e, s, prompt, 64)];
    for t in steps {
        rows.push(eval_last(&mut e, s, std::slice::from_ref(t), 1));
    }
    rows
}

#[test]
fn a_mixed_cache_batches_decodes_and_forks_as_sequences_run_alone() {
    // The scalar kernels give a row the same bits whatever else is in its pass.
    let (m, path) = model("batch", &spec(), Some(Isa::Scalar));
    let v = m.config().n_vocab;
    let t = Tokens {
        // Two full blocks and part of a third once decoded (the fork shares that one).
        a_prompt: seeded_tokens(37, 1, v),
        b_prompt: seeded_tokens(21, 2, v),
        a_steps: seeded_tokens(4, 3, v),
        b_steps: seeded_tokens(3, 4, v),
        c_step: seeded_tokens(1, 5, v),
    };
    let got = together(&m, &t);
    let opts = options(&MIXED);
    let a_want = alone(&m, opts.clone(), &t.a_prompt, &t.a_steps);
    let b_want = alone(&m, opts.clone(), &t.b_prompt, &t.b_steps);
    let mut c_steps = t.a_steps[..3].to_vec();
    c_steps.extend(&t.c_step);
    let mut c_want = alone(&m, opts.clone(), &t.a_prompt, &c_steps);
    // The fork's rows before it was made are `a`'s.
    c_want.drain(..4);
    for (name, g, w) in [
        ("a", &got[0], &a_want),
        ("b", &got[1], &b_want),
        ("c", &got[2], &c_want),
    ] {
        assert_eq!(g.len(), w.len(), "{name}: rows");
        for (r, (x, y)) in g.iter().zip(w).enumerate() {
            assert_eq!(
                bits(x),
                bits(y),
                "sequence {name} row {r}: not bit-identical"
            );
        }
    }
    // Against a cache that stores the values exactly: the f16 layer makes the mixed cache
    // closer than q4_0 everywhere, and its quantized layer keeps it from being exact.
    let all = |o: EngineOptions| alone(&m, o, &t.a_prompt, &t.a_steps).concat();
    let exact = all(uniform(F32, F32));
    let mixed = rel_l2_f32(&all(opts), &exact);
    let q4 = rel_l2_f32(&all(uniform(Q4_0, Q4_0)), &exact);
    eprintln!("rel-L2 against f32: mixed {mixed:.5}, all q4_0 {q4:.5}");
    assert!(mixed > 0.0, "the quantized layer changed nothing");
    assert!(mixed < q4, "mixed {mixed} not below all q4_0 {q4}");
    std::fs::remove_file(&path).ok();
}

#[test]
fn auto_rotation_and_xnor_scoring_follow_each_layers_format() {
    let (m, path) = model("rotate", &preset("tiny-bitnet"), None);
    let e = engine_with(
        &m,
        EngineOptions {
            kv_rotate: KvRotate::Auto,
            ..options(&[(F16, Q4_0), (B1, Q8_0)])
        },
    );
    assert_eq!(e.kv().layer_rotations(), [(false, true), (true, false)]);
    // XNOR scoring on the layer whose keys are b1: it changes the logits.
    let layers = [(Q8_0, F16), (B1, F16)];
    let float_q = prompt_and_decode(&m, options(&layers));
    let xnor = prompt_and_decode(
        &m,
        EngineOptions {
            kv_xnor: true,
            ..options(&layers)
        },
    );
    assert!(xnor.iter().all(|x| x.is_finite()));
    assert!(
        rel_l2_f32(&xnor, &float_q) > 1e-4,
        "XNOR scoring did not run"
    );
    std::fs::remove_file(&path).ok();
}

fn refusal(m: &Arc<Model>, opts: EngineOptions) -> (&'static str, String) {
    match Engine::new(m.clone(), &opts) {
        Err(CoreError::InvalidOption { option, reason }) => (option, reason),
        other => panic!("{:?}: {:?}", opts.kv_layers, other.map(|_| ())),
    }
}

#[test]
fn wrong_lists_are_refused_by_name() {
    // head_dim 48: whole f16 rows, not whole blocks of 32.
    let hd48 = SynthSpec {
        n_embd: 768,
        n_head: 16,
        n_head_kv: 4,
        ..preset("tiny")
    };
    let (m, path) = model("refused", &hd48, None);
    for n in [1, 3] {
        let (option, reason) = refusal(&m, options(&vec![(F16, F16); n]));
        assert_eq!(option, "kv_layers");
        assert!(reason.contains(&format!("{n} per-layer")), "{reason}");
        assert!(reason.contains("2 layers"), "{reason}");
    }
    let (option, reason) = refusal(&m, options(&[(F16, F16), (F16, Q4_0)]));
    assert_eq!(option, "kv_layers");
    for part in ["layer 1 V", "q4_0", "48"] {
        assert!(reason.contains(part), "{part}: {reason}");
    }
    // Whole f16 rows everywhere: it runs.
    engine_with(&m, options(&[(F16, F32), (F32, F16)]));
    std::fs::remove_file(&path).ok();

    let (m, path) = model("refused-xnor", &preset("tiny-bitnet"), None);
    let (option, reason) = refusal(
        &m,
        EngineOptions {
            kv_xnor: true,
            ..options(&[(Q8_0, B1), (F16, B1)])
        },
    );
    assert_eq!(option, "kv_xnor");
    assert!(reason.contains("b1") && reason.contains("q8_0"), "{reason}");
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_mixed_snapshot_goes_through_a_file_and_only_into_the_same_layout() {
    let (m, path) = model("snapshot", &spec(), None);
    let key = SnapshotKey::new(&path, &m).unwrap();
    let toks = seeded_tokens(45, 9, m.config().n_vocab);
    let mut e = engine_with(&m, options(&MIXED));
    let s = e.kv_mut().new_sequence();
    eval_last(&mut e, s, &toks[..40], 64);
    let snap = e.kv().export(s, usize::MAX).unwrap();
    assert_eq!(snap.layout().uniform(), None);
    let file = common::tmp_dir("kv-layers-snapshot-file").join("mixed.bkv");
    write_snapshot(&file, &key, &snap).unwrap();
    let back = read_snapshot(&file, &key, 256).unwrap();
    assert_eq!(back, snap, "bit for bit");

    // Put back into a fresh engine of the same layout, it decodes as the original does.
    let mut fresh = engine_with(&m, options(&MIXED));
    let r = fresh.kv_mut().import(&back).unwrap();
    for t in &toks[40..] {
        let one = std::slice::from_ref(t);
        let want = eval_last(&mut e, s, one, 1);
        assert_eq!(bits(&eval_last(&mut fresh, r, one, 1)), bits(&want));
    }

    // A cache of one pair for all layers refuses it, naming the layer that differs.
    for other in [uniform(F16, F16), uniform(Q4_0, Q8_0)] {
        let mut u = engine_with(&m, other);
        match u.kv_mut().import(&snap) {
            Err(e @ KvError::OtherLayout { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("in layer"), "{msg}");
            }
            r => panic!("a mixed snapshot in a uniform cache: {r:?}"),
        }
        assert_eq!(u.kv().stats().sequences, 0);
    }
    // And so does a cache whose layers are swapped.
    let mut swapped = engine_with(&m, options(&[MIXED[1], MIXED[0]]));
    let err = swapped.kv_mut().import(&snap).unwrap_err();
    assert!(err.to_string().contains("layer 0"), "{err}");
    std::fs::remove_file(&path).ok();
}

/// A file written by `bitnet chat`'s `/save` before caches had formats per layer (the
/// fuzz target's seed): it still reads, and a uniform cache writes the same bytes again.
#[test]
fn an_old_uniform_file_reads_and_is_written_again_byte_for_byte() {
    let seed = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fuzz/seeds/kv_snapshot/chat-save.kv"
    );
    // The key in the file's header (made with the shipped model on an AVX-512 machine).
    let key = SnapshotKey {
        model: "17cc2832df8172a8".into(),
        kernels: "avx512".into(),
        config: "78f8433978aaf43b".into(),
    };
    let snap = read_snapshot(seed.as_ref(), &key, 1 << 16).unwrap();
    let layout = snap.layout();
    assert_eq!(layout.n_layer(), 4);
    let one = layout.uniform().expect("one format for every layer");
    assert_eq!((one.k_type, one.v_type), (F16, F16));
    assert_eq!(snap.len(), 37);
    let again = common::tmp_dir("kv-layers-old-file").join("again.kv");
    write_snapshot(&again, &key, &snap).unwrap();
    assert_eq!(std::fs::read(&again).unwrap(), std::fs::read(seed).unwrap());
}

#[test]
fn a_mixed_cache_takes_the_sum_of_its_layers_bytes() {
    let (n_kv, hd, n_tokens, bt): (usize, usize, usize, usize) = (2, 32, 100, 16);
    let layers = [(F16, F16), (Q4_0, Q8_0), (B1, Fp8), (Q8R, F32)];
    // Per layer: whole blocks of `bt` rows, each head's part of a block padded to 64 bytes.
    let blocks = n_tokens.div_ceil(bt) as u128;
    let side = |t: KvType| {
        let row = t.row_bytes(hd).unwrap() as u128;
        n_kv as u128 * blocks * (bt as u128 * row).div_ceil(64) * 64
    };
    let want: u128 = layers.iter().map(|&(k, v)| side(k) + side(v)).sum();
    assert_eq!(
        KvStorage::bytes_for_layers(n_kv, hd, &layers, n_tokens, bt),
        want
    );
    let pool = KvStorage::with_layers(n_kv, hd, &layers, n_tokens, bt, Isa::Scalar).unwrap();
    assert_eq!(pool.bytes() as u128, want);
    assert_eq!(pool.layer_types(), layers.to_vec());
    // One pair for every layer: the uniform figure.
    let same = [(Q8_0, F16); 3];
    assert_eq!(uniform_layer_types(&same), Some((Q8_0, F16)));
    assert_eq!(
        KvStorage::bytes_for_layers(n_kv, hd, &same, n_tokens, bt),
        KvStorage::bytes_for(3, n_kv, hd, (Q8_0, F16), n_tokens, bt)
    );
    // A format whose blocks do not divide the head dimension is refused, naming the layer.
    let err = KvStorage::with_layers(n_kv, 48, &[(F16, F16), (F16, Q4_0)], 16, bt, Isa::Scalar)
        .unwrap_err();
    assert!(
        matches!(err, KvError::LayerHeadDim { layer: 1, .. }),
        "{err}"
    );
}
