//! The BitNet embedding architectures (qwen3: BitNet-embedding-0.6B; gemma3:
//! BitNet-embedding-270M) against the f32 reference forward pass, on tiny generated models in
//! bitnet.cpp's converter layout (I2_S projections as ggml type 36, F16 norms and embedding,
//! per-projection input norms, no output head, last-token pooling) and in its F16 layout
//! (latent projections, ternarized by absmean at load by both sides): every kernel set,
//! pooled as the file says and by mean, batched across inputs.

mod common;

use bitnet_core::config::{Arch, ModelConfig, TOKEN_EMBD};
use bitnet_core::embed::{Normalize, Pooling, embed_batch, pool};
use bitnet_core::engine::Engine;
use bitnet_core::model::LoadMode;
use bitnet_core::synth::SynthSpec;
use bitnet_gguf::{GgufFile, LoadMode as FileMode, TensorType};
use bitnet_kernels::Isa;
use common::metrics::{cosine, rel_l2};
use common::reference::{Emulation, RefModel};

/// Engine vs reference hidden states of a row no int8 rounding flip reached: float
/// summation order and the f16 KV cache's rounding (emulated by the reference) aside, the
/// same arithmetic.
const EXACT_REL_L2: f64 = 1e-5;

fn inputs() -> Vec<Vec<u32>> {
    [9usize, 1, 23, 5]
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            (0..n)
                .map(|i| ((i * 53 + k * 29 + 7) % 512) as u32)
                .collect()
        })
        .collect()
}

fn unit(v: &[f32]) -> Vec<f32> {
    let n = v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    v.iter().map(|&x| (f64::from(x) / n) as f32).collect()
}

fn check(preset: &str, weight_type: TensorType) {
    let spec = SynthSpec {
        weight_type,
        seed: 11,
        ..SynthSpec::preset(preset).unwrap()
    };
    let what = format!("{preset} {}", weight_type.name());
    let path = common::models::synth_file(&format!("{preset}_{}", weight_type.name()), &spec);
    let f = GgufFile::open(&path, FileMode::Read).unwrap();
    let cfg = ModelConfig::from_gguf(&f).unwrap();
    // The layout bitnet.cpp's converter writes.
    assert!(
        cfg.proj_norms && cfg.qk_norms && cfg.is_embedding_model(),
        "{what}"
    );
    assert!(
        cfg.tied_head && f.tensor("output.weight").is_none(),
        "{what}"
    );
    assert_eq!(cfg.pooling_type, Some(3), "{what}");
    assert_eq!(
        f.tensor("blk.0.attn_norm.weight").unwrap().ty,
        TensorType::F16
    );
    assert_eq!(f.tensor(TOKEN_EMBD).unwrap().ty, TensorType::F16);
    assert_eq!(f.tensor("blk.1.ffn_down.weight").unwrap().ty, weight_type);
    assert_ne!(
        cfg.head_dim,
        cfg.n_embd / cfg.n_head,
        "{what}: head_dim is its own"
    );
    let mut reference = RefModel::new(&f, &cfg);
    reference.emu = Emulation::f16_kv_cache();
    let inputs = inputs();
    let refs: Vec<&[u32]> = inputs.iter().map(Vec::as_slice).collect();
    let want: Vec<Vec<f32>> = inputs.iter().map(|t| reference.hidden(t)).collect();
    let e = cfg.n_embd;
    for isa in Isa::available() {
        let o = common::setup::Opts {
            threads: 2,
            isa: Some(isa),
            mode: LoadMode::Mmap,
            pin: false,
            n_ctx: 64,
            prefill_chunk: 16,
            ..common::setup::Opts::default()
        };
        let model = common::setup::load(&path, &o).unwrap();
        let mut engine = Engine::new(model.model.clone(), &model.engine).unwrap();
        let what = format!("{what} {isa}");
        // Every token's hidden state (no pooling, no normalization) against the reference:
        // the same to float rounding, but for the tokens where an int8 activation rounded
        // the other way (a value at a .5 tie after a different summation order); one such
        // flip moves a 256-wide tiny model's row by about 1e-2. Such ties are rare, but a
        // token quantizes about 10^4 values: a few of every 20 rows see one.
        let rows = embed_batch(&mut engine, &refs, Pooling::None, Normalize(-1)).unwrap();
        let (mut exact, mut total) = (0, 0);
        for (i, w) in want.iter().enumerate() {
            assert_eq!(rows[i].len(), w.len() / e, "{what}: input {i} rows");
            for (t, got) in rows[i].iter().enumerate() {
                let w = &w[t * e..(t + 1) * e];
                let c = cosine(got, w);
                assert!(c >= 0.999, "{what}: input {i} token {t} cosine {c}");
                exact += usize::from(rel_l2(got, w) <= EXACT_REL_L2);

                total += 1;
            }
        }
        // A flip in a K or V row moves every later row of its input a little (it is
        // attended to), so the share of exact rows varies by kernel set: at least half.
        assert!(
            exact * 2 >= total,
            "{what}: only {exact} of {total} rows agree to float rounding"
        );
        // As an embedding: last-token (the file's) and mean pooling, L2-normalized.
        for pooling in [Pooling::Last, Pooling::Mean] {
            let got = embed_batch(&mut engine, &refs, pooling, Normalize(2)).unwrap();
            for (i, w) in want.iter().enumerate() {
                let r = unit(&pool(w, e, pooling)[0]);
                let c = cosine(&got[i][0], &r);
                assert!(
                    c >= 0.999,
                    "{what} {}: input {i} cosine {c}",
                    pooling.name()
                );
            }
        }
    }
    std::fs::remove_file(&path).ok();
}

#[test]
fn qwen3_embedding_i2s_matches_the_reference() {
    check("tiny-qwen3-embed", TensorType::I2_S);
}

#[test]
fn qwen3_embedding_f16_latent_weights_match_the_reference() {
    check("tiny-qwen3-embed", TensorType::F16);
}

#[test]
fn gemma3_embedding_i2s_matches_the_reference() {
    check("tiny-gemma3-embed", TensorType::I2_S);
}

#[test]
fn gemma3_embedding_f16_latent_weights_match_the_reference() {
    check("tiny-gemma3-embed", TensorType::F16);
}

/// The parts of the architectures the reference would not notice if both sides dropped
/// them: each changes the hidden states.
#[test]
fn each_architecture_part_changes_the_output() {
    let spec = SynthSpec {
        seed: 3,
        ..SynthSpec::preset("tiny-gemma3-embed").unwrap()
    };
    let path = common::models::synth_file("gemma3_parts", &spec);
    let f = GgufFile::open(&path, FileMode::Read).unwrap();
    let cfg = ModelConfig::from_gguf(&f).unwrap();
    assert_eq!(cfg.arch, Arch::Gemma3);
    let tokens: Vec<u32> = (0..7).map(|i| i * 41 % 512).collect();
    let base = RefModel::new(&f, &cfg).hidden(&tokens);
    let mut as_qwen = cfg.clone();
    as_qwen.arch = Arch::Qwen3;
    as_qwen.ffn_act = bitnet_core::config::FfnAct::Silu;
    let other = RefModel::new(&f, &as_qwen).hidden(&tokens);
    assert!(rel_l2(&other, &base) > 0.05);
    std::fs::remove_file(&path).ok();
}
