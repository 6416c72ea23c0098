//! `bitnet serve --embeddings`: `/v1/embeddings` (OpenAI's shape, floats or base64),
//! `/embeddings` and `/embedding` (llama-server's), every shape of input llama-server takes,
//! the fields (`dimensions`, `embd_normalize`, `encoding_format`, `model`) and every refusal,
//! with vectors bit for bit those `bitnet_core::embed::embed_batch` gives for the same tokens
//! (what `bitnet embed` runs); requests sent at once all answered right; the 501s on either
//! side of the flag; an embedding model that refuses completions; `/metrics`; and the
//! official `openai` client (scripts/openai_client.py, under scripts/setup-openai.sh's
//! Python).

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use bitnet_core::embed::{Normalize, Pooling, embed_batch};
use bitnet_core::synth::{SynthSpec, write_model};
use bitnet_core::{Engine, EngineOptions, LoadOptions, Model};
use common::server::{Server, assert_openai_error};
use common::{shipped_model, tmp_dir};
use serde_json::{Value, json};

/// The server's context in these tests: inputs longer than this are refused.
const N_CTX: usize = 128;

fn load(path: &Path) -> Arc<Model> {
    Arc::new(Model::load(path, &LoadOptions::default()).expect("the model loads"))
}

fn shipped() -> &'static Arc<Model> {
    static MODEL: OnceLock<Arc<Model>> = OnceLock::new();
    MODEL.get_or_init(|| load(&shipped_model()))
}

/// A text's tokens as the server makes them (BOS and EOS as the file asks, specials not
/// parsed).
fn tokens(m: &Model, text: &str) -> Vec<u32> {
    m.tokenizer().unwrap().encode(text, true, false)
}

/// What `embed_batch` gives for `inputs` (on an engine as the server makes one: the kernels,
/// cache types and blocks of the defaults).
fn reference(
    m: &Arc<Model>,
    inputs: &[Vec<u32>],
    pooling: Pooling,
    normalize: Normalize,
) -> Vec<Vec<Vec<f32>>> {
    let opts = EngineOptions {
        threads: 1,
        pin: false,
        n_ctx: N_CTX,
        ..EngineOptions::default()
    };
    let mut engine = Engine::new(m.clone(), &opts).unwrap();
    let refs: Vec<&[u32]> = inputs.iter().map(Vec::as_slice).collect();
    embed_batch(&mut engine, &refs, pooling, normalize).unwrap()
}

/// The one pooled vector of each input.
fn pooled(sets: Vec<Vec<Vec<f32>>>) -> Vec<Vec<f32>> {
    sets.into_iter()
        .map(|mut s| {
            assert_eq!(s.len(), 1);
            s.remove(0)
        })
        .collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list of numbers: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// The vectors of OpenAI's answer, its items checked (object, index in order).
fn openai_vectors(body: &Value) -> Vec<Vec<f32>> {
    assert_eq!(body["object"], "list", "{body}");
    let data = body["data"].as_array().unwrap();
    data.iter()
        .enumerate()
        .map(|(i, d)| {
            assert_eq!(d["object"], "embedding");
            assert_eq!(d["index"], i);
            match &d["embedding"] {
                Value::String(b64) => base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap()
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                    .collect(),
                v => floats(v),
            }
        })
        .collect()
}

/// llama-server's answer: each input's rows.
fn llama_rows(body: &Value) -> Vec<Vec<Vec<f32>>> {
    let items = body
        .as_array()
        .unwrap_or_else(|| panic!("not llama-server's array: {body}"));
    items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            assert_eq!(it["index"], i);
            it["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(floats)
                .collect()
        })
        .collect()
}

fn post_ok(s: &Server, path: &str, body: &Value) -> Value {
    let (status, v) = s.post(path, body);
    assert_eq!(status, 200, "{path} {body}: {v}");
    v
}

fn embedding_server(extra: &[&str]) -> Server {
    let mut args = vec!["--embeddings", "-c", "128"];
    args.extend_from_slice(extra);
    Server::start_model(&shipped_model(), &args).0
}

#[test]
fn every_shape_of_input_gives_the_vectors_of_embed_batch() {
    let m = shipped();
    let s = embedding_server(&["--parallel", "2"]);
    let romeo = tokens(m, "ROMEO:");
    let soft = tokens(m, "But soft, what light through yonder window breaks?");
    let ids = vec![5u32, 60, 61, 62];
    let mixed = [romeo.clone(), vec![70, 71]].concat();
    let inputs = [
        romeo.clone(),
        soft.clone(),
        ids.clone(),
        vec![9],
        mixed.clone(),
    ];
    let want = pooled(reference(m, &inputs, Pooling::Last, Normalize(2)));
    let usage = |v: &Value, n: usize| {
        assert_eq!(v["usage"]["prompt_tokens"], n, "{v}");
        assert_eq!(v["usage"]["total_tokens"], n, "{v}");
    };

    // A string.
    let v = post_ok(
        &s,
        "/v1/embeddings",
        &json!({"input": "ROMEO:", "model": "mine"}),
    );
    assert_eq!(openai_vectors(&v), [want[0].clone()]);
    assert_eq!(v["model"], "mine", "the request's model is named");
    usage(&v, romeo.len());
    let n: f64 = want[0].iter().map(|&x| f64::from(x).powi(2)).sum();
    assert!((n - 1.0).abs() < 1e-5, "unit length by default: {n}");
    // Strings: one input each, in order; the server's model name without one.
    let v = post_ok(
        &s,
        "/v1/embeddings",
        &json!({"input": ["ROMEO:", "But soft, what light through yonder window breaks?"]}),
    );
    assert_eq!(openai_vectors(&v), want[..2]);
    assert_eq!(v["model"], "shakespeare");
    usage(&v, romeo.len() + soft.len());
    // Token ids: one input, used as they are (no BOS added).
    let v = post_ok(&s, "/v1/embeddings", &json!({"input": ids}));
    assert_eq!(openai_vectors(&v), [want[2].clone()]);
    usage(&v, ids.len());
    // Lists of token ids (and a text among them): one input each.
    let v = post_ok(
        &s,
        "/v1/embeddings",
        &json!({"input": [ids, [9], "ROMEO:"], "encoding_format": "float"}),
    );
    assert_eq!(
        openai_vectors(&v),
        [want[2].clone(), want[3].clone(), want[0].clone()]
    );
    usage(&v, ids.len() + 1 + romeo.len());
    // A list mixing a text and ids is one input: the text first, with its specials.
    let v = post_ok(&s, "/v1/embeddings", &json!({"input": ["ROMEO:", 70, 71]}));
    assert_eq!(openai_vectors(&v), [want[4].clone()]);
    usage(&v, mixed.len());
    // Base64: little-endian f32s, the same values bit for bit.
    let v = post_ok(
        &s,
        "/v1/embeddings",
        &json!({"input": ["ROMEO:", ids], "encoding_format": "base64"}),
    );
    assert!(v["data"][0]["embedding"].is_string(), "{v}");
    assert_eq!(openai_vectors(&v), [want[0].clone(), want[2].clone()]);

    // llama-server's shape: `content` on any route, or its own routes.
    for (path, field) in [
        ("/v1/embeddings", "content"),
        ("/embedding", "content"),
        ("/embeddings", "input"),
        ("/embedding", "input"),
    ] {
        let v = post_ok(&s, path, &json!({ field: ["ROMEO:", ids] }));
        assert_eq!(
            llama_rows(&v),
            [vec![want[0].clone()], vec![want[2].clone()]],
            "{path} {field}"
        );
    }

    // Another normalization, and a shortened vector: the first values, then normalized.
    let raw = pooled(reference(m, &inputs[..1], Pooling::Last, Normalize(-1)));
    let v = post_ok(
        &s,
        "/v1/embeddings",
        &json!({"input": "ROMEO:", "embd_normalize": -1}),
    );
    assert_eq!(openai_vectors(&v), raw);
    let mut short = raw[0][..16].to_vec();
    Normalize(2).apply(&mut short);
    let v = post_ok(
        &s,
        "/v1/embeddings",
        &json!({"input": "ROMEO:", "dimensions": 16}),
    );
    assert_eq!(openai_vectors(&v), [short]);
    let mut short1 = raw[0][..16].to_vec();
    Normalize(1).apply(&mut short1);
    let v = post_ok(
        &s,
        "/v1/embeddings",
        &json!({"input": "ROMEO:", "dimensions": 16, "embd_normalize": 1}),
    );
    assert_eq!(openai_vectors(&v), [short1]);

    // The figures: every input embedded is counted.
    let embedded = s.metric("bitnet_embeddings_total");
    assert!(embedded >= 16.0, "{embedded}");
    assert_eq!(s.metric("bitnet_kv_sequences"), 0.0, "every sequence freed");
}

#[test]
fn refusals_name_their_field() {
    let s = embedding_server(&[]);
    let bad = |body: Value, status: u16, param: Option<&str>| {
        let (st, v) = s.post("/v1/embeddings", &body);
        assert_openai_error(st, &v, status, param);
        v
    };
    bad(json!({"model": "m"}), 400, Some("input"));
    bad(json!({"input": null}), 400, Some("input"));
    bad(json!({"input": []}), 400, Some("input"));
    bad(json!({"content": []}), 400, Some("content"));
    // A prompt of no tokens (an empty list of ids).
    let v = bad(json!({"input": [[1, 2], []]}), 400, Some("input"));
    assert!(
        v["error"]["message"].as_str().unwrap().contains("empty"),
        "{v}"
    );
    bad(json!({"input": 5}), 400, Some("input"));
    bad(json!({"input": {"text": "x"}}), 400, Some("input"));
    bad(json!({"input": [["x", {}]]}), 400, Some("input"));
    bad(json!({"input": [1, -2]}), 400, Some("input"));
    bad(json!({"input": [1, 1.5]}), 400, Some("input"));
    let v = bad(json!({"input": [1, 100000]}), 400, Some("input"));
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("vocabulary"),
        "{v}"
    );
    bad(
        json!({"input": "x", "encoding_format": "int8"}),
        400,
        Some("encoding_format"),
    );
    bad(
        json!({"input": "x", "encoding_format": 1}),
        400,
        Some("encoding_format"),
    );
    bad(
        json!({"input": "x", "dimensions": 0}),
        400,
        Some("dimensions"),
    );
    bad(
        json!({"input": "x", "dimensions": 257}),
        400,
        Some("dimensions"),
    );
    bad(
        json!({"input": "x", "dimensions": "8"}),
        400,
        Some("dimensions"),
    );
    bad(
        json!({"input": "x", "embd_normalize": "2"}),
        400,
        Some("embd_normalize"),
    );
    bad(json!({"input": "x", "model": 3}), 400, Some("model"));
    let many: Vec<&str> = vec!["x"; 2049];
    bad(json!({ "input": many }), 400, Some("input"));

    // Past the context: llama-server's type and counts, nothing cut.
    let long: Vec<u32> = (0..N_CTX as u32 + 1).map(|i| 10 + i % 200).collect();
    let (st, v) = s.post("/v1/embeddings", &json!({"input": ["x", long]}));
    assert_openai_error(st, &v, 400, Some("input"));
    assert_eq!(v["error"]["type"], "exceed_context_size_error", "{v}");
    assert_eq!(v["error"]["n_prompt_tokens"], N_CTX + 1, "{v}");
    assert_eq!(v["error"]["n_ctx"], N_CTX, "{v}");
    // A whole context is fine.
    let whole: Vec<u32> = long[..N_CTX].to_vec();
    post_ok(&s, "/v1/embeddings", &json!({ "input": whole }));

    // Completions are refused on an embedding server, as llama-server does.
    for path in ["/v1/chat/completions", "/chat/completions"] {
        let (st, v) = s.post(
            path,
            &json!({"messages": [{"role": "user", "content": "hi"}]}),
        );
        assert_openai_error(st, &v, 501, None);
        assert_eq!(v["error"]["type"], "not_supported_error");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("--embeddings")
        );
    }
    for path in ["/v1/completions", "/completions"] {
        let (st, v) = s.post(path, &json!({"prompt": "hi"}));
        assert_openai_error(st, &v, 501, None);
    }
    assert_eq!(s.metric("bitnet_embeddings_total"), 1.0);
}

#[test]
fn without_pooling_the_openai_route_refuses_and_llamas_gives_every_tokens_row() {
    let m = shipped();
    let s = embedding_server(&["--pooling", "none"]);
    let (st, v) = s.post("/v1/embeddings", &json!({"input": "ROMEO:"}));
    assert_openai_error(st, &v, 400, None);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("none"),
        "{v}"
    );
    let (st, v) = s.post("/v1/embeddings", &json!({"input": "x", "dimensions": 8}));
    assert_openai_error(st, &v, 400, None);
    let (st, v) = s.post("/embedding", &json!({"content": "x", "dimensions": 8}));
    assert_openai_error(st, &v, 400, Some("dimensions"));

    let inputs = [tokens(m, "ROMEO:"), vec![3, 4, 5, 6, 7]];
    // Rows as the model gives them: llama-server normalizes nothing without pooling.
    let want = reference(m, &inputs, Pooling::None, Normalize(-1));
    let v = post_ok(
        &s,
        "/embedding",
        &json!({"content": ["ROMEO:", [3, 4, 5, 6, 7]]}),
    );
    let rows = llama_rows(&v);
    assert_eq!(rows[0].len(), inputs[0].len(), "one row a token");
    assert_eq!(rows, want);
}

#[test]
fn without_the_flag_embeddings_are_501_and_an_embedding_model_refuses_completions() {
    let s = Server::start(&[]);
    for path in ["/v1/embeddings", "/embeddings", "/embedding"] {
        let (st, v) = s.post(path, &json!({"input": "x"}));
        assert_openai_error(st, &v, 501, None);
        assert_eq!(v["error"]["type"], "not_supported_error");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("Start it with `--embeddings`"),
            "{v}"
        );
    }
    drop(s);

    // A file that names a pooling type (mean) is an embedding model.
    let path = mean_pooled_model();
    let (s, log) = Server::start_model(&path, &[]);
    log.wait_for(10, "is an embedding model");
    let (st, v) = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_openai_error(st, &v, 501, None);
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("embedding model") && msg.contains("pooling_type 1, mean"),
        "{v}"
    );
    assert!(msg.contains("--embeddings"), "{v}");
    let (st, v) = s.post("/v1/completions", &json!({"prompt": "hi"}));
    assert_openai_error(st, &v, 501, None);
    drop(s);

    // With the flag it embeds, pooled as the file says.
    let (s, _) = Server::start_model(&path, &["--embeddings"]);
    let m = load(&path);
    let inputs = [tokens(&m, "hello there"), vec![1, 2, 3]];
    let want = pooled(reference(&m, &inputs, Pooling::Mean, Normalize(2)));
    let v = post_ok(
        &s,
        "/v1/embeddings",
        &json!({"input": ["hello there", [1, 2, 3]]}),
    );
    assert_eq!(openai_vectors(&v), want);
}

/// A tiny model whose file names mean pooling.
fn mean_pooled_model() -> PathBuf {
    static MODEL: OnceLock<PathBuf> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = tmp_dir().join("tiny-mean-pooled.gguf");
            let mut spec = SynthSpec::preset("tiny").unwrap();
            spec.seed = 5;
            spec.pooling_type = Some(1);
            write_model(&spec, &path, |_, _| {}).unwrap();
            path
        })
        .clone()
}

#[test]
fn requests_sent_at_once_are_all_answered_right() {
    let m = shipped();
    // Two sequences at a time, steps slowed: the requests queue, and their inputs share
    // passes with one another.
    let s = Arc::new(embedding_server(&[
        "--parallel",
        "2",
        "--step-delay-ms",
        "5",
    ]));
    let texts: Vec<String> = (0..6)
        .map(|i| format!("Request {i}: now is the winter of our discontent"))
        .collect();
    let inputs: Vec<Vec<u32>> = texts.iter().map(|t| tokens(m, t)).collect();
    let want = pooled(reference(m, &inputs, Pooling::Last, Normalize(2)));
    let clients: Vec<_> = (0..texts.len())
        .map(|i| {
            let s = s.clone();
            // Each request carries its own text and one shared by all.
            let body = json!({"input": [texts[i], texts[0]]});
            std::thread::spawn(move || post_ok(&s, "/v1/embeddings", &body))
        })
        .collect();
    // A completion meanwhile is refused at once, and disturbs nothing.
    let (st, _) = s.post("/v1/completions", &json!({"prompt": "hi"}));
    assert_eq!(st, 501);
    for (i, c) in clients.into_iter().enumerate() {
        let v = c.join().unwrap();
        assert_eq!(
            openai_vectors(&v),
            [want[i].clone(), want[0].clone()],
            "request {i}"
        );
    }
    assert_eq!(s.metric("bitnet_embeddings_total"), 12.0);
    s.wait_for(10, "every sequence freed", |s| {
        s.metric("bitnet_kv_sequences") == 0.0
    });
}

/// The official `openai` client (installed by scripts/setup-openai.sh into the target
/// folder on first use, from PyPI): `client.embeddings.create` with its default encoding
/// (base64) and with floats, against vectors computed here.
#[test]
fn the_openai_client_gets_the_same_vectors_as_floats_and_base64() {
    let m = shipped();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // target/debug/bitnet -> target/openai-venv.
    let target = Path::new(env!("CARGO_BIN_EXE_bitnet"))
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .to_path_buf();
    let setup = std::process::Command::new("bash")
        .arg(root.join("scripts/setup-openai.sh"))
        .arg(target.join("openai-venv"))
        .output()
        .expect("running scripts/setup-openai.sh");
    assert!(
        setup.status.success(),
        "scripts/setup-openai.sh could not make a Python with the openai package (it needs \
         python3 with venv and pip, and PyPI the first time): {}",
        String::from_utf8_lossy(&setup.stderr)
    );
    let python = String::from_utf8(setup.stdout).unwrap().trim().to_owned();

    let texts = ["ROMEO:", "JULIET: O Romeo, Romeo!", "x"];
    let inputs: Vec<Vec<u32>> = texts.iter().map(|t| tokens(m, t)).collect();
    let want = pooled(reference(m, &inputs, Pooling::Last, Normalize(2)));
    let expected = tmp_dir().join("openai-expected.json");
    let n_tokens: usize = inputs.iter().map(Vec::len).sum();
    std::fs::write(
        &expected,
        json!({"inputs": texts, "vectors": want, "prompt_tokens": n_tokens}).to_string(),
    )
    .unwrap();

    let s = embedding_server(&[]);
    let out = std::process::Command::new(&python)
        .arg(root.join("scripts/openai_client.py"))
        .arg("--base-url")
        .arg(s.url("/v1"))
        .arg("--embeddings")
        .arg(&expected)
        .output()
        .expect("running scripts/openai_client.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "the openai client's checks failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("ok: embeddings (base64): vector 2"),
        "{stdout}"
    );
}

/// The BitNet embedding architectures (both tiny shapes, bitnet.cpp's layout) through
/// `/v1/embeddings` on every kernel set, with text and with token ids: the vectors of
/// `embed_batch` on a model loaded for the same kernel set (which bitnet-core's
/// `tests/embedding_models.rs` checks against the f32 reference), bit for bit.
#[test]
fn both_embedding_shapes_serve_on_every_kernel_set() {
    for preset in ["tiny-qwen3-embed", "tiny-gemma3-embed"] {
        let path = tmp_dir().join(format!("{preset}-serve.gguf"));
        let mut spec = SynthSpec::preset(preset).unwrap();
        spec.seed = 9;
        write_model(&spec, &path, |_, _| {}).unwrap();
        for isa in bitnet_kernels::Isa::available() {
            let m = Arc::new(
                Model::load(
                    &path,
                    &LoadOptions {
                        isa: Some(isa),
                        ..LoadOptions::default()
                    },
                )
                .unwrap(),
            );
            let kernel = isa.to_string();
            let (s, _log) = Server::start_model(
                &path,
                &["--embeddings", "-c", "128", "--kernel", kernel.as_str()],
            );
            let text = "query: how many values can a ternary weight take?";
            let ids: Vec<u32> = (0..12).map(|i| (i * 37 + 5) % 512).collect();
            let want = pooled(reference(
                &m,
                &[tokens(&m, text), ids.clone()],
                Pooling::Last,
                Normalize(2),
            ));
            let body = post_ok(
                &s,
                "/v1/embeddings",
                &json!({"model": preset, "input": text}),
            );
            assert_eq!(openai_vectors(&body), want[..1], "{preset} {isa}: text");
            let body = post_ok(
                &s,
                "/v1/embeddings",
                &json!({"model": preset, "input": [ids], "encoding_format": "base64"}),
            );
            assert_eq!(
                openai_vectors(&body),
                want[1..],
                "{preset} {isa}: token ids"
            );
            assert_eq!(body["usage"]["prompt_tokens"], 12);
        }
        std::fs::remove_file(&path).ok();
    }
}
