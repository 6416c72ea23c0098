//! `bitnet serve`'s request validation and HTTP conventions, end to end on the shipped model:
//! fields we cannot honour refused by name and llama.cpp's `n_predict` honoured, ranges
//! checked, chat log probabilities that join up to the content under prompt healing and stop
//! strings, `/tokenize` pieces as llama.cpp gives them, CORS, every error in OpenAI's shape,
//! several API keys in either header, `/v1/models/{id}` and `/v1/health`. One server serves
//! every check of a test where they do not interfere.

mod common;

use common::server::{Server, assert_openai_error, open_stream, read_events};
use serde_json::{Value, json};

/// A request with headers; the status, the headers asked for, and the body.
fn call(
    s: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, ureq::Response) {
    let mut req = ureq::request(method, &s.url(path));
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let r = match body {
        Some(b) => req.send_string(&b.to_string()),
        None => req.call(),
    };
    match r {
        Ok(r) => (r.status(), r),
        Err(ureq::Error::Status(code, r)) => (code, r),
        Err(e) => panic!("{method} {path}: {e}"),
    }
}

fn json_of(r: ureq::Response) -> Value {
    let text = r.into_string().unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"))
}

fn completion_tokens(r: &Value) -> u64 {
    r["usage"]["completion_tokens"].as_u64().unwrap()
}

fn chat(content: &str, extra: Value) -> Value {
    let mut body = json!({"messages": [{"role": "user", "content": content}]});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

#[test]
fn request_fields_are_honoured_or_refused_by_name() {
    let s = Server::start(&[]);
    // llama.cpp's n_predict caps the answer on both routes (the default is the reply budget,
    // 32 tokens here).
    let (st, r) = s.post("/v1/completions", &json!({"prompt": "A", "n_predict": 3}));
    assert_eq!(st, 200, "{r}");
    assert!(completion_tokens(&r) <= 3, "{r}");
    let (st, r) = s.post("/v1/chat/completions", &chat("hi", json!({"n_predict": 2})));
    assert_eq!(st, 200, "{r}");
    assert!(completion_tokens(&r) <= 2, "{r}");
    // Both limits: the smaller holds.
    for (max_tokens, n_predict) in [(2, 9), (9, 2)] {
        let (st, r) = s.post(
            "/v1/completions",
            &json!({"prompt": "A", "max_tokens": max_tokens, "n_predict": n_predict,
                    "ignore_eos": true}),
        );
        assert_eq!(st, 200, "{r}");
        assert_eq!(completion_tokens(&r), 2, "{r}");
    }
    // -1 is llama.cpp's "no limit": the other limit, else the server's default.
    let (st, r) = s.post(
        "/v1/completions",
        &json!({"prompt": "A", "n_predict": -1, "max_tokens": 2}),
    );
    assert_eq!(st, 200, "{r}");
    assert!(completion_tokens(&r) <= 2, "{r}");
    let (st, b) = s.post("/v1/completions", &json!({"prompt": "A", "n_predict": -2}));
    assert_openai_error(st, &b, 400, Some("n_predict"));

    // Fields we cannot honour are refused by name, at any value that would matter; their
    // no-op values pass.
    let refused = [
        ("echo", json!(true)),
        ("suffix", json!(" the end")),
        ("best_of", json!(2)),
        ("typical_p", json!(0.5)),
        ("mirostat", json!(2)),
        ("dry_multiplier", json!(0.8)),
        ("xtc_probability", json!(0.5)),
        ("top_n_sigma", json!(1.0)),
        ("dynatemp_range", json!(0.5)),
        ("n_probs", json!(3)),
        ("post_sampling_probs", json!(true)),
        ("lora", json!([{"id": 0, "scale": 1.0}])),
        ("n_keep", json!(4)),
        ("t_max_predict_ms", json!(100)),
    ];
    for (field, value) in &refused {
        let mut body = json!({"prompt": "A", "max_tokens": 2});
        body[field] = value.clone();
        let (st, b) = s.post("/v1/completions", &body);
        assert_openai_error(st, &b, 400, Some(field));
        let mut body = chat("hi", json!({"max_tokens": 2}));
        body[field] = value.clone();
        let (st, b) = s.post("/v1/chat/completions", &body);
        assert_openai_error(st, &b, 400, Some(field));
    }
    let harmless = json!({
        "prompt": "A", "max_tokens": 2, "echo": false, "suffix": null, "best_of": 1,
        "typical_p": 1.0, "mirostat": 0, "dry_multiplier": 0.0, "xtc_probability": 0.0,
        "top_n_sigma": -1.0, "dynatemp_range": 0.0, "n_probs": 0, "lora": [], "n_keep": 0,
        "model": "anything", "user": "u1", "cache_prompt": true, "store": false,
        "metadata": {"k": "v"}, "service_tier": "auto", "samplers": ["top_k", "temperature"],
    });
    let (st, r) = s.post("/v1/completions", &harmless);
    assert_eq!(st, 200, "{r}");
    // The chat's own: deprecated functions, audio, web search.
    for (field, value) in [
        ("functions", json!([{"name": "f", "parameters": {}}])),
        ("function_call", json!({"name": "f"})),
        ("audio", json!({"voice": "alloy", "format": "wav"})),
        ("modalities", json!(["text", "audio"])),
        ("web_search_options", json!({})),
    ] {
        let mut body = chat("hi", json!({"max_tokens": 2}));
        body[field] = value;
        let (st, b) = s.post("/v1/chat/completions", &body);
        assert_openai_error(st, &b, 400, Some(field));
    }
    let (st, r) = s.post(
        "/v1/chat/completions",
        &chat("hi", json!({"max_tokens": 2, "modalities": ["text"]})),
    );
    assert_eq!(st, 200, "{r}");

    // Ranges as OpenAI sets them.
    for (field, value) in [
        ("temperature", json!(-0.5)),
        ("temperature", json!(2.5)),
        ("top_p", json!(1.5)),
        ("top_p", json!(-0.1)),
        ("min_p", json!(1.5)),
        ("presence_penalty", json!(3)),
        ("frequency_penalty", json!(-3)),
        ("repeat_penalty", json!(-1)),
        ("n", json!(0)),
    ] {
        let mut body = chat("hi", json!({"max_tokens": 2}));
        body[field] = value;
        let (st, b) = s.post("/v1/chat/completions", &body);
        assert_openai_error(st, &b, 400, Some(field));
    }
    // top_logprobs without logprobs would be ignored: refused, as OpenAI does.
    let (st, b) = s.post(
        "/v1/chat/completions",
        &chat("hi", json!({"max_tokens": 2, "top_logprobs": 3})),
    );
    assert_openai_error(st, &b, 400, Some("top_logprobs"));
    // Roles: the five OpenAI knows (and its older `function`); anything else is refused.
    for role in ["wizard", "", "User"] {
        let (st, b) = s.post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": role, "content": "hi"}], "max_tokens": 2}),
        );
        assert_openai_error(st, &b, 400, Some("messages"));
        assert!(
            b["error"]["message"].as_str().unwrap().contains("role"),
            "{b}"
        );
    }
    let (st, r) = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "developer", "content": "Be brief."},
                             {"role": "user", "content": "hi"}], "max_tokens": 2}),
    );
    assert_eq!(st, 200, "{r}");

    // /detokenize says what is wrong with an id.
    let (st, b) = s.post("/detokenize", &json!({"tokens": [5, 99999]}));
    assert_openai_error(st, &b, 400, Some("tokens"));
    let msg = b["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("99999") && msg.contains("outside the vocabulary"),
        "{msg}"
    );
    let (st, b) = s.post("/detokenize", &json!({"tokens": [-1]}));
    assert_openai_error(st, &b, 400, Some("tokens"));

    // /tokenize pieces: a string when the piece is UTF-8 on its own, else its bytes (as
    // llama.cpp gives them); either way they join up to the content.
    let content = "héllo — ü";
    let (st, r) = s.post(
        "/tokenize",
        &json!({"content": content, "with_pieces": true}),
    );
    assert_eq!(st, 200, "{r}");
    let mut joined = Vec::new();
    let mut byte_pieces = 0;
    for t in r["tokens"].as_array().unwrap() {
        assert!(t["id"].is_u64(), "{t}");
        match &t["piece"] {
            Value::String(p) => {
                assert!(!p.contains('\u{FFFD}'), "{r}");
                joined.extend_from_slice(p.as_bytes());
            }
            Value::Array(bytes) => {
                byte_pieces += 1;
                let bytes: Vec<u8> = bytes.iter().map(|b| b.as_u64().unwrap() as u8).collect();
                assert!(std::str::from_utf8(&bytes).is_err(), "{t}");
                joined.extend(bytes);
            }
            p => panic!("piece {p}"),
        }
    }
    assert!(byte_pieces > 0, "the shipped vocabulary splits these: {r}");
    assert_eq!(String::from_utf8(joined).unwrap(), content);
}

/// The tokens' texts of a choice's chat logprobs, and their bytes.
fn chat_logprob_text(lp: &Value) -> (String, Vec<u8>) {
    let mut text = String::new();
    let mut bytes = Vec::new();
    for t in lp["content"].as_array().unwrap() {
        text.push_str(t["token"].as_str().unwrap());
        bytes.extend(
            t["bytes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap() as u8),
        );
    }
    (text, bytes)
}

#[test]
fn logprob_tokens_join_up_to_the_content() {
    // The shipped model's template ends the generation prompt in "Assistant: ": every chat
    // is healed, and its first token carries the space the prompt gave up.
    let s = Server::start(&[]);
    for seed in 1..6 {
        for stop in [json!(null), json!(["th", "\n\n"])] {
            let body = chat(
                "hi",
                json!({"max_tokens": 40, "logprobs": true, "top_logprobs": 5,
                        "seed": seed, "stop": stop}),
            );
            let (st, r) = s.post("/v1/chat/completions", &body);
            assert_eq!(st, 200, "{r}");
            let c = &r["choices"][0];
            let content = c["message"]["content"].as_str().unwrap();
            let (text, bytes) = chat_logprob_text(&c["logprobs"]);
            assert_eq!(text, content, "{r}");
            assert_eq!(bytes, content.as_bytes(), "{r}");
            // The first position's alternatives are trimmed of the healed space too.
            let first = &c["logprobs"]["content"][0];
            for alt in first["top_logprobs"].as_array().unwrap() {
                let t = alt["token"].as_str().unwrap();
                assert!(!t.starts_with(' '), "{first}");
                let b: Vec<u8> = alt["bytes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b.as_u64().unwrap() as u8)
                    .collect();
                assert_eq!(b, t.as_bytes(), "{first}");
            }

            // Streamed: each chunk's tokens join up to that chunk's content.
            let mut body = body.clone();
            body["stream"] = json!(true);
            let events = read_events(open_stream(&s, "/v1/chat/completions", &body));
            let mut streamed = String::new();
            for e in events.iter().filter(|e| *e != "[DONE]") {
                let v: Value = serde_json::from_str(e).unwrap();
                let choice = &v["choices"][0];
                let delta = choice["delta"]["content"].as_str().unwrap_or("");
                if choice["logprobs"].is_object() {
                    let (text, bytes) = chat_logprob_text(&choice["logprobs"]);
                    assert_eq!(text, delta, "{e}");
                    assert_eq!(bytes, delta.as_bytes(), "{e}");
                } else {
                    assert_eq!(delta, "", "{e}");
                }
                streamed.push_str(delta);
            }
            assert_eq!(streamed, content, "same seed, same answer");
        }
    }
    // The completions route, cut by a stop string.
    for seed in 1..4 {
        let (st, r) = s.post(
            "/v1/completions",
            &json!({"prompt": "KING:", "max_tokens": 60, "logprobs": 2, "seed": seed,
                    "stop": ["th"]}),
        );
        assert_eq!(st, 200, "{r}");
        let c = &r["choices"][0];
        let tokens: Vec<&str> = c["logprobs"]["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert_eq!(tokens.concat(), c["text"].as_str().unwrap(), "{r}");
        let mut at = 0;
        for (t, off) in tokens
            .iter()
            .zip(c["logprobs"]["text_offset"].as_array().unwrap())
        {
            assert_eq!(off.as_u64().unwrap() as usize, at, "{r}");
            at += t.len();
        }
    }
}

#[test]
fn cors_answers_preflights_for_the_origins_allowed() {
    let s = Server::start(&[
        "--api-key",
        "k1",
        "--cors-origin",
        "http://app.example",
        "--cors-origin",
        "http://localhost:*",
    ]);
    let preflight = |origin: &str| {
        call(
            &s,
            "OPTIONS",
            "/v1/chat/completions",
            &[
                ("Origin", origin),
                ("Access-Control-Request-Method", "POST"),
                (
                    "Access-Control-Request-Headers",
                    "authorization, content-type, x-stainless-os",
                ),
            ],
            None,
        )
    };
    // No key needed: browsers never send it on a preflight.
    for origin in ["http://app.example", "http://localhost:5173"] {
        let (st, r) = preflight(origin);
        assert_eq!(st, 204, "{origin}");
        assert_eq!(r.header("access-control-allow-origin"), Some(origin));
        let methods = r.header("access-control-allow-methods").unwrap();
        assert!(methods.contains("POST"), "{methods}");
        let headers = r
            .header("access-control-allow-headers")
            .unwrap()
            .to_ascii_lowercase();
        for h in ["authorization", "content-type", "x-stainless-os"] {
            assert!(headers.contains(h), "{headers}");
        }
        assert!(r.header("access-control-max-age").is_some());
        assert!(r.header("vary").unwrap().contains("Origin"));
    }
    // An origin not allowed: refused, and no header that would let the browser read.
    for origin in ["http://evil.example", "http://localhost.evil.example:80"] {
        let (st, r) = preflight(origin);
        assert!(r.header("access-control-allow-origin").is_none());
        assert_openai_error(st, &json_of(r), 403, None);
    }
    // Answers carry the origin when it is allowed, errors (401) included.
    let (st, r) = call(
        &s,
        "GET",
        "/v1/models",
        &[
            ("Origin", "http://app.example"),
            ("Authorization", "Bearer k1"),
        ],
        None,
    );
    assert_eq!(st, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    assert!(r.header("vary").unwrap().contains("Origin"));
    let (st, r) = call(
        &s,
        "POST",
        "/v1/completions",
        &[("Origin", "http://app.example")],
        Some(&json!({"prompt": "A", "max_tokens": 2})),
    );
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    assert_openai_error(st, &json_of(r), 401, None);
    let (st, r) = call(
        &s,
        "GET",
        "/v1/models",
        &[
            ("Origin", "http://evil.example"),
            ("Authorization", "Bearer k1"),
        ],
        None,
    );
    assert_eq!(st, 200);
    assert!(r.header("access-control-allow-origin").is_none());

    // `*`: any origin.
    let open = Server::start(&["--cors-origin", "*"]);
    let (st, r) = call(
        &open,
        "OPTIONS",
        "/v1/models",
        &[
            ("Origin", "http://anywhere.example"),
            ("Access-Control-Request-Method", "GET"),
        ],
        None,
    );
    assert_eq!(st, 204);
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
}

#[test]
fn errors_keys_and_model_routes_follow_openai_and_llama_cpp() {
    let dir = bitnet_test_scratch::fresh_dir("serve-api-keys");
    let key_file = dir.join("keys");
    std::fs::write(&key_file, "# the team's keys\nk4\n\n  k5  \n").unwrap();
    let s = Server::start(&[
        "--api-key",
        "k1,k2",
        "--api-key",
        "k3",
        "--api-key-file",
        key_file.to_str().unwrap(),
        "--alias",
        "org/shakespeare",
    ]);
    let get = |path: &str, headers: &[(&str, &str)]| call(&s, "GET", path, headers, None);
    for key in ["k1", "k2", "k3", "k4", "k5"] {
        for header in [
            ("Authorization", format!("Bearer {key}")),
            ("Authorization", format!("bearer {key}")),
            ("Authorization", format!("BEARER  {key}")),
            ("X-Api-Key", key.to_owned()),
        ] {
            let (st, _) = get("/v1/models", &[(header.0, &header.1)]);
            assert_eq!(st, 200, "{header:?}");
        }
    }
    for bad in [
        "Bearer # the team's keys",
        "Bearer k1,k2",
        "Basic k1",
        "k1",
        "Bearer ",
    ] {
        let (st, r) = get("/v1/models", &[("Authorization", bad)]);
        assert_openai_error(st, &json_of(r), 401, None);
    }
    let (st, r) = get("/v1/models", &[("X-Api-Key", "k6")]);
    assert_openai_error(st, &json_of(r), 401, None);
    // /v1/health, like /health, needs no key.
    for path in ["/health", "/v1/health"] {
        let (st, r) = get(path, &[]);
        assert_eq!(st, 200, "{path}");
        assert_eq!(json_of(r)["status"], "ok");
    }
    // One model by id; an unknown id is a 404 in OpenAI's shape.
    let auth = [("Authorization", "Bearer k1")];
    for path in ["/v1/models/org/shakespeare", "/models/org/shakespeare"] {
        let (st, r) = get(path, &auth);
        assert_eq!(st, 200, "{path}");
        let m = json_of(r);
        assert_eq!(m["id"], "org/shakespeare", "{m}");
        assert_eq!(m["object"], "model", "{m}");
    }
    let (st, r) = get("/v1/models/gpt-4", &auth);
    let b = json_of(r);
    assert_openai_error(st, &b, 404, Some("model"));
    assert_eq!(b["error"]["code"], "model_not_found");
    // A wrong method: 405 in OpenAI's shape, with the methods allowed.
    for (method, path) in [("DELETE", "/v1/models"), ("GET", "/v1/chat/completions")] {
        let (st, r) = call(&s, method, path, &auth, None);
        let allow = r.header("allow").map(str::to_owned);
        assert!(allow.is_some(), "{method} {path}");
        assert_openai_error(st, &json_of(r), 405, None);
    }
    let (st, r) = call(&s, "POST", "/health", &[], Some(&json!({})));
    assert_openai_error(st, &json_of(r), 405, None);
    // An OPTIONS that is no preflight says what the route allows.
    let (st, r) = call(&s, "OPTIONS", "/v1/models", &[], None);
    assert_eq!(st, 204);
    assert!(r.header("allow").unwrap().contains("GET"));
    // Without --cors-origin, a preflight gets no CORS headers.
    let (st, r) = call(
        &s,
        "OPTIONS",
        "/v1/models",
        &[
            ("Origin", "http://localhost:3000"),
            ("Access-Control-Request-Method", "GET"),
        ],
        None,
    );
    assert!(r.header("access-control-allow-origin").is_none());
    assert_openai_error(st, &json_of(r), 403, None);
    drop(s);

    // A key file with no key in it is an error at start.
    let empty = dir.join("empty");
    std::fs::write(&empty, "# nothing yet\n\n").unwrap();
    let out = common::bitnet()
        .args(["serve", "-m"])
        .arg(common::shipped_model())
        .args(["--port", "0", "--api-key-file"])
        .arg(&empty)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no API key"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
