//! Embeddings (`bitnet_core::embed`): the engine's final normed hidden states against the
//! f32 reference forward pass's on a tiny generated model, on every kernel set; pooling and
//! normalization of them as llama.cpp does it; a prefill chunk smaller than the input; and
//! the errors for an empty and an over-long input.

mod common;

use bitnet_core::CoreError;
use bitnet_core::config::ModelConfig;
use bitnet_core::embed::{Normalize, Pooling, embed_batch, embed_tokens, pool};
use bitnet_core::model::LoadMode;
use bitnet_core::synth::SynthSpec;
use bitnet_gguf::{GgufFile, LoadMode as FileMode, TensorType};
use bitnet_kernels::Isa;
use common::metrics::{cosine, rel_l2};
use common::reference::{Emulation, RefModel};

/// Engine hidden states vs the reference with f16 K/V emulated: only the float summation
/// order differs, as for logits (`reference_engine.rs`, 2e-3).
const MAX_REL_L2: f64 = 2e-3;

const PROMPT: [u32; 12] = [1, 17, 200, 45, 299, 3, 128, 77, 260, 5, 99, 150];

fn spec() -> SynthSpec {
    SynthSpec {
        n_vocab: 300,
        weight_type: TensorType::TQ2_0,
        seed: 5,
        ..SynthSpec::preset("tiny").unwrap()
    }
}

/// `prefill_chunk` tokens a pass at most (`None`: the default).
fn opts(isa: Option<Isa>, prefill_chunk: Option<usize>) -> common::setup::Opts {
    let d = common::setup::Opts::default();
    common::setup::Opts {
        threads: 2,
        isa,
        mode: LoadMode::Mmap,
        pin: false,
        n_ctx: 64,
        prefill_chunk: prefill_chunk.unwrap_or(d.prefill_chunk),
        ..d
    }
}

fn unit(v: &[f32]) -> Vec<f32> {
    let n = v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    v.iter().map(|&x| (f64::from(x) / n) as f32).collect()
}

#[test]
fn hidden_states_match_the_reference_on_every_kernel_set() {
    let path = common::models::synth_file("embed", &spec());
    let f = GgufFile::open(&path, FileMode::Read).unwrap();
    let cfg = ModelConfig::from_gguf(&f).unwrap();
    let mut reference = RefModel::new(&f, &cfg);
    reference.emu = Emulation::f16_kv_cache();
    let want = reference.hidden(&PROMPT);
    let e = cfg.n_embd;
    for isa in Isa::available() {
        // A prefill chunk of 5: the 12 tokens take three passes.
        for chunk in [None, Some(5)] {
            let model = common::setup::load(&path, &opts(Some(isa), chunk)).unwrap();
            let mut s = model.session(64).unwrap();
            let got = s.hidden_states(&PROMPT, true).unwrap();
            let what = format!("{isa} chunk {chunk:?}");
            assert_eq!(got.len(), PROMPT.len() * e, "{what}");
            let d = rel_l2(&got, &want);
            assert!(d <= MAX_REL_L2, "{what}: rel-L2 {d}");
            // The last token's alone, on a fresh context: the same row.
            s.reset();
            let last = s.hidden_states(&PROMPT, false).unwrap();
            assert_eq!(last, got[(PROMPT.len() - 1) * e..], "{what}: last row");

            // Pooled and normalized as llama.cpp does: each pooling against the reference's
            // rows pooled the same way.
            for pooling in [Pooling::Last, Pooling::Mean, Pooling::Cls] {
                let v = embed_tokens(&mut s, &PROMPT, pooling, Normalize(2)).unwrap();
                assert_eq!(v.len(), 1);
                let r = unit(&pool(&want, e, pooling)[0]);
                let c = cosine(&v[0], &r);
                assert!(c >= 0.9999, "{what} {}: cosine {c}", pooling.name());
                let n: f64 = v[0].iter().map(|&x| f64::from(x).powi(2)).sum();
                assert!((n - 1.0).abs() < 1e-5, "{what}: squared norm {n}");
                assert_eq!(s.n_past(), 0, "{what}: the context is left empty");
            }
            let each = embed_tokens(&mut s, &PROMPT, Pooling::None, Normalize(-1)).unwrap();
            assert_eq!(each.len(), PROMPT.len());
            assert_eq!(each.concat(), got, "{what}: no pooling, no normalization");
            // The session still runs the head afterwards.
            let logits = s.eval(&PROMPT[..3], false).unwrap();
            assert_eq!(logits.len(), cfg.n_vocab);
        }
    }
    std::fs::remove_file(&path).ok();
}

#[test]
fn empty_and_over_long_inputs_are_errors() {
    let path = common::models::synth_file("embed_errors", &spec());
    let model = common::setup::load(&path, &opts(None, None)).unwrap();
    let mut s = model.session(16).unwrap();
    assert!(matches!(
        embed_tokens(&mut s, &[], Pooling::Last, Normalize(2)),
        Err(CoreError::EmptyInput)
    ));
    let long: Vec<u32> = (0..17).collect();
    assert!(matches!(
        embed_tokens(&mut s, &long, Pooling::Mean, Normalize(2)),
        Err(CoreError::ContextOverflow { .. })
    ));
    // Nothing was kept: a valid input still embeds.
    assert_eq!(s.n_past(), 0);
    embed_tokens(&mut s, &long[..16], Pooling::Mean, Normalize(2)).unwrap();
    std::fs::remove_file(&path).ok();
}

/// Inputs packed into shared passes (`embed_batch`): each input's vectors are bit-equal to
/// its own embedding on a fresh context, whatever else shares its passes, for inputs that
/// span several passes, that fill the cache so that later ones wait, and for every pooling.
#[test]
fn batched_inputs_equal_each_input_alone() {
    let path = common::models::synth_file("embed_batch", &spec());
    let inputs: Vec<Vec<u32>> = [3usize, 11, 1, 20, 5, 9, 2]
        .iter()
        .enumerate()
        .map(|(k, &n)| (0..n).map(|i| ((i * 37 + k * 11) % 300) as u32).collect())
        .collect();
    let refs: Vec<&[u32]> = inputs.iter().map(|v| v.as_slice()).collect();
    for isa in Isa::available() {
        // A pass of 8 tokens, a cache of 32 positions: the 20-token input spans three passes
        // and leaves no room for the next one until it is done.
        let model = common::setup::load(&path, &opts(Some(isa), Some(8))).unwrap();
        let mut alone = model.session(32).unwrap();
        let mut engine = {
            let mut e = model.engine.clone();
            e.n_ctx = 32;
            bitnet_core::engine::Engine::new(model.model.clone(), &e).unwrap()
        };
        for pooling in [Pooling::Last, Pooling::Mean, Pooling::None] {
            let got = embed_batch(&mut engine, &refs, pooling, Normalize(2)).unwrap();
            assert_eq!(got.len(), inputs.len());
            for (i, t) in inputs.iter().enumerate() {
                let want = embed_tokens(&mut alone, t, pooling, Normalize(2)).unwrap();
                assert_eq!(got[i], want, "{isa} {}: input {i}", pooling.name());
            }
            assert_eq!(
                engine.kv().stats().sequences,
                0,
                "{isa}: every input's sequence is freed"
            );
        }
        // Bad inputs are refused before anything runs.
        let long: Vec<u32> = (0..33).collect();
        for bad in [&[][..], &long[..], &[300][..]] {
            let r = embed_batch(&mut engine, &[&inputs[0], bad], Pooling::Last, Normalize(2));
            assert!(r.is_err(), "{isa}: {} tokens accepted", bad.len());
        }
    }
    std::fs::remove_file(&path).ok();
}
