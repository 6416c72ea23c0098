//! `bitnet serve` over several models (llama-server's router mode): requests routed by
//! their `model` (names and aliases) to the right model, checked against single-model
//! servers' greedy answers; `--models-max 1` unloading the idle model for the other and
//! loading it back on demand, seen in `/v1/models` and `/metrics`; a request for a model
//! still loading waiting for it; `--models-memory-max`; an embedding model embedding
//! without `--embeddings`; a model that fails to load answering 500 while the others
//! serve; the 404 of an unknown model; and the names refused at start.

mod common;

use std::path::{Path, PathBuf};

use bitnet_core::synth::{SynthSpec, write_model};
use common::server::{Server, assert_openai_error, next_event, open_stream, read_events};
use common::{bitnet, run_err, scratch, shipped_model, tiny_model, tmp_dir};
use serde_json::{Value, json};

/// The tiny generated model's name: its file stem.
const TINY: &str = "tiny-i2_s";

/// A greedy completion's request, for `model` when given.
fn greedy(model: Option<&str>) -> Value {
    let mut body = json!({"prompt": "ROMEO:", "max_tokens": 6, "temperature": 0,
                          "ignore_eos": true});
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    body
}

/// The text and the answering model's name of a greedy completion.
fn complete(s: &Server, model: Option<&str>) -> (String, String) {
    let (st, b) = s.post("/v1/completions", &greedy(model));
    assert_eq!(st, 200, "{model:?}: {b}");
    (
        b["choices"][0]["text"].as_str().unwrap().to_owned(),
        b["model"].as_str().unwrap().to_owned(),
    )
}

/// The greedy text a server over `model` alone gives.
fn single_model_text(model: &Path) -> String {
    let (s, _) = Server::start_model(model, &[]);
    complete(&s, None).0
}

/// `/v1/models`' entries, by id.
fn model_states(s: &Server) -> Vec<(String, String)> {
    let (st, text) = s.get("/v1/models");
    assert_eq!(st, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["object"], "list");
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(m["object"], "model", "{m}");
            (
                m["id"].as_str().unwrap().to_owned(),
                m["status"]["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn state_of(s: &Server, id: &str) -> String {
    model_states(s)
        .into_iter()
        .find(|(m, _)| m == id)
        .unwrap_or_else(|| panic!("no model {id}"))
        .1
}

fn tiny() -> PathBuf {
    tiny_model().to_path_buf()
}

#[test]
fn two_models_and_their_aliases_are_routed_by_model() {
    let bard = single_model_text(&shipped_model());
    let small = single_model_text(&tiny());
    assert_ne!(bard, small, "the two models should answer differently");

    let (s, _) = Server::start_model(
        &shipped_model(),
        &[
            "-m",
            tiny().to_str().unwrap(),
            "--alias",
            "bard",
            "--model-alias",
            &format!("{TINY}=small"),
        ],
    );
    // Only the default loads at start.
    assert_eq!(
        model_states(&s),
        [
            ("shakespeare".to_owned(), "loaded".to_owned()),
            (TINY.to_owned(), "unloaded".to_owned())
        ]
    );
    for (asked, text, name) in [
        (None, &bard, "shakespeare"),
        (Some("shakespeare"), &bard, "shakespeare"),
        (Some("bard"), &bard, "shakespeare"),
        (Some(TINY), &small, TINY),
        (Some("small"), &small, TINY),
    ] {
        assert_eq!(
            complete(&s, asked),
            (text.clone(), name.to_owned()),
            "{asked:?}"
        );
    }
    assert_eq!(state_of(&s, TINY), "loaded");

    // The chat route and the GET routes are routed too: each model's own context.
    let (st, b) = s.post(
        "/v1/chat/completions",
        &json!({"model": "small", "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 2}),
    );
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["model"], TINY);
    let props =
        |q: &str| -> Value { serde_json::from_str(&s.get(&format!("/props{q}")).1).unwrap() };
    let (p_default, p_small) = (props(""), props("?model=small"));
    assert_eq!(p_default["model"], "shakespeare");
    assert_eq!(p_small["model"], TINY);
    assert_ne!(
        p_default["n_ctx"], p_small["n_ctx"],
        "{p_default} {p_small}"
    );

    // /v1/models: aliases listed, the default marked, meta once loaded.
    let (_, text) = s.get("/v1/models");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["data"][0]["aliases"], json!(["bard"]));
    assert_eq!(v["data"][0]["default"], true);
    assert_eq!(v["data"][1]["aliases"], json!(["small"]));
    assert_eq!(v["data"][1]["meta"]["n_ctx"], p_small["n_ctx"]);
    let (st, one) = s.get("/v1/models/small");
    assert_eq!(st, 200, "{one}");
    assert!(one.contains(&format!("\"id\":\"{TINY}\"")), "{one}");

    // The chat page has its model picker (filled from /v1/models by the page's script).
    let (st, page) = s.get("/");
    assert_eq!(st, 200);
    assert!(page.contains("id=\"model-select\""), "{page}");

    // Each model's figures carry its name.
    let tiny_requests = s.metric(&format!("bitnet_requests_total{{model=\"{TINY}\"}}"));
    assert_eq!(tiny_requests, 3.0);
    assert_eq!(
        s.metric("bitnet_requests_total{model=\"shakespeare\"}"),
        3.0
    );
    assert_eq!(s.metric("bitnet_models_loaded"), 2.0);
    assert_eq!(s.metric("bitnet_model_unloads_total"), 0.0);
}

#[test]
fn models_max_one_unloads_the_idle_model_and_reloads_it_on_demand() {
    let (s, _) = Server::start_model(
        &shipped_model(),
        &["-m", tiny().to_str().unwrap(), "--models-max", "1"],
    );
    let (first, _) = complete(&s, None);
    assert_eq!(s.metric("bitnet_model_loads_total"), 1.0);

    let (small, name) = complete(&s, Some(TINY));
    assert_eq!(name, TINY);
    assert_eq!(state_of(&s, "shakespeare"), "unloaded");
    assert_eq!(state_of(&s, TINY), "loaded");
    assert_eq!(s.metric("bitnet_models_loaded"), 1.0);
    assert_eq!(s.metric("bitnet_model_loads_total"), 2.0);
    assert_eq!(s.metric("bitnet_model_unloads_total"), 1.0);

    // Back to the default: loaded again, the same greedy answer; the other goes.
    assert_eq!(complete(&s, None), (first, "shakespeare".to_owned()));
    assert_eq!(state_of(&s, "shakespeare"), "loaded");
    assert_eq!(state_of(&s, TINY), "unloaded");
    assert_eq!(s.metric("bitnet_model_loads_total"), 3.0);
    assert_eq!(s.metric("bitnet_model_unloads_total"), 2.0);
    // The server stayed up throughout, and counts requests across a model's loads.
    assert_eq!(s.get("/health").0, 200);
    assert_eq!(
        s.metric("bitnet_requests_total{model=\"shakespeare\"}"),
        2.0
    );
    assert_eq!(complete(&s, Some(TINY)).0, small);
}

#[test]
fn a_busy_model_is_not_unloaded_under_its_request() {
    let (s, _) = Server::start_model(
        &shipped_model(),
        &[
            "-m",
            tiny().to_str().unwrap(),
            "--models-max",
            "1",
            "--step-delay-ms",
            "20",
        ],
    );
    let long = json!({"prompt": "ROMEO:", "max_tokens": 60, "ignore_eos": true, "stream": true});
    let mut stream = open_stream(&s, "/v1/completions", &long);
    next_event(&mut stream);
    // Asked for while the default streams: its load waits for the default to go idle.
    let url = s.url("/v1/completions");
    let other = std::thread::spawn(move || {
        let r = ureq::post(&url).send_string(&greedy(Some(TINY)).to_string());
        r.map(|r| r.status()).unwrap_or_else(|e| panic!("{e}"))
    });
    let events = read_events(stream);
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    assert!(
        !events.iter().any(|e| e.contains("\"error\"")),
        "{events:?}"
    );
    assert_eq!(other.join().unwrap(), 200);
    assert_eq!(state_of(&s, "shakespeare"), "unloaded");
    assert_eq!(s.metric("bitnet_model_unloads_total"), 1.0);
}

#[test]
fn past_the_memory_budget_the_idle_model_is_unloaded() {
    // A MiB: less than the two files together, so one model fits at a time.
    let (s, _) = Server::start_model(
        &shipped_model(),
        &["-m", tiny().to_str().unwrap(), "--models-memory-max", "1"],
    );
    assert_eq!(complete(&s, Some(TINY)).1, TINY);
    assert_eq!(state_of(&s, "shakespeare"), "unloaded");
    assert_eq!(s.metric("bitnet_model_unloads_total"), 1.0);
    assert_eq!(complete(&s, None).1, "shakespeare");
    assert_eq!(state_of(&s, TINY), "unloaded");
}

#[test]
fn an_embedding_model_embeds_without_the_flag() {
    // A file that names a pooling type (mean) is an embedding model.
    let path = tmp_dir().join("embedder.gguf");
    let mut spec = SynthSpec::preset("tiny").unwrap();
    spec.seed = 5;
    spec.pooling_type = Some(1);
    write_model(&spec, &path, |_, _| {}).unwrap();
    let (s, _) = Server::start_model(&shipped_model(), &["-m", path.to_str().unwrap()]);
    let (st, b) = s.post(
        "/v1/embeddings",
        &json!({"model": "embedder", "input": ["hello", "there"]}),
    );
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["model"], "embedder");
    let v: Vec<f64> = serde_json::from_value(b["data"][1]["embedding"].clone()).unwrap();
    assert_eq!(v.len(), spec.n_embd);
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() < 1e-3, "{norm}");
    // Completions are still refused by it, and embeddings by the language model.
    let (st, b) = s.post(
        "/v1/completions",
        &json!({"model": "embedder", "prompt": "a"}),
    );
    assert_openai_error(st, &b, 501, None);
    let (st, b) = s.post("/v1/embeddings", &json!({"input": "a"}));
    assert_openai_error(st, &b, 501, None);
}

#[test]
fn a_request_for_a_model_still_loading_waits_for_it() {
    // Each engine step (the warm-up's among them) sleeps: a load takes seconds.
    let (s, _) = Server::start_model(
        &shipped_model(),
        &["-m", tiny().to_str().unwrap(), "--step-delay-ms", "300"],
    );
    let url = s.url("/v1/completions");
    let ask = move || {
        let url = url.clone();
        std::thread::spawn(move || {
            match ureq::post(&url).send_string(&greedy(Some(TINY)).to_string()) {
                Ok(r) => (r.status(), r.into_json::<Value>().unwrap()),
                Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap()),
                Err(e) => panic!("{e}"),
            }
        })
    };
    let first = ask();
    s.wait_for(20, "the tiny model starts loading", |s| {
        state_of(s, TINY) == "loading"
    });
    // Asked while the model loads: queued, not refused.
    let second = ask();
    for r in [first, second] {
        let (st, b) = r.join().unwrap();
        assert_eq!(st, 200, "{b}");
        assert_eq!(b["model"], TINY);
    }
    assert_eq!(state_of(&s, TINY), "loaded");
    assert_eq!(s.metric("bitnet_model_loads_total"), 2.0);
}

#[test]
fn an_unknown_model_is_a_404_naming_the_models_served() {
    let (s, _) = Server::start_model(
        &shipped_model(),
        &[
            "-m",
            tiny().to_str().unwrap(),
            "--model-alias",
            "shakespeare=bard",
        ],
    );
    let (st, b) = s.post("/v1/completions", &greedy(Some("gpt-4")));
    assert_openai_error(st, &b, 404, Some("model"));
    assert_eq!(b["error"]["code"], "model_not_found");
    let msg = b["error"]["message"].as_str().unwrap();
    for name in ["gpt-4", "shakespeare", "bard", TINY] {
        assert!(msg.contains(name), "{msg}");
    }
    let (st, b) = s.post(
        "/v1/chat/completions",
        &json!({"model": "nope", "messages": [{"role": "user", "content": "Hi"}]}),
    );
    assert_openai_error(st, &b, 404, Some("model"));
    let (st, text) = s.get("/props?model=nope");
    assert_eq!(st, 404, "{text}");
    assert!(text.contains("model_not_found"), "{text}");
    let (st, b) = s.post("/tokenize", &json!({"model": 7, "content": "a"}));
    assert_openai_error(st, &b, 400, Some("model"));
    assert_eq!(s.get("/v1/models/nope").0, 404);
    // Nothing was loaded for them.
    assert_eq!(state_of(&s, TINY), "unloaded");
}

#[test]
fn a_model_that_fails_to_load_answers_500_and_the_others_serve() {
    let dir = scratch("router-dir");
    std::fs::copy(tiny(), dir.join("a-tiny.gguf")).unwrap();
    std::fs::write(dir.join("broken.gguf"), b"not a gguf file").unwrap();
    std::fs::write(dir.join("notes.txt"), b"not a model").unwrap();
    // -m names the default; the directory's *.gguf follow by name, other files are left.
    let (s, _) = Server::start_model(&tiny(), &["--models-dir", dir.to_str().unwrap()]);
    let ids: Vec<String> = model_states(&s).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, [TINY, "a-tiny", "broken"]);
    let (st, b) = s.post("/v1/completions", &greedy(Some("broken")));
    assert_openai_error(st, &b, 500, None);
    let msg = b["error"]["message"].as_str().unwrap();
    assert!(msg.contains("broken.gguf"), "{msg}");
    assert_eq!(state_of(&s, "broken"), "failed");
    assert_eq!(s.metric("bitnet_model_load_failures_total"), 1.0);
    assert_eq!(s.get("/health").0, 200);
    assert_eq!(complete(&s, Some("a-tiny")).1, "a-tiny");
    assert_eq!(complete(&s, None).1, TINY);
}

#[test]
fn ambiguous_model_names_are_refused_at_start() {
    let dir = scratch("router-names");
    let copy = dir.join("shakespeare.gguf");
    std::fs::copy(shipped_model(), &copy).unwrap();
    let serve = |extra: &[&str]| {
        let mut cmd = bitnet();
        cmd.args(["serve", "--port", "0", "-m"])
            .arg(shipped_model())
            .args(extra);
        run_err(&mut cmd)
    };
    let e = serve(&["-m", copy.to_str().unwrap()]);
    assert!(
        e.contains("two models would be named \"shakespeare\""),
        "{e}"
    );
    let e = serve(&["-m", tiny().to_str().unwrap(), "--model-alias", "nope=x"]);
    assert!(e.contains("no model is named \"nope\""), "{e}");
    let e = serve(&[
        "-m",
        tiny().to_str().unwrap(),
        "--model-alias",
        &format!("{TINY}=shakespeare"),
    ]);
    assert!(e.contains("would stand for two models"), "{e}");
}
