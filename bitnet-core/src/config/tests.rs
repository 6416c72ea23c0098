//! Unit tests of the config rules: a valid hand-built model, then one broken thing at a time,
//! each expected to fail with the error that names the key or tensor.

use bitnet_gguf::{Metadata, TensorInfo, TensorType, Value};

use super::tensors::is_proj_scale;
use super::*;

fn meta(arch: &str) -> Metadata {
    let mut m = Metadata::new();
    m.insert("general.architecture", arch);
    let k = |s: &str| format!("{arch}.{s}");
    m.insert(k("context_length"), 512u32);
    m.insert(k("embedding_length"), 256u32);
    m.insert(k("block_count"), 2u32);
    m.insert(k("feed_forward_length"), 768u32);
    m.insert(k("attention.head_count"), 4u32);
    m.insert(k("attention.head_count_kv"), 2u32);
    m.insert(k("attention.layer_norm_rms_epsilon"), 1e-5f32);
    m.insert(k("rope.freq_base"), 500000f32);
    m.insert(k("vocab_size"), 300u32);
    m
}

fn tensors_for(cfg_arch: Arch, tied: bool) -> Vec<TensorInfo> {
    let mut out = Vec::new();
    let mut push = |name: String, dims: Vec<u64>, ty| {
        out.push(TensorInfo::new(name, dims, ty).unwrap());
    };
    push(TOKEN_EMBD.into(), vec![256, 300], TensorType::F16);
    for l in 0..2 {
        push(norm_name(l, "attn_norm"), vec![256], TensorType::F32);
        push(norm_name(l, "ffn_norm"), vec![256], TensorType::F32);
        if cfg_arch.has_sub_norms() {
            push(norm_name(l, "attn_sub_norm"), vec![256], TensorType::F32);
            push(norm_name(l, "ffn_sub_norm"), vec![768], TensorType::F32);
        }
        push(proj_name(l, Proj::AttnQ), vec![256, 256], TensorType::TQ2_0);
        push(proj_name(l, Proj::AttnK), vec![256, 128], TensorType::TQ2_0);
        push(proj_name(l, Proj::AttnV), vec![256, 128], TensorType::TQ2_0);
        push(
            proj_name(l, Proj::AttnOut),
            vec![256, 256],
            TensorType::TQ2_0,
        );
        push(
            proj_name(l, Proj::FfnGate),
            vec![256, 768],
            TensorType::TQ2_0,
        );
        push(proj_name(l, Proj::FfnUp), vec![256, 768], TensorType::TQ2_0);
        push(
            proj_name(l, Proj::FfnDown),
            vec![768, 256],
            TensorType::TQ2_0,
        );
    }
    push(OUTPUT_NORM.into(), vec![256], TensorType::F32);
    if !tied {
        push(OUTPUT.into(), vec![256, 300], TensorType::Q8_0);
    }
    out
}

fn parse(m: &Metadata, t: &[TensorInfo]) -> Result<ModelConfig, ConfigError> {
    ModelConfig::from_parts(m, t)
}

#[test]
fn valid_bitnet_25_config() {
    let cfg = parse(&meta("bitnet-25"), &tensors_for(Arch::BitnetB158, true)).unwrap();
    assert_eq!(cfg.arch, Arch::BitnetB158);
    assert_eq!(cfg.arch_name, "bitnet-25");
    assert_eq!(
        (
            cfg.n_embd,
            cfg.n_layer,
            cfg.n_head,
            cfg.n_head_kv,
            cfg.head_dim,
            cfg.n_ff
        ),
        (256, 2, 4, 2, 64, 768)
    );
    assert_eq!((cfg.n_vocab, cfg.n_ctx_train, cfg.rope_dim), (300, 512, 64));
    assert_eq!(cfg.ffn_act, FfnAct::Relu2);
    assert_eq!(cfg.rope, RopeStyle::Neox);
    assert!(cfg.sub_norms && cfg.tied_head && !cfg.has_proj_scales);
    assert_eq!(cfg.rope_theta, 500000.0);
    assert_eq!(cfg.rope_freq_scale, 1.0);
    assert_eq!(cfg.weight_type, TensorType::TQ2_0);
    assert_eq!(cfg.embd_type, TensorType::F16);
    assert_eq!(cfg.head_type, None);
    assert_eq!(cfg.act_bits, ActBits::Int8);
    assert_eq!(cfg.gqa_group(), 2);
    // 300*256 embd + 2 layers * (2*256 + 256 + 768 norms + 256*(256+128+128+256) + 3*256*768)
    // + 256 output norm
    let per_layer = 2 * 256 + 256 + 768 + 256 * (256 + 128 + 128 + 256) + 3 * 256 * 768;
    assert_eq!(cfg.n_params(), 300 * 256 + 2 * per_layer + 256);
    // K and V, 2 layers, 128 floats per position, f16
    assert_eq!(cfg.kv_bytes(10, TensorType::F16), 2 * 2 * 10 * 128 * 2);
    assert_eq!(cfg.kv_bytes(10, TensorType::Q8_0), 2 * 2 * 10 * 4 * 34);
}

#[test]
fn arch_rules() {
    let cfg = parse(&meta("bitnet"), &tensors_for(Arch::Bitnet, false)).unwrap();
    assert_eq!(
        (cfg.arch, cfg.ffn_act, cfg.rope),
        (Arch::Bitnet, FfnAct::Silu, RopeStyle::Neox)
    );
    assert!(cfg.sub_norms && !cfg.tied_head);
    assert_eq!(cfg.head_type, Some(TensorType::Q8_0));

    let cfg = parse(&meta("llama"), &tensors_for(Arch::Llama, true)).unwrap();
    assert_eq!(
        (cfg.arch, cfg.ffn_act, cfg.rope),
        (Arch::Llama, FfnAct::Silu, RopeStyle::Normal)
    );
    assert!(!cfg.sub_norms);

    let cfg = parse(&meta("bitnet-b1.58"), &tensors_for(Arch::BitnetB158, true)).unwrap();
    assert_eq!(cfg.ffn_act, FfnAct::Relu2);
}

#[test]
fn overrides_and_optional_keys() {
    let mut m = meta("bitnet");
    m.insert("bitnet.feed_forward_activation", "relu2");
    m.insert("bitnet.activation_bits", 1u32);
    m.insert("bitnet.rope.scaling.type", "linear");
    m.insert("bitnet.rope.scaling.factor", 4.0f32);
    m.insert("bitnet.rope.dimension_count", 32u32);
    m.remove("bitnet.attention.head_count_kv");
    m.remove("bitnet.rope.freq_base");
    let mut t = tensors_for(Arch::Bitnet, true);
    // no GQA now: k and v are full width
    for x in t.iter_mut() {
        if x.name.contains("attn_k.") || x.name.contains("attn_v.") {
            *x = TensorInfo::new(x.name.clone(), vec![256, 256], x.ty).unwrap();
        }
    }
    t.push(TensorInfo::new(proj_scale_name(1, Proj::FfnDown), vec![1], TensorType::F32).unwrap());
    let cfg = parse(&m, &t).unwrap();
    assert_eq!(cfg.ffn_act, FfnAct::Relu2);
    assert_eq!(cfg.act_bits, ActBits::Binary);
    assert_eq!(cfg.rope_freq_scale, 0.25);
    assert_eq!(cfg.rope_dim, 32);
    assert_eq!(cfg.n_head_kv, 4);
    assert_eq!(cfg.rope_theta, 10000.0);
    assert!(cfg.has_proj_scales);
}

#[test]
fn vocab_falls_back_to_tokenizer_then_embedding() {
    let mut m = meta("bitnet");
    m.remove("bitnet.vocab_size");
    let t = tensors_for(Arch::Bitnet, true);
    assert_eq!(parse(&m, &t).unwrap().n_vocab, 300);
    let toks: Vec<String> = (0..300).map(|i| format!("t{i}")).collect();
    m.insert("tokenizer.ggml.tokens", toks);
    assert_eq!(parse(&m, &t).unwrap().n_vocab, 300);
    m.insert("tokenizer.ggml.tokens", vec!["a".to_string(); 299]);
    match parse(&m, &t) {
        Err(ConfigError::TensorShape {
            name,
            expected,
            found,
        }) => {
            assert_eq!(name, TOKEN_EMBD);
            assert_eq!((expected, found), (vec![256, 299], vec![256, 300]));
        }
        other => panic!("{other:?}"),
    }
}

fn expect_key_err(m: &Metadata, key: &str) {
    let t = tensors_for(Arch::Bitnet, true);
    let e = parse(m, &t).unwrap_err();
    let named = match &e {
        ConfigError::MissingKey { key: k }
        | ConfigError::WrongType { key: k, .. }
        | ConfigError::BadValue { key: k, .. } => k.as_str(),
        _ => "",
    };
    assert_eq!(named, key, "{e}");
    assert!(e.to_string().contains(key), "{e}");
}

#[test]
fn missing_and_bad_keys_are_named() {
    for suffix in [
        "embedding_length",
        "block_count",
        "feed_forward_length",
        "attention.head_count",
        "context_length",
        "attention.layer_norm_rms_epsilon",
    ] {
        let mut m = meta("bitnet");
        m.remove(&format!("bitnet.{suffix}"));
        expect_key_err(&m, &format!("bitnet.{suffix}"));
    }
    let cases: Vec<(&str, Value)> = vec![
        ("bitnet.embedding_length", Value::U32(0)),
        ("bitnet.embedding_length", Value::U64(1 << 40)),
        ("bitnet.block_count", Value::I32(-1)),
        ("bitnet.block_count", Value::String("2".into())),
        ("bitnet.attention.layer_norm_rms_epsilon", Value::F32(-1.0)),
        (
            "bitnet.attention.layer_norm_rms_epsilon",
            Value::F32(f32::NAN),
        ),
        ("bitnet.attention.layer_norm_rms_epsilon", Value::U32(1)),
        ("bitnet.rope.freq_base", Value::F32(0.0)),
        ("bitnet.rope.dimension_count", Value::U32(63)),
        ("bitnet.rope.dimension_count", Value::U32(128)),
        ("bitnet.rope.scaling.type", Value::String("yarn".into())),
        (
            "bitnet.feed_forward_activation",
            Value::String("gelu_erf".into()),
        ),
        ("bitnet.activation_bits", Value::U32(4)),
        ("bitnet.vocab_size", Value::U32(0)),
    ];
    for (key, v) in cases {
        let mut m = meta("bitnet");
        m.insert(key, v);
        expect_key_err(&m, key);
    }
    let mut m = meta("bitnet");
    m.remove("general.architecture");
    expect_key_err(&m, "general.architecture");
    m.insert("general.architecture", 3u32);
    expect_key_err(&m, "general.architecture");
}

#[test]
fn unknown_arch_and_inconsistent_heads() {
    let m = meta("gpt2");
    assert!(matches!(
        parse(&m, &[]),
        Err(ConfigError::UnknownArch { name }) if name == "gpt2"
    ));
    let t = tensors_for(Arch::Bitnet, true);
    let mut m = meta("bitnet");
    m.insert("bitnet.attention.head_count_kv", 3u32);
    let e = parse(&m, &t).unwrap_err();
    assert!(matches!(e, ConfigError::Inconsistent(_)), "{e}");
    assert!(e.to_string().contains("head_count_kv"));
    let mut m = meta("bitnet");
    m.insert("bitnet.attention.head_count", 6u32);
    m.insert("bitnet.attention.head_count_kv", 6u32);
    let e = parse(&m, &t).unwrap_err();
    assert!(
        e.to_string()
            .contains("embedding_length = 256 is not a multiple"),
        "{e}"
    );
    let mut m = meta("bitnet");
    m.insert("bitnet.attention.key_length", 64u32);
    m.insert("bitnet.attention.value_length", 32u32);
    assert!(matches!(parse(&m, &t), Err(ConfigError::Inconsistent(_))));
}

#[test]
fn tensor_errors_name_the_tensor() {
    let m = meta("bitnet");
    let base = tensors_for(Arch::Bitnet, true);

    let t: Vec<_> = base
        .iter()
        .filter(|t| t.name != "blk.1.ffn_sub_norm.weight")
        .cloned()
        .collect();
    assert!(matches!(
        parse(&m, &t),
        Err(ConfigError::MissingTensor { name }) if name == "blk.1.ffn_sub_norm.weight"
    ));

    let mut t = base.clone();
    t.push(TensorInfo::new("rope_freqs.weight", vec![32], TensorType::F32).unwrap());
    assert!(matches!(
        parse(&m, &t),
        Err(ConfigError::UnexpectedTensor { name, .. }) if name == "rope_freqs.weight"
    ));
    // a scale for a layer that does not exist is unexpected too
    let mut t = base.clone();
    t.push(TensorInfo::new("blk.2.attn_q.scale", vec![1], TensorType::F32).unwrap());
    assert!(matches!(
        parse(&m, &t),
        Err(ConfigError::UnexpectedTensor { .. })
    ));
    let mut t = base.clone();
    t.push(TensorInfo::new("blk.0.attn_q.scale", vec![2], TensorType::F32).unwrap());
    assert!(matches!(
        parse(&m, &t),
        Err(ConfigError::TensorShape { .. })
    ));

    let mut t = base.clone();
    let i = t
        .iter()
        .position(|x| x.name == "blk.0.attn_k.weight")
        .unwrap();
    t[i] = TensorInfo::new("blk.0.attn_k.weight", vec![256, 256], TensorType::TQ2_0).unwrap();
    match parse(&m, &t) {
        Err(ConfigError::TensorShape {
            name,
            expected,
            found,
        }) => {
            assert_eq!(name, "blk.0.attn_k.weight");
            assert_eq!((expected, found), (vec![256, 128], vec![256, 256]));
        }
        other => panic!("{other:?}"),
    }

    let mut t = base.clone();
    let i = t
        .iter()
        .position(|x| x.name == "blk.1.ffn_up.weight")
        .unwrap();
    t[i] = TensorInfo::new("blk.1.ffn_up.weight", vec![256, 768], TensorType::Q4_1).unwrap();
    let e = parse(&m, &t).unwrap_err();
    assert!(
        matches!(&e, ConfigError::UnsupportedType { name, ty: "Q4_1", .. } if name == "blk.1.ffn_up.weight"),
        "{e}"
    );
    let mut t = base.clone();
    let i = t.iter().position(|x| x.name == TOKEN_EMBD).unwrap();
    t[i] = TensorInfo::new(TOKEN_EMBD, vec![256, 300], TensorType::TQ2_0).unwrap();
    assert!(matches!(
        parse(&m, &t),
        Err(ConfigError::UnsupportedType { .. })
    ));
    let mut t = base.clone();
    let i = t.iter().position(|x| x.name == OUTPUT_NORM).unwrap();
    t[i] = TensorInfo::new(OUTPUT_NORM, vec![256], TensorType::Q8_0).unwrap();
    assert!(matches!(
        parse(&m, &t),
        Err(ConfigError::UnsupportedType { .. })
    ));
    // F16 and BF16 norms are read (bitnet.cpp's embedding converter writes F16).
    for ty in [TensorType::F16, TensorType::BF16] {
        t[i] = TensorInfo::new(OUTPUT_NORM, vec![256], ty).unwrap();
        parse(&m, &t).unwrap();
    }

    // llama has no sub-norms: a file that carries them is refused
    let m = meta("llama");
    assert!(matches!(
        parse(&m, &base),
        Err(ConfigError::UnexpectedTensor { name, .. }) if name.contains("sub_norm")
    ));
}

#[test]
fn expected_tensor_list_matches_llama_cpp_names() {
    let cfg = parse(&meta("bitnet-25"), &tensors_for(Arch::BitnetB158, true)).unwrap();
    let names: Vec<_> = cfg.expected_tensors().into_iter().map(|t| t.name).collect();
    assert_eq!(names.len(), 1 + 2 * 11 + 1);
    assert_eq!(names[0], "token_embd.weight");
    assert!(names.contains(&"blk.1.attn_output.weight".to_string()));
    assert!(names.contains(&"blk.0.attn_sub_norm.weight".to_string()));
    assert_eq!(names.last().unwrap(), "output_norm.weight");
    assert!(is_proj_scale("blk.1.ffn_gate.scale", 2));
    assert!(!is_proj_scale("blk.1.ffn_gate.weight", 2));
    assert!(!is_proj_scale("blk.x.ffn_gate.scale", 2));
}

/// The BitNet embedding architectures: their parts follow from the arch and the tensors
/// (input norms only where the file has them), the head dimension from `key_length`, and
/// what the engine cannot run is refused by name.
#[test]
fn embedding_architectures() {
    let spec = |arch: Arch, hd: u64| {
        let name = arch.canonical_name();
        let mut m = meta(name);
        m.insert(format!("{name}.attention.key_length"), hd as u32);
        m.insert(format!("{name}.attention.value_length"), hd as u32);
        m.insert(format!("{name}.pooling_type"), 3u32);
        let mut cfg = parse(&meta("llama"), &tensors_for(Arch::Llama, true)).unwrap();
        (cfg.arch, cfg.arch_name) = (arch, name.into());
        (cfg.head_dim, cfg.rope_dim) = (hd as usize, hd as usize);
        (cfg.qk_norms, cfg.proj_norms, cfg.post_norms) = (true, true, arch == Arch::Gemma3);
        let t: Vec<TensorInfo> = cfg
            .expected_tensors()
            .into_iter()
            .map(|e| {
                TensorInfo::new(
                    e.name,
                    e.dims,
                    match e.role {
                        TensorRole::Matrix => TensorType::I2_S,
                        _ => TensorType::F16,
                    },
                )
                .unwrap()
            })
            .collect();
        (m, t)
    };
    let (m, t) = spec(Arch::Qwen3, 128);
    let cfg = parse(&m, &t).unwrap();
    assert_eq!(
        (cfg.arch, cfg.ffn_act, cfg.rope),
        (Arch::Qwen3, FfnAct::Silu, RopeStyle::Neox)
    );
    assert!(cfg.proj_norms && cfg.qk_norms && !cfg.post_norms && !cfg.sub_norms);
    assert_eq!(
        (cfg.head_dim, cfg.q_dim(), cfg.embd_scale),
        (128, 512, None)
    );
    assert!(cfg.is_embedding_model());
    assert!(
        t.iter()
            .any(|x| x.name == "blk.1.ffn_down_norm_in.weight" && x.dims == [768])
    );
    assert!(
        t.iter()
            .any(|x| x.name == "blk.0.attn_output_norm_in.weight" && x.dims == [512])
    );

    let (m, t) = spec(Arch::Gemma3, 64);
    let cfg = parse(&m, &t).unwrap();
    assert_eq!(cfg.ffn_act, FfnAct::GeluTanh);
    assert!(cfg.post_norms && cfg.qk_norms);
    assert_eq!(cfg.embd_scale, Some(16.0));

    // Without the input norms: a plain (float-weight teacher) Gemma3, still the same arch.
    let plain: Vec<TensorInfo> = t
        .iter()
        .filter(|x| !x.name.contains("_norm_in"))
        .cloned()
        .collect();
    let cfg = parse(&m, &plain).unwrap();
    assert!(!cfg.proj_norms && cfg.post_norms);
    // A missing q/k norm is named.
    let no_qn: Vec<TensorInfo> = t
        .iter()
        .filter(|x| x.name != "blk.1.attn_q_norm.weight")
        .cloned()
        .collect();
    assert!(
        matches!(parse(&m, &no_qn), Err(ConfigError::MissingTensor { name }) if name == "blk.1.attn_q_norm.weight")
    );
    // Sliding-window layers are refused, not run as global ones.
    let mut swa = m.clone();
    swa.insert("gemma3.attention.sliding_window", 512u32);
    let e = parse(&swa, &t).unwrap_err();
    assert!(e.to_string().contains("sliding_window"), "{e}");
    swa.insert("gemma3.attention.sliding_window", 0u32);
    parse(&swa, &t).unwrap();
    // Input norms on an architecture with sub-norms.
    let mut bitnet = tensors_for(Arch::Bitnet, true);
    bitnet
        .push(TensorInfo::new("blk.0.attn_q_norm_in.weight", vec![256], TensorType::F32).unwrap());
    assert!(matches!(
        parse(&meta("bitnet"), &bitnet),
        Err(ConfigError::Inconsistent(_))
    ));
}
