//! The f32 reference forward pass (and with it the config rules and the test decoders)
//! against two independent engines' logits on the golden tiny model: bitnet.cpp on its I2_S
//! file (arch `bitnet-25`, squared-ReLU gate) and llama.cpp on its TQ2_0 / TQ1_0 files (arch
//! `bitnet`, SiLU gate). Tolerances are testdata/README.md's, measured between correct
//! implementations; a wrong layout, rope, norm or gate lands near cosine 0.75.

mod common;

use bitnet_core::config::{Arch, FfnAct, ModelConfig, RopeStyle};
use bitnet_gguf::{GgufFile, LoadMode};
use common::metrics::{Agreement, compare};
use common::reference::{Emulation, RefModel};

/// Golden README: a correct engine vs the engine that wrote the file.
const MAX_REL_L2: f64 = 0.07;
const MIN_COSINE: f64 = 0.998;
const MIN_TOP1: usize = 35;

struct Golden {
    file: GgufFile,
    cfg: ModelConfig,
    tokens: Vec<u32>,
    theirs: Vec<f32>,
}

fn load(gguf: &str, json: &str, logits: &str) -> Golden {
    let (g, j, l) = (
        common::golden(gguf),
        common::golden(json),
        common::golden(logits),
    );
    let file = GgufFile::open(&g, LoadMode::Mmap).unwrap();
    let cfg = ModelConfig::from_gguf(&file).unwrap();
    let tokens = common::golden_tokens(&j);
    let theirs = common::read_f32s(&l);
    assert_eq!(tokens.len(), 42);
    assert_eq!(theirs.len(), 42 * cfg.n_vocab);
    Golden {
        file,
        cfg,
        tokens,
        theirs,
    }
}

fn check(what: &str, a: Agreement) {
    eprintln!("{what}: {a}");
    assert!(a.rel_l2 <= MAX_REL_L2, "{what}: {a}");
    assert!(a.cosine >= MIN_COSINE, "{what}: {a}");
    assert!(a.top1 >= MIN_TOP1, "{what}: {a}");
}

fn check_loose(what: &str, a: Agreement, min_top1: usize) {
    eprintln!("{what}: {a}");
    assert!(
        a.rel_l2 <= MAX_REL_L2 && a.cosine >= MIN_COSINE,
        "{what}: {a}"
    );
    assert!(a.top1 >= min_top1, "{what}: {a}");
}

#[test]
fn golden_configs_follow_the_arch_rules() {
    let b = load(
        "gguf/bitnet-tiny-i2_s.gguf",
        "bitnet-tiny-i2_s.json",
        "logits/bitnet-i2_s.t1.f32",
    );
    let c = &b.cfg;
    assert_eq!(
        (c.arch, c.ffn_act, c.rope),
        (Arch::BitnetB158, FfnAct::Relu2, RopeStyle::Neox)
    );
    assert_eq!(
        (
            c.n_embd,
            c.n_layer,
            c.n_head,
            c.n_head_kv,
            c.head_dim,
            c.n_ff,
            c.n_vocab
        ),
        (256, 4, 4, 2, 64, 768, 32000)
    );
    assert!(c.sub_norms && c.tied_head);
    for f in [
        "gguf/upstream-tiny-tq2_0.gguf",
        "gguf/upstream-tiny-tq1_0.gguf",
    ] {
        let p = common::golden(f);
        let file = GgufFile::open(&p, LoadMode::Read).unwrap();
        let c = ModelConfig::from_gguf(&file).unwrap();
        assert_eq!(
            (c.arch, c.ffn_act, c.rope),
            (Arch::Bitnet, FfnAct::Silu, RopeStyle::Neox)
        );
        assert_eq!(c.rope_freq_scale, 1.0);
    }
}

#[test]
fn golden_files_decode_to_identical_weights() {
    let paths = [
        "gguf/bitnet-tiny-i2_s.gguf",
        "gguf/upstream-tiny-tq2_0.gguf",
        "gguf/upstream-tiny-tq1_0.gguf",
    ];
    let mut files = Vec::new();
    for p in paths {
        let p = common::golden(p);
        files.push(GgufFile::open(&p, LoadMode::Read).unwrap());
    }
    let mut checked = 0;
    for t in files[0].tensors() {
        let a = common::decode::decode(&files[0], t);
        for other in &files[1..] {
            let b = common::decode::decode(other, other.tensor(&t.name).unwrap());
            assert_eq!((a.rows, a.cols), (b.rows, b.cols), "{}", t.name);
            let same =
                a.w.iter()
                    .zip(&b.w)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same,
                "{} decodes differently in {} and another file",
                t.name,
                t.ty.name()
            );
        }
        checked += 1;
    }
    assert_eq!(checked, files[0].tensors().len());
    assert_eq!(checked, 1 + 4 * 11 + 1);
}

#[test]
fn reference_matches_bitnet_cpp_i2_s() {
    let g = load(
        "gguf/bitnet-tiny-i2_s.gguf",
        "bitnet-tiny-i2_s.json",
        "logits/bitnet-i2_s.t1.f32",
    );
    let mut m = RefModel::new(&g.file, &g.cfg);
    let exact = m.logits(&g.tokens);
    check(
        "exact reference vs bitnet.cpp I2_S",
        compare(&exact, &g.theirs, g.cfg.n_vocab),
    );
    m.emu = Emulation::bitnet_cpp();
    let emu = m.logits(&g.tokens);
    check(
        "bitnet.cpp-rounding reference vs bitnet.cpp I2_S",
        compare(&emu, &g.theirs, g.cfg.n_vocab),
    );
    // The wrong gate must be caught: SiLU on this file is far off.
    m.emu = Emulation::default();
    m.cfg.ffn_act = FfnAct::Silu;
    let n = 10 * g.cfg.n_vocab; // the first 10 positions are plenty to tell
    let wrong = compare(&m.logits(&g.tokens[..10]), &g.theirs[..n], g.cfg.n_vocab);
    eprintln!("SiLU gate on the bitnet-25 file (must fail): {wrong}");
    assert!(wrong.cosine < 0.95, "{wrong}");
}

#[test]
fn reference_matches_llama_cpp_tq2_0_and_tq1_0() {
    let g = load(
        "gguf/upstream-tiny-tq2_0.gguf",
        "upstream-tiny-tq2_0.json",
        "logits/upstream-tq2_0.t1.f32",
    );
    let mut m = RefModel::new(&g.file, &g.cfg);
    m.emu = Emulation::llama_cpp();
    let emu = m.logits(&g.tokens);
    check(
        "llama.cpp-rounding reference vs llama.cpp TQ2_0",
        compare(&emu, &g.theirs, g.cfg.n_vocab),
    );
    m.emu = Emulation::default();
    let exact = m.logits(&g.tokens);
    // testdata/README.md measured 34/42 top-1 for the exact (per-token int8) math against
    // llama.cpp's per-256-block int8: below the engine bar, so only one less is allowed here.
    check_loose(
        "exact reference vs llama.cpp TQ2_0",
        compare(&exact, &g.theirs, g.cfg.n_vocab),
        33,
    );
    // the wrong rope style must be caught
    m.cfg.rope = RopeStyle::Normal;
    let n = 10 * g.cfg.n_vocab;
    let wrong = compare(&m.logits(&g.tokens[..10]), &g.theirs[..n], g.cfg.n_vocab);
    eprintln!("normal rope on the NeoX file (must fail): {wrong}");
    assert!(wrong.cosine < 0.99, "{wrong}");

    // TQ1_0 holds the same weights: the reference gives bit-identical logits.
    let p = common::golden("gguf/upstream-tiny-tq1_0.gguf");
    let f1 = GgufFile::open(&p, LoadMode::Read).unwrap();
    let c1 = ModelConfig::from_gguf(&f1).unwrap();
    let mut m1 = RefModel::new(&f1, &c1);
    m1.emu = Emulation::llama_cpp();
    let emu1 = m1.logits(&g.tokens);
    assert!(
        emu1.iter()
            .zip(&emu)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );
    check(
        "llama.cpp-rounding reference on TQ1_0 vs llama.cpp",
        compare(&emu1, &g.theirs, c1.n_vocab),
    );
}
