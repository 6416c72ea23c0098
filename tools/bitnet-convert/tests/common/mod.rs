//! Test helpers: the golden checkpoint (decompressed once per test binary), a small
//! safetensors writer to build variants of it, and the golden logits metrics.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use safetensors::{Dtype, SafeTensors};

/// A file of the test data (`testdata/`); a missing one fails the test.
pub fn testdata(rel: &str) -> PathBuf {
    bitnet_testdata::path(rel)
}

/// A fresh temporary directory, removed when the test process exits.
pub fn tmp_dir(tag: &str) -> PathBuf {
    bitnet_test_scratch::fresh_dir(tag)
}

/// One tensor of a checkpoint being built.
#[derive(Clone, Debug)]
pub struct T {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

/// Tensors by name (the order of the file is by name, as `safetensors` writes it).
pub type Tensors = BTreeMap<String, T>;

/// Serializes tensors in the safetensors format.
pub fn safetensors_bytes(tensors: &Tensors) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut off = 0usize;
    for (name, t) in tensors {
        let dtype = serde_json::to_value(t.dtype).unwrap();
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": dtype, "shape": t.shape, "data_offsets": [off, off + t.data.len()]}),
        );
        off += t.data.len();
    }
    let mut h = serde_json::to_vec(&serde_json::Value::Object(header)).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    for t in tensors.values() {
        out.extend_from_slice(&t.data);
    }
    out
}

/// Reads every tensor of a safetensors file.
pub fn read_tensors(path: &Path) -> Tensors {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(n, v)| {
            (
                n,
                T {
                    dtype: v.dtype(),
                    shape: v.shape().to_vec(),
                    data: v.data().to_vec(),
                },
            )
        })
        .collect()
}

/// The golden tiny checkpoint, copied once into a temporary directory: its weights, config
/// and tokenizer files, without the test data's notes beside them (scales, checksum).
pub fn golden_hf() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tmp_dir("golden-hf");
        for f in [
            "config.json",
            "generation_config.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
            "tokenizer.model",
            "model.safetensors",
        ] {
            let src = testdata(&format!("golden/hf/bitnet-tiny-hf/{f}"));
            std::fs::copy(src, dir.join(f)).unwrap();
        }
        dir
    })
}

/// Copies the golden checkpoint's non-weight files to `dir`, with `config.json` edited.
pub fn copy_side_files(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let g = golden_hf();
    for f in [
        "generation_config.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "tokenizer.model",
    ] {
        std::fs::copy(g.join(f), dir.join(f)).unwrap();
    }
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(g.join("config.json")).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec_pretty(&cfg).unwrap(),
    )
    .unwrap();
}

/// f16 bits to f32 (tests only need the normal range).
pub fn f16(bits: u16) -> f32 {
    bitnet_kernels::float::f16_to_f32(bits)
}

/// A float tensor's values.
pub fn values(t: &T) -> Vec<f32> {
    match t.dtype {
        Dtype::F16 => t
            .data
            .chunks_exact(2)
            .map(|b| f16(u16::from_le_bytes([b[0], b[1]])))
            .collect(),
        Dtype::BF16 => t
            .data
            .chunks_exact(2)
            .map(|b| bitnet_kernels::float::bf16_to_f32(u16::from_le_bytes([b[0], b[1]])))
            .collect(),
        Dtype::F32 => t
            .data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        d => panic!("not a float tensor: {d:?}"),
    }
}

/// The golden prompt's token ids.
pub fn golden_tokens() -> Vec<u32> {
    let p = testdata("golden/bitnet-tiny-i2_s.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// A raw little-endian f32 file.
pub fn read_f32s(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Golden README tolerances against the engine that wrote the reference logits.
pub const MAX_REL_L2: f64 = 0.07;
pub const MIN_COSINE: f64 = 0.998;
pub const MIN_TOP1: usize = 35;

/// `(rel-L2, cosine, top-1 agreement)` of `ours` against `theirs`.
pub fn compare(ours: &[f32], theirs: &[f32], n_vocab: usize) -> (f64, f64, usize) {
    assert_eq!(ours.len(), theirs.len());
    let (mut num, mut den, mut ab, mut aa) = (0f64, 0f64, 0f64, 0f64);
    for (&a, &b) in ours.iter().zip(theirs) {
        let (a, b) = (f64::from(a), f64::from(b));
        num += (a - b) * (a - b);
        den += b * b;
        ab += a * b;
        aa += a * a;
    }
    let argmax = |x: &[f32]| {
        x.iter()
            .enumerate()
            .fold(0, |best, (i, &v)| if v > x[best] { i } else { best })
    };
    let top1 = ours
        .chunks_exact(n_vocab)
        .zip(theirs.chunks_exact(n_vocab))
        .filter(|(a, b)| argmax(a) == argmax(b))
        .count();
    ((num / den).sqrt(), ab / (aa.sqrt() * den.sqrt()), top1)
}

/// Every position's logits of the golden prompt on a GGUF model (2 threads, unpinned).
pub fn logits(gguf: &Path) -> (Vec<f32>, usize) {
    use bitnet_core::engine::{EngineOptions, Session};
    use bitnet_core::model::{LoadOptions, Model};
    let opts = EngineOptions {
        threads: 2,
        pin: false,
        n_ctx: 64,
        ..EngineOptions::default()
    };
    let model = std::sync::Arc::new(Model::load(gguf, &LoadOptions::default()).unwrap());
    let n_vocab = model.n_vocab();
    let mut s = Session::new(model, &opts).unwrap();
    let out = s.eval(&golden_tokens(), true).unwrap().to_vec();
    (out, n_vocab)
}

/// Asserts the golden tolerances.
pub fn check_golden(what: &str, ours: &[f32], theirs: &[f32], n_vocab: usize) {
    let (rel, cos, top1) = compare(ours, theirs, n_vocab);
    eprintln!(
        "{what}: rel-L2 {rel:.4}, cosine {cos:.5}, top-1 {top1}/{}",
        ours.len() / n_vocab
    );
    assert!(
        rel <= MAX_REL_L2 && cos >= MIN_COSINE && top1 >= MIN_TOP1,
        "{what}: rel-L2 {rel}, cosine {cos}, top-1 {top1}"
    );
}

/// Converts `dir` to a GGUF in a fresh temporary directory.
pub fn convert(dir: &Path, opts: &bitnet_convert::Options) -> PathBuf {
    let out = tmp_dir("out").join("model.gguf");
    bitnet_convert::convert(dir, &out, opts, &mut |_| {}).unwrap();
    out
}

/// Decoded trits and scale of every ternary tensor of a GGUF (I2_S, TQ2_0 or TQ1_0).
pub fn ternary_tensors(gguf: &Path) -> BTreeMap<String, (Vec<i8>, Vec<f32>)> {
    use bitnet_gguf::{GgufFile, LoadMode, TensorType};
    use bitnet_kernels::formats::{unpack_i2s, unpack_tq1_0_block, unpack_tq2_0_block};
    let f = GgufFile::open(gguf, LoadMode::Read).unwrap();
    let mut out = BTreeMap::new();
    for t in f.tensors() {
        let n = t.n_elements as usize;
        let data = f.tensor_data(t);
        let mut trits = vec![0i8; n];
        let scales = match t.ty {
            TensorType::I2_S => vec![unpack_i2s(data, n, &mut trits).unwrap()],
            TensorType::TQ2_0 => (0..n / 256)
                .map(|b| unpack_tq2_0_block(&data[b * 66..], &mut trits[b * 256..]).unwrap())
                .collect(),
            TensorType::TQ1_0 => (0..n / 256)
                .map(|b| unpack_tq1_0_block(&data[b * 54..], &mut trits[b * 256..]))
                .collect(),
            _ => continue,
        };
        out.insert(t.name.clone(), (trits, scales));
    }
    out
}

/// The effective ternarization of a latent matrix (testdata/README.md's rule).
pub fn absmean(w: &[f32]) -> (Vec<i8>, f32) {
    let e = (w.iter().map(|v| f64::from(v.abs())).sum::<f64>() / w.len() as f64) as f32;
    (
        w.iter()
            .map(|v| (v / e).round_ties_even().clamp(-1.0, 1.0) as i8)
            .collect(),
        e,
    )
}

/// Packs trits `[rows, cols]` as transformers' `pack_weights` does: `[rows / 4, cols]`,
/// row `i * rows / 4 + r` in bits `2i` of packed row `r`.
pub fn hf_pack(trits: &[i8], rows: usize, cols: usize) -> Vec<u8> {
    let p = rows / 4;
    let mut out = vec![0u8; p * cols];
    for o in 0..rows {
        let (i, r) = (o / p, o % p);
        for c in 0..cols {
            out[r * cols + c] |= ((trits[o * cols + c] + 1) as u8) << (2 * i);
        }
    }
    out
}

/// Names of the seven projections of a layer.
pub const PROJS: [&str; 7] = [
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
];

/// Whether a checkpoint tensor name is a projection weight.
pub fn is_proj(name: &str) -> bool {
    PROJS.iter().any(|p| name.ends_with(&format!("{p}.weight")))
}
