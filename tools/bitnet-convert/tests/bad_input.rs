//! Bad input gives a clear error naming the file and tensor, never a panic, and never a
//! left-over output file. Each case starts from a small valid checkpoint built here
//! (1 layer, hidden 256, a 3-token byte-level BPE vocabulary) and breaks one thing.

mod common;

use std::path::{Path, PathBuf};

use bitnet_convert::{ConvertError, Options};
use common::*;
use safetensors::Dtype;
use serde_json::json;

fn f16_tensor(shape: &[usize], seed: u32) -> T {
    let n: usize = shape.iter().product();
    let mut s = seed;
    let data = (0..n)
        .flat_map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let v = ((s >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.2;
            bitnet_kernels::float::f32_to_f16(v).to_le_bytes()
        })
        .collect();
    T {
        dtype: Dtype::F16,
        shape: shape.to_vec(),
        data,
    }
}

fn mini_tensors() -> Tensors {
    let mut t = Tensors::new();
    let e = 256;
    t.insert("model.embed_tokens.weight".into(), f16_tensor(&[3, e], 1));
    t.insert("model.norm.weight".into(), f16_tensor(&[e], 2));
    let p = "model.layers.0.";
    for (i, (name, shape)) in [
        ("input_layernorm.weight", vec![e]),
        ("post_attention_layernorm.weight", vec![e]),
        ("self_attn.attn_sub_norm.weight", vec![e]),
        ("mlp.ffn_sub_norm.weight", vec![e]),
        ("self_attn.q_proj.weight", vec![e, e]),
        ("self_attn.k_proj.weight", vec![128, e]),
        ("self_attn.v_proj.weight", vec![128, e]),
        ("self_attn.o_proj.weight", vec![e, e]),
        ("mlp.gate_proj.weight", vec![e, e]),
        ("mlp.up_proj.weight", vec![e, e]),
        ("mlp.down_proj.weight", vec![e, e]),
    ]
    .into_iter()
    .enumerate()
    {
        t.insert(format!("{p}{name}"), f16_tensor(&shape, 10 + i as u32));
    }
    t
}

fn mini_config() -> serde_json::Value {
    json!({
        "architectures": ["BitNetForCausalLM"], "model_type": "bitnet", "hidden_act": "relu2",
        "hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 3,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": true
    })
}

/// Writes a checkpoint directory from parts.
fn checkpoint(tensors: &Tensors, config: &serde_json::Value) -> PathBuf {
    let dir = tmp_dir("mini");
    std::fs::write(dir.join("model.safetensors"), safetensors_bytes(tensors)).unwrap();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let tj = json!({
        "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}
    });
    std::fs::write(dir.join("tokenizer.json"), tj.to_string()).unwrap();
    dir
}

/// Converts into a fresh directory; returns the result and whether that directory is
/// still empty (no output, no temporary file).
fn try_convert(dir: &Path) -> (Result<u64, ConvertError>, bool) {
    let out_dir = tmp_dir("bad-out");
    let r = bitnet_convert::convert(
        dir,
        &out_dir.join("m.gguf"),
        &Options::default(),
        &mut |_| {},
    )
    .map(|(_, n)| n);
    let empty = std::fs::read_dir(&out_dir).unwrap().next().is_none();
    (r, empty)
}

fn expect_err(dir: &Path, must_contain: &[&str]) -> ConvertError {
    let (r, empty) = try_convert(dir);
    let e = r.expect_err("conversion should fail");
    let msg = e.to_string();
    for s in must_contain {
        assert!(msg.contains(s), "error {msg:?} does not mention {s:?}");
    }
    assert!(empty, "a failed conversion left files behind ({msg})");
    e
}

#[test]
fn the_mini_checkpoint_converts_and_runs() {
    let dir = checkpoint(&mini_tensors(), &mini_config());
    let out = tmp_dir("mini-ok").join("m.gguf");
    bitnet_convert::convert(&dir, &out, &Options::default(), &mut |_| {}).unwrap();
    use bitnet_core::engine::{EngineOptions, Session};
    use bitnet_core::model::{LoadOptions, Model};
    let opts = EngineOptions {
        threads: 1,
        pin: false,
        n_ctx: 8,
        ..EngineOptions::default()
    };
    let model = std::sync::Arc::new(Model::load(&out, &LoadOptions::default()).unwrap());
    let mut s = Session::new(model, &opts).unwrap();
    let l = s.eval(&[0, 2, 1], true).unwrap();
    assert_eq!(l.len(), 9);
    assert!(l.iter().all(|x| x.is_finite()));
}

#[test]
fn unknown_architecture() {
    let mut c = mini_config();
    c["architectures"] = json!(["GPT2LMHeadModel"]);
    let e = expect_err(
        &checkpoint(&mini_tensors(), &c),
        &["config.json", "GPT2LMHeadModel", "supported"],
    );
    assert!(matches!(e, ConvertError::UnknownArch { .. }));
    // A full-precision Llama is not silently ternarized.
    c["architectures"] = json!(["LlamaForCausalLM"]);
    let e = expect_err(&checkpoint(&mini_tensors(), &c), &["quant_method"]);
    assert!(matches!(e, ConvertError::UnknownArch { .. }));
}

#[test]
fn missing_tensor() {
    let mut t = mini_tensors();
    t.remove("model.layers.0.mlp.up_proj.weight");
    let e = expect_err(
        &checkpoint(&t, &mini_config()),
        &["model.layers.0.mlp.up_proj.weight", "blk.0.ffn_up.weight"],
    );
    assert!(matches!(e, ConvertError::MissingTensor { .. }));
}

#[test]
fn extra_tensor() {
    let mut t = mini_tensors();
    t.insert(
        "model.layers.0.mlp.extra_proj.weight".into(),
        f16_tensor(&[256], 99),
    );
    let e = expect_err(
        &checkpoint(&t, &mini_config()),
        &["model.safetensors", "model.layers.0.mlp.extra_proj.weight"],
    );
    assert!(matches!(e, ConvertError::ExtraTensor { .. }));
    // So is a second layer config.json does not have.
    let mut t = mini_tensors();
    t.insert(
        "model.layers.1.input_layernorm.weight".into(),
        f16_tensor(&[256], 98),
    );
    expect_err(
        &checkpoint(&t, &mini_config()),
        &["model.layers.1.input_layernorm.weight"],
    );
}

#[test]
fn shape_mismatch() {
    let mut t = mini_tensors();
    t.insert(
        "model.layers.0.self_attn.k_proj.weight".into(),
        f16_tensor(&[256, 256], 7),
    );
    let e = expect_err(
        &checkpoint(&t, &mini_config()),
        &[
            "model.safetensors",
            "self_attn.k_proj.weight",
            "[256, 256]",
            "[128, 256]",
        ],
    );
    assert!(matches!(e, ConvertError::ShapeMismatch { .. }));
    let mut c = mini_config();
    c["intermediate_size"] = 512.into();
    expect_err(&checkpoint(&mini_tensors(), &c), &["mlp.gate_proj.weight"]);
}

#[test]
fn packed_code_three_is_refused() {
    let mut t = mini_tensors();
    let name = "model.layers.0.mlp.down_proj.weight";
    let mut packed = vec![0b01_01_01_01u8; 64 * 256]; // all zeros (code 1)
    packed[5 * 256 + 17] = 0b11_01_01_01; // code 3 in bits 6..8: row 3 * 64 + 5
    t.insert(
        name.into(),
        T {
            dtype: Dtype::U8,
            shape: vec![64, 256],
            data: packed,
        },
    );
    t.insert(
        name.replace(".weight", ".weight_scale"),
        T {
            dtype: Dtype::F32,
            shape: vec![1],
            data: 2.0f32.to_le_bytes().to_vec(),
        },
    );
    let e = expect_err(
        &checkpoint(&t, &mini_config()),
        &["model.safetensors", name, "row 197", "column 17"],
    );
    assert!(matches!(
        e,
        ConvertError::BadTernaryCode {
            row: 197,
            col: 17,
            ..
        }
    ));
}

#[test]
fn packed_weight_needs_a_usable_scale() {
    let name = "model.layers.0.mlp.down_proj.weight";
    let mut t = mini_tensors();
    t.insert(
        name.into(),
        T {
            dtype: Dtype::U8,
            shape: vec![64, 256],
            data: vec![0x55; 64 * 256],
        },
    );
    expect_err(&checkpoint(&t, &mini_config()), &["weight_scale"]);
    t.insert(
        name.replace(".weight", ".weight_scale"),
        T {
            dtype: Dtype::F32,
            shape: vec![1],
            data: 0.0f32.to_le_bytes().to_vec(),
        },
    );
    expect_err(
        &checkpoint(&t, &mini_config()),
        &["weight_scale", "not positive"],
    );
}

#[test]
fn nan_and_inf_are_refused() {
    let mut t = mini_tensors();
    let emb = t.get_mut("model.embed_tokens.weight").unwrap();
    emb.data[2 * 300..2 * 300 + 2].copy_from_slice(&0x7e00u16.to_le_bytes()); // f16 NaN
    let e = expect_err(
        &checkpoint(&t, &mini_config()),
        &[
            "model.safetensors",
            "model.embed_tokens.weight",
            "element 300",
        ],
    );
    assert!(matches!(e, ConvertError::NonFinite { index: 300, .. }));
    let mut t = mini_tensors();
    let q = t.get_mut("model.layers.0.self_attn.q_proj.weight").unwrap();
    q.data[0..2].copy_from_slice(&0x7c00u16.to_le_bytes()); // f16 +Inf
    expect_err(
        &checkpoint(&t, &mini_config()),
        &["self_attn.q_proj.weight", "inf"],
    );
}

#[test]
fn truncated_safetensors_names_the_tensor() {
    let dir = checkpoint(&mini_tensors(), &mini_config());
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    // The last tensor in offset order is the one cut short.
    let last = mini_tensors().keys().last().unwrap().clone();
    std::fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
    let e = expect_err(&dir, &["model.safetensors", "truncated", &last]);
    assert!(matches!(e, ConvertError::Safetensors { .. }));
    // Cut inside the header.
    std::fs::write(&path, &bytes[..20]).unwrap();
    expect_err(&dir, &["model.safetensors", "header"]);
    std::fs::write(&path, b"").unwrap();
    expect_err(&dir, &["model.safetensors"]);
}

#[test]
fn header_lying_about_offsets_names_the_tensor() {
    let dir = checkpoint(&mini_tensors(), &mini_config());
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    // Move one tensor's range forward by 64 bytes: a gap, and the file no longer adds up.
    let name = "model.layers.0.mlp.gate_proj.weight";
    let off = header[name]["data_offsets"].as_array().unwrap().clone();
    let (s, e) = (off[0].as_u64().unwrap() + 64, off[1].as_u64().unwrap() + 64);
    header[name]["data_offsets"] = json!([s, e]);
    let mut h = serde_json::to_vec(&header).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(&bytes[8 + n..]);
    std::fs::write(&path, out).unwrap();
    let e = expect_err(&dir, &["model.safetensors", "offsets"]);
    assert!(matches!(e, ConvertError::Safetensors { .. }));
}

#[test]
fn sharded_index_must_match_the_shards() {
    let dir = checkpoint(&mini_tensors(), &mini_config());
    let idx = json!({"weight_map": {"model.norm.weight": "model-00002-of-00002.safetensors"}});
    std::fs::write(dir.join("model.safetensors.index.json"), idx.to_string()).unwrap();
    expect_err(&dir, &["model-00002-of-00002.safetensors"]);
    let idx = json!({"weight_map": {"model.norm.weight": "../elsewhere.safetensors"}});
    std::fs::write(dir.join("model.safetensors.index.json"), idx.to_string()).unwrap();
    expect_err(&dir, &["model.safetensors.index.json", "same directory"]);
}

#[test]
fn destination_is_checked_before_any_work() {
    let dir = checkpoint(&mini_tensors(), &mini_config());
    let out_dir = tmp_dir("dest");
    let opts = Options::default();
    for (target, what) in [
        (out_dir.clone(), "directory"),
        (out_dir.join("missing/m.gguf"), "does not exist"),
        (dir.join("model.safetensors"), "input"),
    ] {
        let e = bitnet_convert::convert(&dir, &target, &opts, &mut |_| {}).unwrap_err();
        assert!(matches!(e, ConvertError::Output { .. }), "{e}");
        assert!(e.to_string().contains(what), "{e}");
    }
    assert!(std::fs::read_dir(&out_dir).unwrap().next().is_none());
}

#[test]
fn cli_dry_run_and_errors() {
    let exe = env!("CARGO_BIN_EXE_bitnet-convert");
    let dir = checkpoint(&mini_tensors(), &mini_config());
    let out = std::process::Command::new(exe)
        .arg(&dir)
        .arg("--dry-run")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("model.layers.0.mlp.down_proj.weight")
            && text.contains("blk.0.ffn_down.weight")
    );
    assert!(
        text.contains("absmean ternarize") && text.contains("tokenizer.ggml.pre = \"gpt-2\""),
        "{text}"
    );

    let target = tmp_dir("cli").join("m.gguf");
    let out = std::process::Command::new(exe)
        .arg(&dir)
        .arg("-o")
        .arg(&target)
        .arg("--outtype")
        .arg("tq1_0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(target.is_file());

    let mut c = mini_config();
    c["architectures"] = json!(["MambaForCausalLM"]);
    let bad = checkpoint(&mini_tensors(), &c);
    let target = tmp_dir("cli-bad").join("m.gguf");
    let out = std::process::Command::new(exe)
        .arg(&bad)
        .arg("-o")
        .arg(&target)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("MambaForCausalLM") && err.contains("config.json"),
        "{err}"
    );
    assert!(!target.exists());
    let out = std::process::Command::new(exe)
        .arg(&dir)
        .arg("-o")
        .arg(&target)
        .arg("--outtype")
        .arg("q4_0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_file_or_a_folder_without_config_json_is_not_a_checkpoint() {
    let exe = env!("CARGO_BIN_EXE_bitnet-convert");
    let dir = tmp_dir("not-a-checkpoint");
    let file = dir.join("README.md");
    std::fs::write(&file, "# notes\n").unwrap();
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    for (input, reason) in [(&file, "not a directory"), (&empty, "no config.json in it")] {
        let out = std::process::Command::new(exe)
            .arg(input)
            .arg("-o")
            .arg(dir.join("x.gguf"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8(out.stderr).unwrap();
        // The same shape as `bitnet`'s errors, the path said once.
        assert!(err.starts_with("error: "), "{err}");
        assert_eq!(
            err.matches(&*input.display().to_string()).count(),
            1,
            "{err}"
        );
        assert!(err.contains(reason), "{err}");
        assert!(
            err.contains("a directory with config.json and *.safetensors"),
            "{err}"
        );
        assert!(!err.contains("Not a directory"), "{err}");
    }
}

/// Replaces the mini checkpoint's `tokenizer.json` with one built from parts.
fn write_tokenizer(dir: &Path, vocab: serde_json::Value, added: serde_json::Value) {
    let merges = if vocab.as_object().is_some_and(|v| v.is_empty()) {
        json!([])
    } else {
        json!(["a b"])
    };
    let tj = json!({
        "added_tokens": added, "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": merges}
    });
    std::fs::write(dir.join("tokenizer.json"), tj.to_string()).unwrap();
}

#[cfg(unix)]
fn mkfifo(path: &Path) {
    let st = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success(), "mkfifo {}", path.display());
}

/// Runs `f` on another thread and fails the test if it does not finish in time: the bugs
/// guarded against here are a read that never ends (FIFO, /dev/zero).
#[cfg(unix)]
fn within<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what}: still running after 20 s (unbounded read or hang)"))
}

#[test]
fn output_may_not_replace_any_input_file() {
    let dir = checkpoint(&mini_tensors(), &mini_config());
    // Side files a checkpoint ships; some are read, all belong to the checkpoint.
    std::fs::write(
        dir.join("tokenizer_config.json"),
        json!({"add_bos_token": false}).to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("generation_config.json"),
        json!({"bos_token_id": 0}).to_string(),
    )
    .unwrap();
    std::fs::write(dir.join("special_tokens_map.json"), "{}").unwrap();
    let names: Vec<&str> = vec![
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "special_tokens_map.json",
        "model.safetensors",
        "model.safetensors.index.json",
    ];
    let weight_map: serde_json::Map<String, serde_json::Value> = mini_tensors()
        .keys()
        .map(|k| (k.clone(), json!("model.safetensors")))
        .collect();
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        json!({ "weight_map": weight_map }).to_string(),
    )
    .unwrap();
    let before: Vec<Vec<u8>> = names
        .iter()
        .map(|n| std::fs::read(dir.join(n)).unwrap())
        .collect();
    let opts = Options::default();
    let refuse = |target: &Path| {
        let e = bitnet_convert::convert(&dir, target, &opts, &mut |_| {}).unwrap_err();
        assert!(matches!(e, ConvertError::Output { .. }), "{e}");
        assert!(e.to_string().contains("input"), "{e}");
    };
    for n in &names {
        refuse(&dir.join(n));
    }
    // Through a symlink, a hard link and a path with a symlinked directory in it.
    let out_dir = tmp_dir("dest-links");
    // Symlinks need a privilege (or developer mode) on Windows; hard links do not.
    #[cfg(unix)]
    {
        let link = out_dir.join("out.gguf");
        std::os::unix::fs::symlink(dir.join("tokenizer.json"), &link).unwrap();
        refuse(&link);
    }
    let hard = out_dir.join("hard.gguf");
    std::fs::hard_link(dir.join("config.json"), &hard).unwrap();
    refuse(&hard);
    #[cfg(unix)]
    {
        let via = out_dir.join("ck");
        std::os::unix::fs::symlink(&dir, &via).unwrap();
        refuse(&via.join("tokenizer_config.json"));
    }
    for (n, b) in names.iter().zip(&before) {
        assert_eq!(&std::fs::read(dir.join(n)).unwrap(), b, "{n} was modified");
    }
    // A new file beside the inputs is fine.
    bitnet_convert::convert(&dir, &dir.join("model.gguf"), &opts, &mut |_| {}).unwrap();
}

// /dev/zero and FIFOs: Unix only (Windows has neither among its files).
#[cfg(unix)]
#[test]
fn json_inputs_must_be_regular_files() {
    // config.json as /dev/zero (length 0, endless) and as a FIFO (open blocks).
    let dir = checkpoint(&mini_tensors(), &mini_config());
    std::fs::remove_file(dir.join("config.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join("config.json")).unwrap();
    let d = dir.clone();
    within("config.json -> /dev/zero", move || {
        expect_err(&d, &["config.json", "not a regular file"]);
    });
    std::fs::remove_file(dir.join("config.json")).unwrap();
    mkfifo(&dir.join("config.json"));
    let d = dir.clone();
    within("config.json FIFO", move || {
        expect_err(&d, &["config.json", "not a regular file"]);
    });
    std::fs::remove_file(dir.join("config.json")).unwrap();
    std::fs::create_dir(dir.join("config.json")).unwrap();
    expect_err(&dir, &["config.json", "is a directory"]);

    // An optional file too: a FIFO tokenizer_config.json is an error, not skipped or waited on.
    let dir = checkpoint(&mini_tensors(), &mini_config());
    mkfifo(&dir.join("tokenizer_config.json"));
    let d = dir.clone();
    within("tokenizer_config.json FIFO", move || {
        expect_err(&d, &["tokenizer_config.json", "not a regular file"]);
    });
}

#[cfg(unix)]
#[test]
fn shards_and_tokenizer_must_be_regular_files() {
    let dir = checkpoint(&mini_tensors(), &mini_config());
    let index = |file: &str| {
        let weight_map: serde_json::Map<String, serde_json::Value> = mini_tensors()
            .keys()
            .map(|k| (k.clone(), json!(file)))
            .collect();
        std::fs::write(
            dir.join("model.safetensors.index.json"),
            json!({ "weight_map": weight_map }).to_string(),
        )
        .unwrap();
    };
    mkfifo(&dir.join("fifo.safetensors"));
    index("fifo.safetensors");
    let d = dir.clone();
    within("shard FIFO", move || {
        expect_err(&d, &["fifo.safetensors", "not a regular file"]);
    });
    index(".");
    expect_err(&dir, &["model.safetensors.index.json", "\".\""]);
    std::fs::create_dir(dir.join("sub.safetensors")).unwrap();
    index("sub.safetensors");
    expect_err(&dir, &["sub.safetensors", "is a directory"]);

    // Without an index: model.safetensors or tokenizer.json that is not a file says so.
    let dir = checkpoint(&mini_tensors(), &mini_config());
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    std::fs::create_dir(dir.join("model.safetensors")).unwrap();
    expect_err(&dir, &["model.safetensors", "is a directory"]);
    let dir = checkpoint(&mini_tensors(), &mini_config());
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    std::fs::create_dir(dir.join("tokenizer.json")).unwrap();
    expect_err(&dir, &["tokenizer.json", "is a directory"]);
    std::fs::remove_dir(dir.join("tokenizer.json")).unwrap();
    mkfifo(&dir.join("tokenizer.json"));
    let d = dir.clone();
    within("tokenizer.json FIFO", move || {
        expect_err(&d, &["tokenizer.json", "not a regular file"]);
    });
}

#[test]
fn empty_vocabulary_is_refused() {
    let dir = checkpoint(&mini_tensors(), &mini_config());
    write_tokenizer(&dir, json!({}), json!([]));
    let e = expect_err(&dir, &["tokenizer.json", "empty"]);
    assert!(matches!(e, ConvertError::Tokenizer { .. }), "{e}");
    // Added tokens alone are no vocabulary: ordinary text would tokenize to nothing.
    write_tokenizer(
        &dir,
        json!({}),
        json!([{"id": 0, "content": "<s>", "special": true}]),
    );
    expect_err(&dir, &["tokenizer.json", "empty"]);
}

#[test]
fn duplicate_token_ids_are_refused_or_said() {
    let dir = checkpoint(&mini_tensors(), &mini_config());
    // Two vocabulary strings with one id: one of them would be lost.
    write_tokenizer(&dir, json!({"a": 0, "b": 1, "ab": 1}), json!([]));
    let e = expect_err(&dir, &["tokenizer.json", "\"b\"", "\"ab\"", "id 1"]);
    assert!(matches!(e, ConvertError::Tokenizer { .. }), "{e}");
    // An added token that takes an existing id with other text replaces it, as in Hugging
    // Face's tokenizers (fine-tunes repurpose reserved ids so), and the plan says so.
    let warned = |dir: &Path, words: &[&str]| {
        let plan = bitnet_convert::plan(dir, &Options::default()).unwrap();
        assert!(
            plan.vocab
                .warnings
                .iter()
                .any(|w| words.iter().all(|x| w.contains(x))),
            "{:?}",
            plan.vocab.warnings
        );
    };
    // (No merges here: the mini model has 3 tokens, and a merge must name tokens that stay.)
    let tokenizer = |added: serde_json::Value| {
        let tj = json!({
            "added_tokens": added, "normalizer": null,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
            "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2}, "merges": []}
        });
        std::fs::write(dir.join("tokenizer.json"), tj.to_string()).unwrap();
    };
    tokenizer(json!([{"id": 2, "content": "<other>", "special": true}]));
    warned(&dir, &["\"c\"", "\"<other>\"", "id 2", "replaces"]);
    // Two added tokens with one id: the last wins, said too.
    tokenizer(json!([{"id": 2, "content": "<x>", "special": true},
                     {"id": 2, "content": "<y>", "special": true}]));
    warned(&dir, &["\"<x>\"", "\"<y>\"", "id 2"]);
    // Restating a vocabulary entry as an added token is normal in Hugging Face files.
    write_tokenizer(
        &dir,
        json!({"a": 0, "b": 1, "ab": 2}),
        json!([{"id": 2, "content": "ab", "special": true},
               {"id": 2, "content": "ab", "special": true}]),
    );
    let (r, _) = try_convert(&dir);
    r.unwrap();
}
