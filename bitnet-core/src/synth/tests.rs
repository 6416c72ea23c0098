//! Generator tests: every weight and embedding type round-trips through the GGUF reader and
//! the config rules, and the output is a pure function of the spec and seed.

use super::*;
use bitnet_gguf::{GgufFile, LoadMode};

fn tmp(name: &str) -> PathBuf {
    bitnet_test_scratch::fresh_dir("synth").join(name)
}

fn small(weight_type: TensorType) -> SynthSpec {
    SynthSpec {
        n_vocab: 300,
        weight_type,
        ..SynthSpec::preset("tiny").unwrap()
    }
}

fn generate(spec: &SynthSpec) -> (PathBuf, SynthReport) {
    let path = tmp("m.gguf");
    let mut last = (0, 1);
    let rep = write_model(spec, &path, |d, t| {
        assert!(d >= last.0 && d <= t);
        last = (d, t);
    })
    .unwrap();
    assert_eq!(last.0, last.1, "progress must reach the total");
    (path, rep)
}

#[test]
fn every_weight_type_round_trips() {
    for ty in [
        TensorType::I2_S,
        TensorType::TQ2_0,
        TensorType::TQ1_0,
        TensorType::Q1_0,
        TensorType::F16,
    ] {
        let spec = small(ty);
        let (path, rep) = generate(&spec);
        let f = GgufFile::open(&path, LoadMode::Read).unwrap();
        let cfg = ModelConfig::from_gguf(&f).unwrap();
        assert_eq!(cfg, rep.config);
        assert_eq!(cfg.weight_type, ty);
        assert_eq!(f.tensor("blk.1.ffn_down.weight").unwrap().ty, ty);
        assert_eq!(f.tensor("token_embd.weight").unwrap().ty, TensorType::F16);
        assert!(cfg.tied_head && f.tensor("output.weight").is_none());
        assert_eq!((cfg.n_vocab, cfg.n_embd, cfg.n_layer), (300, 256, 2));
        assert_eq!(cfg.ffn_act, FfnAct::Relu2);
        assert_eq!(rep.file_bytes, std::fs::metadata(&path).unwrap().len());
        assert_eq!(rep.n_tensors, f.tensors().len());
        let toks = f.metadata().get_str_array("tokenizer.ggml.tokens").unwrap();
        assert_eq!(toks.len(), 300);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn every_embedding_and_head_type_round_trips() {
    for ty in [
        TensorType::F32,
        TensorType::F16,
        TensorType::BF16,
        TensorType::Q8_0,
        TensorType::Q6_K,
        TensorType::Q4_0,
    ] {
        let spec = SynthSpec {
            embd_type: ty,
            head_type: Some(ty),
            arch: Arch::Bitnet,
            ..small(TensorType::TQ2_0)
        };
        let (path, rep) = generate(&spec);
        let f = GgufFile::open(&path, LoadMode::Mmap).unwrap();
        let cfg = ModelConfig::from_gguf(&f).unwrap();
        assert_eq!(cfg.embd_type, ty);
        assert_eq!(cfg.head_type, Some(ty));
        assert_eq!(f.tensor("output.weight").unwrap().ty, ty);
        assert_eq!((cfg.arch, cfg.ffn_act), (Arch::Bitnet, FfnAct::Silu));
        assert_eq!(rep.config.head_type, Some(ty));
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let spec = small(TensorType::TQ1_0);
    let (a, _) = generate(&spec);
    let (b, _) = generate(&spec);
    let (c, _) = generate(&SynthSpec {
        seed: 1,
        ..spec.clone()
    });
    let (ba, bb, bc) = (
        std::fs::read(&a).unwrap(),
        std::fs::read(&b).unwrap(),
        std::fs::read(&c).unwrap(),
    );
    assert_eq!(ba, bb);
    assert_eq!(ba.len(), bc.len());
    assert_ne!(ba, bc);
    // only the data differs: the header is seed-independent
    let f = GgufFile::open(&a, LoadMode::Read).unwrap();
    let h = f.data_offset() as usize;
    assert_eq!(ba[..h], bc[..h]);
    let ta = f.tensor("blk.0.attn_q.weight").unwrap();
    let fc = GgufFile::open(&c, LoadMode::Read).unwrap();
    assert_ne!(
        f.tensor_data(ta),
        fc.tensor_data(fc.tensor(&ta.name).unwrap())
    );
}

#[test]
fn options_reach_the_file() {
    let spec = SynthSpec {
        ffn_act: Some(FfnAct::Silu),
        act_bits: ActBits::Binary,
        proj_scales: true,
        zero_share: 0.5,
        ..small(TensorType::Q1_0)
    };
    let (path, rep) = generate(&spec);
    let f = GgufFile::open(&path, LoadMode::Read).unwrap();
    let cfg = ModelConfig::from_gguf(&f).unwrap();
    assert_eq!(cfg.ffn_act, FfnAct::Silu);
    assert_eq!(cfg.act_bits, ActBits::Binary);
    assert!(cfg.has_proj_scales);
    let s = f.tensor("blk.1.attn_v.scale").unwrap();
    let v = f32::from_le_bytes(f.tensor_data(s)[..4].try_into().unwrap());
    assert!((0.5..1.5).contains(&v), "{v}");
    assert_eq!(rep.n_tensors, 1 + 2 * (11 + 7) + 1);
}

#[test]
fn zero_share_is_respected() {
    for (share, lo, hi) in [
        (0.0f32, 0.0, 0.001),
        (1.0 / 3.0, 0.30, 0.37),
        (0.8, 0.77, 0.83),
    ] {
        let spec = SynthSpec {
            zero_share: share,
            ..small(TensorType::TQ2_0)
        };
        let (path, _) = generate(&spec);
        let f = GgufFile::open(&path, LoadMode::Read).unwrap();
        let t = f.tensor("blk.0.ffn_up.weight").unwrap();
        let data = f.tensor_data(t);
        let (mut zeros, mut n) = (0usize, 0usize);
        for blk in data.chunks_exact(66) {
            for &b in &blk[..64] {
                for l in 0..4 {
                    zeros += usize::from((b >> (2 * l)) & 3 == 1);
                    n += 1;
                }
            }
        }
        let z = zeros as f64 / n as f64;
        assert!((lo..=hi).contains(&z), "share {share}: zero fraction {z}");
    }
}

#[test]
fn vocab_file_is_copied() {
    let vocab = bitnet_testdata::path("vocab/ggml-vocab-llama-spm.gguf");
    let spec = SynthSpec {
        vocab: Some(vocab.clone()),
        n_layer: 1,
        ..small(TensorType::I2_S)
    };
    let (path, rep) = generate(&spec);
    assert_eq!(rep.config.n_vocab, 32000);
    let f = GgufFile::open(&path, LoadMode::Read).unwrap();
    let src = GgufFile::open(&vocab, LoadMode::Read).unwrap();
    for (k, v) in src
        .metadata()
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
    {
        assert_eq!(f.metadata().get(k), Some(v), "{k}");
    }
    assert_eq!(
        f.tensor("token_embd.weight").unwrap().dims,
        vec![256, 32000]
    );
    let e = write_model(
        &SynthSpec {
            vocab: Some("/nonexistent/v.gguf".into()),
            ..small(TensorType::I2_S)
        },
        &tmp("x.gguf"),
        |_, _| {},
    );
    assert!(matches!(e, Err(SynthError::Vocab { .. })));
}

#[test]
fn presets_and_bad_specs() {
    for p in PRESETS {
        let s = SynthSpec::preset(p.name).unwrap();
        let (meta, tensors) = plan(&s).unwrap();
        let infos: Vec<_> = tensors.into_iter().map(|(t, _)| t).collect();
        let cfg = ModelConfig::from_parts(&meta, &infos).unwrap();
        assert_eq!(cfg.n_vocab, s.n_vocab, "{}", p.name);
        assert_eq!(cfg.weight_type, s.weight_type);
    }
    let big = SynthSpec::preset("2b-4t").unwrap();
    let (meta, tensors) = plan(&big).unwrap();
    let infos: Vec<_> = tensors.into_iter().map(|(t, _)| t).collect();
    let cfg = ModelConfig::from_parts(&meta, &infos).unwrap();
    // BitNet b1.58 2B-4T: about 2.4 B weights including the 328 M embedding
    assert!(
        (2_300_000_000..2_500_000_000).contains(&cfg.n_params()),
        "{}",
        cfg.n_params()
    );
    assert_eq!((cfg.head_dim, cfg.gqa_group()), (128, 4));

    assert!(matches!(
        SynthSpec::preset("7b"),
        Err(SynthError::UnknownPreset { name, .. }) if name == "7b"
    ));
    let three_b = SynthSpec {
        weight_type: TensorType::TQ2_0,
        ..SynthSpec::preset("3b").unwrap()
    };
    let e = plan(&three_b).unwrap_err();
    assert!(e.to_string().contains("3200"), "{e}");
    let cases = [
        SynthSpec {
            n_layer: 0,
            ..small(TensorType::TQ2_0)
        },
        SynthSpec {
            n_head_kv: 3,
            ..small(TensorType::TQ2_0)
        },
        SynthSpec {
            zero_share: 1.0,
            ..small(TensorType::TQ2_0)
        },
        SynthSpec {
            n_vocab: 10,
            ..small(TensorType::TQ2_0)
        },
        SynthSpec {
            embd_type: TensorType::TQ2_0,
            ..small(TensorType::TQ2_0)
        },
        SynthSpec {
            weight_type: TensorType::Q4_1,
            ..small(TensorType::TQ2_0)
        },
    ];
    for s in cases {
        assert!(matches!(plan(&s), Err(SynthError::Spec(_))), "{s:?}");
    }
    // Shapes far too large, or whose weight count overflows, are refused by their own
    // check, before any tensor list is built (a billion layers used to grow to 5.9 GB).
    let too_large = [
        (
            SynthSpec {
                n_layer: 1_000_000_000,
                ..small(TensorType::TQ2_0)
            },
            "at most 4096",
        ),
        (
            SynthSpec {
                n_layer: 4000,
                n_ff: 1 << 30,
                ..small(TensorType::TQ2_0)
            },
            "G weights",
        ),
        (
            SynthSpec {
                n_ff: usize::MAX / 2,
                ..small(TensorType::TQ2_0)
            },
            "G weights",
        ),
    ];
    for (s, why) in too_large {
        let e = plan(&s).unwrap_err();
        assert!(e.to_string().contains(why), "{s:?}: {e}");
    }
    // a failed write leaves no file behind
    let out = tmp("none.gguf");
    assert!(
        write_model(
            &SynthSpec {
                n_layer: 0,
                ..small(TensorType::TQ2_0)
            },
            &out,
            |_, _| {}
        )
        .is_err()
    );
    assert!(!out.exists());
}
