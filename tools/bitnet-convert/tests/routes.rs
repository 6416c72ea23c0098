//! Every checkpoint route lands on the same model: the golden tiny checkpoint as shipped
//! (fp16 latent weights), packed four per byte with weight scales (the 2B-4T release
//! format), bf16 master weights, split into shards, renamed the 1bitLLM way (SiLU), and as
//! a packed ternary Llama. Trits must be identical to bitnet.cpp's own conversion, and
//! logits within the golden tolerances of the engine that produced the reference.

mod common;

use bitnet_convert::{Options, TypeOptions};
use bitnet_gguf::TensorType;
use common::*;
use safetensors::Dtype;

fn opts(weights: TensorType) -> Options {
    Options {
        types: TypeOptions {
            weights,
            embd: Some(TensorType::F16),
            head: Some(TensorType::F16),
        },
        pre: None,
        name: Some("tiny".into()),
        calibration: None,
    }
}

fn write(dir: &std::path::Path, tensors: &Tensors) {
    std::fs::write(dir.join("model.safetensors"), safetensors_bytes(tensors)).unwrap();
}

/// The golden latent tensors.
fn golden_tensors() -> Tensors {
    read_tensors(&golden_hf().join("model.safetensors"))
}

#[test]
fn latent_fp16_converts_to_bitnet_cpp_trits_and_golden_logits() {
    let dir = golden_hf();
    let ref_gguf = testdata("golden/gguf/bitnet-tiny-i2_s.gguf");
    let ref_logits = testdata("golden/logits/bitnet-i2_s.t1.f32");
    let out = convert(dir, &opts(TensorType::I2_S));
    // bitnet.cpp's converter and ours must agree on every trit and scale.
    let ours = ternary_tensors(&out);
    let theirs = ternary_tensors(&ref_gguf);
    assert_eq!(ours.len(), 28);
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>()
    );
    for (name, (t, s)) in &ours {
        let (t2, s2) = &theirs[name];
        assert!(t == t2, "{name}: trits differ from bitnet.cpp's");
        assert_eq!(s, s2, "{name}: scale");
    }
    let (l, n_vocab) = logits(&out);
    check_golden("fp16 latent -> I2_S", &l, &read_f32s(&ref_logits), n_vocab);
}

#[test]
fn tq2_0_and_tq1_0_outputs_hold_the_same_trits() {
    let dir = golden_hf();
    let i2s = ternary_tensors(&convert(dir, &opts(TensorType::I2_S)));
    for ty in [TensorType::TQ2_0, TensorType::TQ1_0] {
        let out = convert(dir, &opts(ty));
        let tq = ternary_tensors(&out);
        for (name, (t, s)) in &tq {
            assert!(*t == i2s[name].0, "{name} {}: trits", ty.name());
            // TQ blocks store the scale as f16; the golden scales are f16-exact.
            assert!(s.iter().all(|&d| d == i2s[name].1[0]), "{name}: scale");
        }
        let ref_logits = testdata("golden/logits/bitnet-i2_s.t1.f32");
        let (l, n_vocab) = logits(&out);
        check_golden(
            &format!("fp16 latent -> {}", ty.name()),
            &l,
            &read_f32s(&ref_logits),
            n_vocab,
        );
    }
}

/// The golden checkpoint packed as the 2B-4T release is: U8 `[out/4, in]` plus a
/// `weight_scale` = 1 / effective scale, in `scale_dtype`.
fn packed_checkpoint(scale_dtype: Dtype) -> std::path::PathBuf {
    let mut t = golden_tensors();
    let dir = tmp_dir("packed");
    let names: Vec<String> = t.keys().filter(|n| is_proj(n)).cloned().collect();
    for name in names {
        let w = t.remove(&name).unwrap();
        let (rows, cols) = (w.shape[0], w.shape[1]);
        let (trits, e) = absmean(&values(&w));
        t.insert(
            name.clone(),
            T {
                dtype: Dtype::U8,
                shape: vec![rows / 4, cols],
                data: hf_pack(&trits, rows, cols),
            },
        );
        let inv = 1.0 / e;
        let data = match scale_dtype {
            Dtype::F32 => inv.to_le_bytes().to_vec(),
            Dtype::BF16 => bitnet_kernels::float::f32_to_bf16(inv)
                .to_le_bytes()
                .to_vec(),
            d => panic!("{d:?}"),
        };
        let scale = name.replace(".weight", ".weight_scale");
        t.insert(
            scale,
            T {
                dtype: scale_dtype,
                shape: vec![1],
                data,
            },
        );
    }
    write(&dir, &t);
    copy_side_files(&dir, |c| {
        c["quantization_config"] = serde_json::json!({"quant_method": "bitnet", "linear_class": "bitlinear", "quantization_mode": "offline"});
    });
    dir
}

#[test]
fn packed_release_format_matches_the_latent_route() {
    let dir = golden_hf();
    let ref_logits = testdata("golden/logits/bitnet-i2_s.t1.f32");
    let latent_gguf = convert(dir, &opts(TensorType::I2_S));
    let latent = ternary_tensors(&latent_gguf);
    let (latent_logits, n_vocab) = logits(&latent_gguf);
    for dtype in [Dtype::F32, Dtype::BF16] {
        let packed_dir = packed_checkpoint(dtype);
        let out = convert(&packed_dir, &opts(TensorType::I2_S));
        let packed = ternary_tensors(&out);
        for (name, (t, s)) in &packed {
            assert!(
                *t == latent[name].0,
                "{name} ({dtype:?} scale): trits differ between routes"
            );
            let rel = (s[0] - latent[name].1[0]).abs() / latent[name].1[0];
            let tol = if dtype == Dtype::F32 { 1e-6 } else { 4e-3 };
            assert!(
                rel <= tol,
                "{name}: scale {} vs {} ({dtype:?})",
                s[0],
                latent[name].1[0]
            );
        }
        let (l, _) = logits(&out);
        check_golden(
            &format!("packed ({dtype:?} weight_scale)"),
            &l,
            &read_f32s(&ref_logits),
            n_vocab,
        );
        if dtype == Dtype::F32 {
            let (rel, cos, _) = compare(&l, &latent_logits, n_vocab);
            assert!(
                rel < 0.02 && cos > 0.9998,
                "packed vs latent logits: rel-L2 {rel}, cosine {cos}"
            );
        }
    }
}

#[test]
fn bf16_master_weights_give_the_same_trits() {
    let mut t = golden_tensors();
    let ref_logits = testdata("golden/logits/bitnet-i2_s.t1.f32");
    let dir = tmp_dir("bf16");
    // The projections as bf16 (embedding and norms stay f16: rounding those to bf16 would
    // change the model itself, not the ternarization route under test).
    for (_, v) in t.iter_mut().filter(|(n, _)| is_proj(n)) {
        let x = values(v);
        v.data = x
            .iter()
            .flat_map(|&f| bitnet_kernels::float::f32_to_bf16(f).to_le_bytes())
            .collect();
        v.dtype = Dtype::BF16;
    }
    write(&dir, &t);
    copy_side_files(&dir, |c| c["torch_dtype"] = "bfloat16".into());
    let out = convert(&dir, &opts(TensorType::I2_S));
    let latent_gguf = convert(golden_hf(), &opts(TensorType::I2_S));
    let latent = ternary_tensors(&latent_gguf);
    for (name, (trits, _)) in ternary_tensors(&out) {
        assert!(trits == latent[&name].0, "{name}: bf16 master trits differ");
    }
    let (l, n_vocab) = logits(&out);
    check_golden("bf16 master -> I2_S", &l, &read_f32s(&ref_logits), n_vocab);
    // The golden latent values are bf16-exact, so the scales and the logits are too.
    assert_eq!(
        l,
        logits(&latent_gguf).0,
        "bf16 and fp16 latent routes give different logits"
    );
}

#[test]
fn sharded_checkpoint_converts_byte_identically() {
    let (dir, t) = (golden_hf(), golden_tensors());
    let single = std::fs::read(convert(dir, &opts(TensorType::TQ2_0))).unwrap();
    let shards = tmp_dir("shards");
    let names: Vec<&String> = t.keys().collect();
    let mut index = serde_json::Map::new();
    for (k, chunk) in names.chunks(names.len().div_ceil(3)).enumerate() {
        let file = format!("model-{:05}-of-00003.safetensors", k + 1);
        let part: Tensors = chunk
            .iter()
            .map(|n| ((*n).clone(), t[*n].clone()))
            .collect();
        std::fs::write(shards.join(&file), safetensors_bytes(&part)).unwrap();
        for n in chunk {
            index.insert((*n).clone(), file.clone().into());
        }
    }
    let idx = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": index});
    std::fs::write(shards.join("model.safetensors.index.json"), idx.to_string()).unwrap();
    copy_side_files(&shards, |_| {});
    let sharded = std::fs::read(convert(&shards, &opts(TensorType::TQ2_0))).unwrap();
    assert!(
        single == sharded,
        "sharded conversion differs from the single-file one"
    );
}

#[test]
fn onebitllm_layout_converts_to_the_silu_bitnet_arch() {
    let mut t = golden_tensors();
    let ref_logits = testdata("golden/logits/upstream-tq2_0.t1.f32");
    let dir = tmp_dir("1bitllm");
    // 1bitLLM names its sub-norms after torchscale and ships an untied head.
    let renamed: Tensors = std::mem::take(&mut t)
        .into_iter()
        .map(|(n, v)| {
            (
                n.replace("attn_sub_norm", "inner_attn_ln")
                    .replace("ffn_sub_norm", "ffn_layernorm"),
                v,
            )
        })
        .collect();
    t = renamed;
    t.insert(
        "lm_head.weight".into(),
        t["model.embed_tokens.weight"].clone(),
    );
    write(&dir, &t);
    copy_side_files(&dir, |c| {
        c["architectures"] = serde_json::json!(["BitnetForCausalLM"]);
        c["model_type"] = "llama".into();
        c["hidden_act"] = "silu".into();
        c["tie_word_embeddings"] = false.into();
    });
    let out = convert(&dir, &opts(TensorType::TQ2_0));
    let plan = bitnet_convert::plan(&dir, &opts(TensorType::TQ2_0)).unwrap();
    assert_eq!(plan.config.arch_name, "bitnet");
    assert!(!plan.config.tied_head);
    // llama.cpp's `bitnet` graph (SiLU gate) computed the reference.
    let (l, n_vocab) = logits(&out);
    check_golden(
        "1bitLLM layout -> bitnet TQ2_0",
        &l,
        &read_f32s(&ref_logits),
        n_vocab,
    );
}

#[test]
fn packed_llama_permutes_q_and_k_for_normal_rope() {
    let t0 = golden_tensors();
    let dir = tmp_dir("llama");
    let mut t = Tensors::new();
    let mut source_trits = std::collections::BTreeMap::new();
    for (name, v) in t0 {
        if name.contains("sub_norm") {
            continue; // Llama has no sub-norms
        }
        if is_proj(&name) {
            let (rows, cols) = (v.shape[0], v.shape[1]);
            let (trits, e) = absmean(&values(&v));
            t.insert(
                name.clone(),
                T {
                    dtype: Dtype::U8,
                    shape: vec![rows / 4, cols],
                    data: hf_pack(&trits, rows, cols),
                },
            );
            t.insert(
                name.replace(".weight", ".weight_scale"),
                T {
                    dtype: Dtype::F32,
                    shape: vec![],
                    data: (1.0 / e).to_le_bytes().to_vec(),
                },
            );
            source_trits.insert(name, (trits, rows, cols));
        } else {
            t.insert(name, v);
        }
    }
    write(&dir, &t);
    copy_side_files(&dir, |c| {
        c["architectures"] = serde_json::json!(["LlamaForCausalLM"]);
        c["model_type"] = "llama".into();
        c["hidden_act"] = "silu".into();
        c["quantization_config"] = serde_json::json!({"quant_method": "bitnet"});
    });
    let out = convert(&dir, &opts(TensorType::I2_S));
    let got = ternary_tensors(&out);
    let hd = 64;
    for (hf, gguf, heads) in [("q_proj", "attn_q", 4usize), ("k_proj", "attn_k", 2)] {
        let (src, rows, cols) = &source_trits[&format!("model.layers.0.self_attn.{hf}.weight")];
        assert_eq!(rows / hd, heads);
        let (dst, _) = &got[&format!("blk.0.{gguf}.weight")];
        for head in 0..heads {
            for j in 0..hd / 2 {
                for h in 0..2 {
                    let new = head * hd + 2 * j + h;
                    let old = head * hd + h * hd / 2 + j;
                    assert_eq!(
                        &dst[new * cols..(new + 1) * cols],
                        &src[old * cols..(old + 1) * cols]
                    );
                }
            }
        }
    }
    // v is not permuted.
    let (src, _, _) = &source_trits["model.layers.0.self_attn.v_proj.weight"];
    assert!(got["blk.0.attn_v.weight"].0 == *src);
    let (l, _) = logits(&out);
    assert!(l.iter().all(|x| x.is_finite()));
}
