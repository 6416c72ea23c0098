//! `bitnet serve` end to end: a real server process on loopback (port 0, the address read
//! from its first line), a real HTTP client, the shipped 1.1 MiB model. Every route, every
//! fault of the issue, streaming with and without usage, n > 1, the API key, a full queue,
//! a client leaving mid-stream, and SIGTERM. `--step-delay-ms` (hidden) slows the tiny model
//! down where a test needs requests to last.

mod common;

use std::io::{BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::server::{Server, assert_openai_error, next_event, open_stream, read_events};
use common::shipped_model;
use serde_json::{Value, json};

#[test]
fn completions_chat_models_tokenize_and_metrics() {
    let s = Server::start(&[]);
    let (st, models) = s.get("/v1/models");
    assert_eq!(st, 200);
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][0]["id"], "shakespeare");

    // A whole text completion: text, usage with cached tokens, timings; unknown fields
    // ignored; the same seed gives the same text.
    let req = json!({"prompt": "ROMEO:", "max_tokens": 12, "seed": 7, "temperature": 0.9,
                     "top_k": 20, "top_p": 0.9, "min_p": 0.01, "repeat_penalty": 1.1,
                     "presence_penalty": 0.1, "frequency_penalty": 0.1, "user": "u1",
                     "some_future_field": {"x": 1}});
    let (st, a) = s.post("/v1/completions", &req);
    assert_eq!(st, 200, "{a}");
    assert_eq!(a["object"], "text_completion");
    let text = a["choices"][0]["text"].as_str().unwrap().to_owned();
    assert!(!text.is_empty());
    assert_eq!(a["choices"][0]["finish_reason"], "length");
    assert_eq!(a["usage"]["completion_tokens"], 12);
    assert!(a["usage"]["prompt_tokens"].as_u64().unwrap() >= 2);
    assert!(a["usage"]["prompt_tokens_details"]["cached_tokens"].is_u64());
    assert_eq!(a["timings"]["predicted_n"], 12);
    assert!(a["timings"]["predicted_per_second"].as_f64().unwrap() > 0.0);
    let (_, b) = s.post("/v1/completions", &req);
    assert_eq!(
        b["choices"][0]["text"],
        text.as_str(),
        "same seed, same text"
    );
    // The repeated prompt came from the prefix cache.
    assert!(
        b["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            >= 1
    );

    // A stop string ends the text before it (the model writes newlines constantly).
    let (_, c) = s.post(
        "/v1/completions",
        &json!({"prompt": "ROMEO:", "max_tokens": 60, "seed": 1, "stop": ["\n", "zzz"]}),
    );
    assert!(
        !c["choices"][0]["text"].as_str().unwrap().contains('\n'),
        "{c}"
    );
    assert_eq!(c["choices"][0]["finish_reason"], "stop");
    // `stop` may be a single string: the same as a list of that one string.
    let (st, one) = s.post(
        "/v1/completions",
        &json!({"prompt": "ROMEO:", "max_tokens": 60, "seed": 1, "stop": "\n"}),
    );
    assert_eq!(st, 200, "{one}");
    let (_, listed) = s.post(
        "/v1/completions",
        &json!({"prompt": "ROMEO:", "max_tokens": 60, "seed": 1, "stop": ["\n"]}),
    );
    assert_eq!(one["choices"][0]["finish_reason"], "stop", "{one}");
    assert_eq!(one["choices"][0]["text"], listed["choices"][0]["text"]);
    assert!(
        !one["choices"][0]["text"].as_str().unwrap().contains('\n'),
        "{one}"
    );

    // logit_bias: banning every token but one forces it.
    let (_, tk) = s.post("/tokenize", &json!({"content": "the"}));
    let the = tk["tokens"][0].as_u64().unwrap();
    let bias: serde_json::Map<String, Value> = (0..1024u32)
        .filter(|&t| u64::from(t) != the)
        .map(|t| (t.to_string(), json!(-100)))
        .collect();
    let (st, f) = s.post(
        "/v1/completions",
        &json!({"prompt": "a", "max_tokens": 3, "logit_bias": bias, "temperature": 1.0,
                "min_p": 0.0}),
    );
    assert_eq!(st, 200, "{f}");
    assert_eq!(f["choices"][0]["text"], "thethethe");

    // Completions logprobs: one per token, with alternatives.
    let (_, l) = s.post(
        "/v1/completions",
        &json!({"prompt": "ROMEO:", "max_tokens": 4, "logprobs": 2, "seed": 3}),
    );
    let lp = &l["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 4, "{l}");
    assert!(lp["token_logprobs"][0].as_f64().unwrap() <= 0.0);
    assert_eq!(lp["top_logprobs"][0].as_object().unwrap().len(), 2);

    // Chat, whole, with logprobs and n = 3 (forked from one prompt).
    let (st, ch) = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
                "max_completion_tokens": 5, "n": 3, "logprobs": true, "top_logprobs": 2,
                "seed": 11}),
    );
    assert_eq!(st, 200, "{ch}");
    assert_eq!(ch["object"], "chat.completion");
    let choices = ch["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
        assert_eq!(c["message"]["role"], "assistant");
        let content = &c["logprobs"]["content"];
        assert_eq!(content.as_array().unwrap().len(), 5, "{c}");
        // The first position lists only tokens the healed reply could start with.
        assert!(content[0]["top_logprobs"].as_array().unwrap().len() <= 2);
        assert_eq!(content[1]["top_logprobs"].as_array().unwrap().len(), 2);
    }
    assert_eq!(ch["usage"]["completion_tokens"], 15);
    let texts: Vec<&str> = choices
        .iter()
        .map(|c| c["message"]["content"].as_str().unwrap())
        .collect();
    assert!(
        texts.iter().any(|t| *t != texts[0]),
        "n answers differ: {texts:?}"
    );

    // The n answers fork one evaluation of the prompt: the first answer evaluates the P
    // prompt tokens the prefix cache lacks (usage's cached_tokens are the first answer's),
    // each other answer only the last one again (for logits of its own), sharing the rest.
    let (evaluated, cached) = (
        s.metric("bitnet_prompt_tokens_total"),
        s.metric("bitnet_prompt_tokens_cached_total"),
    );
    let (st, three) = s.post(
        "/v1/completions",
        &json!({"prompt": "JULIET: O Romeo, Romeo, wherefore art thou", "max_tokens": 3,
                "n": 3, "seed": 5}),
    );
    assert_eq!(st, 200, "{three}");
    assert_eq!(three["choices"].as_array().unwrap().len(), 3);
    let p = three["usage"]["prompt_tokens"].as_f64().unwrap();
    let c = three["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_f64()
        .unwrap();
    assert!(p > 5.0 && c < p - 1.0, "{three}");
    assert_eq!(
        s.metric("bitnet_prompt_tokens_total") - evaluated,
        (p - c) + 2.0,
        "{three}"
    );
    assert_eq!(
        s.metric("bitnet_prompt_tokens_cached_total") - cached,
        c + 2.0 * (p - 1.0),
        "{three}"
    );

    // Tokenize and detokenize round-trip.
    let (st, t) = s.post("/tokenize", &json!({"content": "To be, or not"}));
    assert_eq!(st, 200);
    let (st, d) = s.post("/detokenize", &json!({"tokens": t["tokens"]}));
    assert_eq!(st, 200);
    assert_eq!(d["content"], "To be, or not");
    let (_, tp) = s.post("/tokenize", &json!({"content": "To", "with_pieces": true}));
    assert_eq!(tp["tokens"][0]["piece"], "To");

    // Metrics: the counters moved, histograms and the repetition gauge are there, and
    // every sequence's KV is back.
    s.wait_for(5, "sequences freed", |s| {
        s.metric("bitnet_kv_sequences") == 0.0
    });
    assert!(s.metric("bitnet_tokens_predicted_total") >= 12.0 * 2.0 + 15.0);
    assert!(s.metric("bitnet_prompt_tokens_total") > 0.0);
    assert_eq!(s.metric("bitnet_requests_processing"), 0.0);
    assert_eq!(s.metric("bitnet_requests_deferred"), 0.0);
    assert_eq!(s.metric("bitnet_kv_cache_usage_ratio"), 0.0);
    assert!(s.metric("bitnet_time_to_first_token_seconds_count") >= 5.0);
    assert!(s.metric("bitnet_inter_token_latency_seconds_count") > 0.0);
    assert!(s.metric("bitnet_request_duration_seconds_count") >= 5.0);
    let rep = s.metric("bitnet_repetition_rate_3gram");
    assert!((0.0..=1.0).contains(&rep));
    let (_, text) = s.get("/metrics");
    assert!(text.contains("bitnet_time_to_first_token_seconds_bucket{le=\"+Inf\"}"));

    let (st, nf) = s.get("/v2/nothing");
    assert_eq!(st, 404);
    assert!(nf.contains("\"error\""));
}

#[test]
fn streaming_sends_usage_only_when_asked() {
    let s = Server::start(&[]);
    // Chat stream without include_usage: role first, text, a finish chunk, [DONE]; no chunk
    // carries a usage key.
    let ev = read_events(open_stream(
        &s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6,
                "stream": true, "seed": 2}),
    ));
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = ev[..ev.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    assert!(
        chunks.iter().all(|c| c.get("usage").is_none()),
        "usage not asked for"
    );
    let finish = chunks.last().unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(!text.is_empty());

    // With include_usage: every chunk has usage null but the last, which has no choices.
    let ev = read_events(open_stream(
        &s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6,
                "stream": true, "stream_options": {"include_usage": true}, "n": 2}),
    ));
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = ev[..ev.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let (usage, rest) = chunks.split_last().unwrap();
    assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
    assert_eq!(usage["usage"]["completion_tokens"], 12);
    assert!(usage["usage"]["prompt_tokens_details"]["cached_tokens"].is_u64());
    assert!(rest.iter().all(|c| c["usage"].is_null()));
    let finished: Vec<u64> = rest
        .iter()
        .filter(|c| c["choices"][0]["finish_reason"].is_string())
        .map(|c| c["choices"][0]["index"].as_u64().unwrap())
        .collect();
    assert_eq!(finished.len(), 2, "both answers end: {finished:?}");

    // Text completion stream.
    let ev = read_events(open_stream(
        &s,
        "/v1/completions",
        &json!({"prompt": "KING:", "max_tokens": 5, "stream": true, "seed": 4}),
    ));
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let first: Value = serde_json::from_str(&ev[0]).unwrap();
    assert_eq!(first["object"], "text_completion");
    assert!(first["choices"][0]["text"].is_string());
}

#[test]
fn faults_are_openai_shaped_4xx() {
    let s = Server::start(&["--max-body-bytes", "4096"]);
    let post = |path: &str, body: &[u8]| s.post_raw(path, body, None);
    let (st, b) = post("/v1/completions", b"{\"prompt\": ");
    assert_openai_error(st, &b, 400, None);
    assert!(b["error"]["message"].as_str().unwrap().contains("JSON"));
    let (st, b) = post("/v1/completions", b"[1, 2]");
    assert_openai_error(st, &b, 400, None);
    let (st, b) = post("/v1/completions", b"{\"prompt\": \"a\xff\xfe\"}");
    assert_openai_error(st, &b, 400, None);
    assert!(b["error"]["message"].as_str().unwrap().contains("UTF-8"));
    let (st, b) = s.post(
        "/v1/completions",
        &json!({"prompt": "a", "temperature": "hot"}),
    );
    assert_openai_error(st, &b, 400, Some("temperature"));
    let (st, b) = s.post("/v1/completions", &json!({"prompt": "a", "max_tokens": -3}));
    assert_openai_error(st, &b, 400, Some("max_tokens"));
    let (st, b) = s.post("/v1/completions", &json!({"prompt": "a", "stop": [1]}));
    assert_openai_error(st, &b, 400, Some("stop"));
    let (st, b) = s.post("/v1/completions", &json!({"prompt": "a", "n": 0}));
    assert_openai_error(st, &b, 400, Some("n"));
    let (st, b) = s.post(
        "/v1/completions",
        &json!({"prompt": "a", "logit_bias": {"99999": 1}}),
    );
    assert_openai_error(st, &b, 400, Some("logit_bias"));
    let (st, b) = s.post("/v1/completions", &json!({"prompt": ""}));
    assert_openai_error(st, &b, 400, Some("prompt"));
    let (st, b) = s.post("/v1/completions", &json!({"max_tokens": 3}));
    assert_openai_error(st, &b, 400, Some("prompt"));
    let (st, b) = s.post("/v1/chat/completions", &json!({"max_tokens": 3}));
    assert_openai_error(st, &b, 400, Some("messages"));
    let (st, b) = s.post("/v1/chat/completions", &json!({"messages": "hi"}));
    assert_openai_error(st, &b, 400, Some("messages"));
    let (st, b) = s.post("/v1/chat/completions", &json!({"messages": []}));
    assert_openai_error(st, &b, 400, Some("messages"));
    // A conversation whose prompt alone is longer than the 256-token context.
    let long_message = "ROMEO and JULIET ".repeat(150);
    let (_, t) = s.post("/tokenize", &json!({"content": long_message}));
    assert!(t["tokens"].as_array().unwrap().len() > 256, "{t}");
    let (st, b) = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": long_message}]}),
    );
    assert_openai_error(st, &b, 400, Some("messages"));
    assert_eq!(b["error"]["code"], "context_length_exceeded");
    let message = b["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the prompt is ")
            && message.ends_with(" tokens, the context holds 256: no room to generate"),
        "{b}"
    );
    let (st, b) = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000}),
    );
    assert_openai_error(st, &b, 400, Some("max_tokens"));
    assert_eq!(b["error"]["code"], "context_length_exceeded");
    let message = b["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("this model's context is 256 tokens; you asked for ")
            && message.ends_with(" in the prompt, 100000 to generate)"),
        "{b}"
    );
    // 300 token ids: longer than the 256-token context.
    let long: Vec<u32> = (0..300).map(|i| 100 + i % 50).collect();
    let (st, b) = s.post("/v1/completions", &json!({"prompt": long}));
    assert_openai_error(st, &b, 400, Some("prompt"));
    assert_eq!(b["error"]["code"], "context_length_exceeded");
    assert_eq!(
        b["error"]["message"],
        "the prompt is 300 tokens, the context holds 256: no room to generate"
    );
    // The whole context and one token asked for: one too many.
    let (st, b) = s.post(
        "/v1/completions",
        &json!({"prompt": &long[..255], "max_tokens": 2}),
    );
    assert_openai_error(st, &b, 400, Some("max_tokens"));
    assert_eq!(
        b["error"]["message"],
        "this model's context is 256 tokens; you asked for 257 (255 in the prompt, 2 to \
         generate)"
    );
    let (st, b) = s.post("/v1/completions", &json!({"prompt": [5000]}));
    assert_openai_error(st, &b, 400, Some("prompt"));
    let big = json!({"prompt": "x".repeat(10_000)});
    let (st, b) = s.post("/v1/completions", &big);
    assert_openai_error(st, &b, 413, None);
    let (st, b) = s.post("/tokenize", &json!({"content": 5}));
    assert_openai_error(st, &b, 400, Some("content"));
    let (st, b) = s.post("/detokenize", &json!({"tokens": ["a"]}));
    assert_openai_error(st, &b, 400, Some("tokens"));
    // Still serving after all that.
    let (st, _) = s.post("/v1/completions", &json!({"prompt": "a", "max_tokens": 2}));
    assert_eq!(st, 200);
}

#[test]
fn api_key_guards_every_route_but_health_and_the_page() {
    let dir = bitnet_test_scratch::fresh_dir("serve-key");
    let key_file = dir.join("key");
    std::fs::write(&key_file, "sekrit\n").unwrap();
    // The key from a file (its first line), or on the command line.
    check_api_key(&Server::start(&[
        "--api-key-file",
        key_file.to_str().unwrap(),
    ]));
    check_api_key(&Server::start(&["--api-key", "sekrit"]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `s` was started with the key "sekrit".
fn check_api_key(s: &Server) {
    let body = json!({"prompt": "a", "max_tokens": 2}).to_string();
    let (st, b) = s.post_raw("/v1/completions", body.as_bytes(), None);
    assert_openai_error(st, &b, 401, None);
    let (st, b) = s.post_raw("/v1/completions", body.as_bytes(), Some("wrong"));
    assert_openai_error(st, &b, 401, None);
    assert_eq!(b["error"]["type"], "authentication_error");
    let (st, _) = s.post_raw("/v1/completions", body.as_bytes(), Some("sekrit"));
    assert_eq!(st, 200);
    assert!(matches!(
        ureq::get(&s.url("/v1/models")).call(),
        Err(ureq::Error::Status(401, _))
    ));
    assert!(matches!(
        ureq::get(&s.url("/metrics")).call(),
        Err(ureq::Error::Status(401, _))
    ));
    assert_eq!(s.get("/health").0, 200);
}

#[test]
fn a_request_past_the_timeout_gets_504_or_an_error_event() {
    // 200 tokens at 50 ms a step take 10 s, well past the 1 s --timeout.
    let s = Server::start(&["--timeout", "1", "--step-delay-ms", "50"]);
    let long = json!({"prompt": "ROMEO:", "max_tokens": 200, "ignore_eos": true});
    let t0 = Instant::now();
    let (st, b) = s.post("/v1/completions", &long);
    assert_openai_error(st, &b, 504, None);
    assert_eq!(b["error"]["type"], "timeout_error", "{b}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    // Streaming: the 200 status went out with the first event, so the timeout is an error
    // event, then the end of the stream, and no finish chunk.
    let mut stream_req = long.clone();
    stream_req["stream"] = json!(true);
    let ev = read_events(open_stream(&s, "/v1/completions", &stream_req));
    assert_eq!(ev.last().unwrap(), "[DONE]", "{ev:?}");
    let err: Value = serde_json::from_str(&ev[ev.len() - 2]).unwrap();
    assert_eq!(err["error"]["type"], "timeout_error", "{err}");
    assert!(
        ev.len() < 150,
        "cut before its 200 tokens: {} events",
        ev.len()
    );
    assert!(
        ev[..ev.len() - 2]
            .iter()
            .map(|e| serde_json::from_str::<Value>(e).unwrap())
            .all(|c| c["choices"][0]["finish_reason"].is_null()),
        "{ev:?}"
    );
    // Both sequences were cancelled and their KV is back.
    s.wait_for(5, "the timed-out sequences freed", |s| {
        s.metric("bitnet_kv_sequences") == 0.0 && s.metric("bitnet_requests_processing") == 0.0
    });
    assert_eq!(s.metric("bitnet_requests_cancelled_total"), 2.0);
    assert_eq!(s.metric("bitnet_kv_cache_usage_ratio"), 0.0);
}

#[test]
fn health_is_503_while_warming_up() {
    // Each warm-up step sleeps 400 ms: long enough to ask in between.
    let s = Server::spawn(&["--step-delay-ms", "400"]);
    let (st, body) = s.get("/health");
    assert_eq!(st, 503, "{body}");
    assert!(body.contains("\"error\""));
    let (st, _) = s.post("/v1/completions", &json!({"prompt": "a"}));
    assert_eq!(st, 503);
    s.wait_ready();
}

#[test]
fn full_queue_gets_503_and_the_server_stays_healthy() {
    // llama.cpp's `-np 1` (not `-n p`): one running, one waiting, the third refused.
    let s = Server::start(&["-np", "1", "--queue", "1", "--step-delay-ms", "15"]);
    let long = json!({"prompt": "ROMEO:", "max_tokens": 150, "ignore_eos": true, "stream": true});
    // One running, one waiting.
    let mut a = open_stream(&s, "/v1/completions", &long);
    next_event(&mut a);
    let url = s.url("/v1/completions");
    let body = long.to_string();
    // Reads its whole stream (dropping the response would leave, and cancel it).
    let waiting = std::thread::spawn(move || {
        let r = ureq::post(&url).send_string(&body).ok()?;
        let status = r.status();
        let events = read_events(BufReader::new(r.into_reader()));
        Some((status, events.last().cloned()))
    });
    s.wait_for(10, "the second request waits", |s| {
        s.metric("bitnet_requests_deferred") == 1.0
    });
    let r = ureq::post(&s.url("/v1/completions"))
        .send_string(&json!({"prompt": "a", "max_tokens": 2}).to_string());
    match r {
        Err(ureq::Error::Status(503, resp)) => {
            assert_eq!(resp.header("retry-after"), Some("1"));
            let b: Value = resp.into_json().unwrap();
            assert_openai_error(503, &b, 503, None);
        }
        other => panic!("expected 503, got {:?}", other.map(|r| r.status())),
    }
    assert_eq!(s.get("/health").0, 200);
    assert!(s.metric("bitnet_requests_rejected_total") >= 1.0);
    // The client of the running request leaves; the waiting one runs to its end.
    drop(a);
    assert_eq!(
        waiting.join().unwrap(),
        Some((200, Some("[DONE]".to_owned())))
    );
    let (st, _) = s.post("/v1/completions", &json!({"prompt": "a", "max_tokens": 2}));
    assert_eq!(st, 200);
}

#[test]
fn a_client_leaving_mid_stream_frees_its_sequence() {
    let s = Server::start(&["--step-delay-ms", "10"]);
    let mut r = open_stream(
        &s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 200,
                "ignore_eos": true, "stream": true}),
    );
    for _ in 0..4 {
        next_event(&mut r);
    }
    assert_eq!(s.metric("bitnet_kv_sequences"), 1.0);
    assert!(s.metric("bitnet_kv_cache_usage_ratio") > 0.0);
    drop(r);
    s.wait_for(5, "the sequence is freed", |s| {
        s.metric("bitnet_kv_sequences") == 0.0 && s.metric("bitnet_requests_processing") == 0.0
    });
    assert_eq!(s.metric("bitnet_kv_cache_usage_ratio"), 0.0);
    assert_eq!(s.metric("bitnet_requests_cancelled_total"), 1.0);
    // It stopped well before its 200 tokens.
    assert!(s.metric("bitnet_tokens_predicted_total") < 150.0);
}

#[test]
fn sigterm_finishes_in_flight_requests_and_exits_zero() {
    let mut s = Server::start(&["--step-delay-ms", "10"]);
    let mut r = open_stream(
        &s,
        "/v1/completions",
        &json!({"prompt": "ROMEO:", "max_tokens": 40, "ignore_eos": true, "stream": true}),
    );
    next_event(&mut r);
    s.signal("-TERM");
    // The request in flight still ends normally.
    let ev = read_events(r);
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let finish: Value = serde_json::from_str(&ev[ev.len() - 2]).unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    let status = s.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn sigint_cancels_requests_past_the_deadline_and_exits_zero() {
    let mut s = Server::start(&["--step-delay-ms", "20", "--shutdown-timeout", "1"]);
    let mut r = open_stream(
        &s,
        "/v1/completions",
        &json!({"prompt": "ROMEO:", "max_tokens": 200, "ignore_eos": true, "stream": true}),
    );
    next_event(&mut r);
    let t0 = Instant::now();
    s.signal("-INT");
    let ev = read_events(r);
    assert_eq!(ev.last().unwrap(), "[DONE]");
    assert!(ev.len() < 150, "cancelled before its 200 tokens");
    let status = s.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
}

#[test]
fn context_shift_lets_a_request_generate_past_the_context() {
    let s = Server::start(&["--context-shift", "--keep", "4", "-c", "128"]);
    let body = json!({"prompt": "ROMEO:", "max_tokens": 300, "ignore_eos": true});
    let (st, b) = s.post("/v1/completions", &body);
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["usage"]["completion_tokens"], 300, "{b}");
    assert_eq!(b["choices"][0]["finish_reason"], "length", "{b}");
    // A prompt longer than the context is read through it, not refused with a 400.
    let long = "ROMEO: What light through yonder window breaks? ".repeat(20);
    let body = json!({"prompt": long, "max_tokens": 8, "ignore_eos": true});
    let (st, b) = s.post("/v1/completions", &body);
    assert_eq!(st, 200, "{b}");
    assert!(b["usage"]["prompt_tokens"].as_u64().unwrap() > 128, "{b}");
    assert_eq!(b["usage"]["completion_tokens"], 8, "{b}");
    let keep_all = Server::start(&["--context-shift", "--keep", "-1", "-c", "128"]);
    // Keeping the whole prompt leaves nothing to shift when the prompt is half the context
    // or more: the request's fault, a 400 (it was a 500 from the failed generation).
    let (st, b) = keep_all.post("/v1/completions", &body);
    assert_eq!(st, 400, "{b}");
    assert_eq!(b["error"]["code"], "context_length_exceeded", "{b}");
    assert_eq!(b["error"]["param"], "prompt", "{b}");
    let message = b["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("invalid option context policy: keeping ")
            && message.ends_with(
                " positions leaves too little of a 128-token context to shift (keep less than \
                 half)"
            ),
        "{b}"
    );
    drop(keep_all);
    // The KV is back in the pool once the request is done (the gauges are published after
    // the engine's step, which may end just after the answer went out).
    s.wait_for(5, "the KV back in the pool", |s| {
        s.metric("bitnet_kv_cache_usage_ratio") == 0.0
    });
    // A --keep that leaves nothing to shift is refused at start.
    let mut bad = Command::new(env!("CARGO_BIN_EXE_bitnet"))
        .args(["serve", "-m"])
        .arg(shipped_model())
        .args([
            "--port",
            "0",
            "-c",
            "128",
            "--context-shift",
            "--keep",
            "100",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = bad.wait().unwrap();
    let mut err = String::new();
    bad.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(!status.success() && err.contains("keep"), "{err}");
}

#[test]
fn attention_entropy_is_exported_only_when_asked_for() {
    let body = json!({"prompt": "ROMEO:", "max_tokens": 40, "ignore_eos": true});
    let off = Server::start(&[]);
    let (st, b) = off.post("/v1/completions", &body);
    assert_eq!(st, 200, "{b}");
    let (_, text) = off.get("/metrics");
    assert!(!text.contains("bitnet_attention_entropy_nats"), "{text}");
    drop(off);
    let on = Server::start(&["--attn-entropy", "--attn-entropy-every", "4"]);
    let (st, b) = on.post("/v1/completions", &body);
    assert_eq!(st, 200, "{b}");
    let (_, text) = on.get("/metrics");
    assert!(
        text.contains("# TYPE bitnet_attention_entropy_nats gauge"),
        "{text}"
    );
    // One sample per layer, each between 0 and ln(positions attended).
    let layers: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("bitnet_attention_entropy_nats{layer=\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(!layers.is_empty(), "{text}");
    for h in &layers {
        assert!(*h > 0.0 && *h < 256f64.ln(), "{h}: {text}");
    }
    assert!(
        text.contains("bitnet_attention_entropy_nats{layer=\"0\"}"),
        "{text}"
    );
}

#[test]
fn heavy_hitter_eviction_lets_a_request_generate_past_the_context() {
    let s = Server::start(&[
        "--kv-evict",
        "h2o",
        "--kv-budget",
        "64",
        "-c",
        "128",
        "--attn-entropy",
    ]);
    let body = json!({"prompt": "ROMEO:", "max_tokens": 300, "ignore_eos": true});
    let (st, b) = s.post("/v1/completions", &body);
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["usage"]["completion_tokens"], 300, "{b}");
    assert_eq!(b["choices"][0]["finish_reason"], "length", "{b}");
    s.wait_for(5, "the KV back in the pool", |s| {
        s.metric("bitnet_kv_cache_usage_ratio") == 0.0
    });
}

/// A chat template whose generation prompt ends in a space (BitNet's "Assistant: ") is
/// healed as the chat heals it: the space token is not part of the evaluated prompt, and the
/// reply does not begin with it.
#[test]
fn a_chat_prompt_ending_in_a_space_is_healed() {
    let s = Server::start(&["--chat-template", "bitnet"]);
    let (st, tokens) = s.post(
        "/tokenize",
        &json!({"content": "User: Hello there<|eot_id|>Assistant: ",
                "add_special": true, "parse_special": true}),
    );
    assert_eq!(st, 200, "{tokens}");
    let rendered = tokens["tokens"].as_array().unwrap().len();
    for seed in 1..4 {
        let (st, r) = s.post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "Hello there"}],
                    "max_tokens": 4, "seed": seed}),
        );
        assert_eq!(st, 200, "{r}");
        assert_eq!(
            r["usage"]["prompt_tokens"].as_u64().unwrap() as usize + 1,
            rendered,
            "the trailing space is healed: {r}"
        );
        let content = r["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(!content.starts_with(' '), "{content:?}");
    }
}
