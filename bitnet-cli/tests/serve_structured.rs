//! Structured output through `bitnet serve`: `response_format` (json_object, json_schema),
//! llama.cpp's `json_schema` and `grammar` fields, and tool calls (required, named,
//! streamed, tool results in the history), on the shipped model: a weak model, so every
//! answer that parses does so because of the constraint.

mod common;

use common::server::{Server, assert_openai_error, open_stream, read_events};
use serde_json::{Value, json};

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "mood": {"enum": ["happy", "sad", "angry"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3}
        },
        "required": ["name", "age", "mood"]
    })
}

/// The checks of `person_schema` by hand (the core tests validate with an independent
/// validator).
fn assert_person(v: &Value) {
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"));
    assert!(
        o.keys()
            .all(|k| ["name", "age", "mood", "tags"].contains(&k.as_str())),
        "{v}"
    );
    assert!(
        v["name"].as_str().is_some_and(|s| s.chars().count() <= 12),
        "{v}"
    );
    assert!(v["age"].as_u64().is_some_and(|a| a <= 150), "{v}");
    assert!(
        ["happy", "sad", "angry"].contains(&v["mood"].as_str().unwrap()),
        "{v}"
    );
    if let Some(t) = o.get("tags") {
        assert!(t.as_array().is_some_and(|a| a.len() <= 3), "{v}");
    }
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "The weather of a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 16},
                "unit": {"enum": ["celsius", "fahrenheit"]}
            },
            "required": ["city", "unit"]
        }
    }})
}

fn time_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 8}},
                       "required": ["zone"]}
    }})
}

fn assert_weather_args(args: &str) {
    let v: Value = serde_json::from_str(args).unwrap_or_else(|e| panic!("{args}: {e}"));
    assert!(
        v["city"].as_str().is_some_and(|c| c.chars().count() <= 16),
        "{v}"
    );
    assert!(
        ["celsius", "fahrenheit"].contains(&v["unit"].as_str().unwrap()),
        "{v}"
    );
    assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
}

#[test]
fn json_schema_answers_parse_and_follow_the_schema() {
    let s = Server::start(&["-c", "1024"]);
    let mut finished = 0;
    for (seed, temperature) in [(1, 0.0), (2, 0.8), (3, 1.5), (4, 1.0)] {
        let (st, r) = s.post(
            "/v1/chat/completions",
            &json!({
                "messages": [{"role": "user", "content": "Who art thou?"}],
                "response_format": {"type": "json_schema",
                    "json_schema": {"name": "person", "schema": person_schema(), "strict": true}},
                "temperature": temperature, "seed": seed, "max_tokens": 200, "n": 2,
            }),
        );
        assert_eq!(st, 200, "{r}");
        for c in r["choices"].as_array().unwrap() {
            let text = c["message"]["content"].as_str().unwrap();
            match c["finish_reason"].as_str().unwrap() {
                "stop" => {
                    let v: Value =
                        serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
                    assert_person(&v);
                    finished += 1;
                }
                "length" => assert!(serde_json::from_str::<Value>(text).is_err(), "{text}"),
                other => panic!("finish reason {other}"),
            }
        }
    }
    assert!(
        finished >= 6,
        "only {finished} of 8 answers ended within 200 tokens"
    );

    // json_object: an object; llama.cpp's top-level json_schema; a completion too.
    let (st, r) = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "x"}],
                "response_format": {"type": "json_object"}, "temperature": 0, "max_tokens": 300}),
    );
    assert_eq!(st, 200, "{r}");
    if r["choices"][0]["finish_reason"] == "stop" {
        let text = r["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(
            serde_json::from_str::<Value>(text).unwrap().is_object(),
            "{text}"
        );
    }
    let (st, r) = s.post(
        "/v1/completions",
        &json!({"prompt": "ROMEO:", "json_schema": person_schema(), "seed": 5, "max_tokens": 200}),
    );
    assert_eq!(st, 200, "{r}");
    if r["choices"][0]["finish_reason"] == "stop" {
        assert_person(&serde_json::from_str(r["choices"][0]["text"].as_str().unwrap()).unwrap());
    }
}

#[test]
fn a_gbnf_grammar_and_a_streamed_schema_hold() {
    let s = Server::start(&[]);
    for seed in 1..6 {
        let (st, r) = s.post(
            "/v1/completions",
            &json!({"prompt": "ROMEO: Art thou", "grammar": "root ::= (\"yes\" | \"no\") \", \" [a-z]{2,5} \"!\"",
                    "seed": seed, "temperature": 1.2}),
        );
        assert_eq!(st, 200, "{r}");
        let text = r["choices"][0]["text"].as_str().unwrap();
        let re = regex_like(text);
        assert!(re, "{text:?}");
        assert_eq!(r["choices"][0]["finish_reason"], "stop", "{r}");
    }
    let events = read_events(open_stream(
        &s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "stream": true, "seed": 9,
                "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": person_schema()}},
                "max_tokens": 200}),
    ));
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    let reason = chunks
        .iter()
        .find_map(|c| c["choices"][0]["finish_reason"].as_str())
        .unwrap();
    if reason == "stop" {
        assert_person(&serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}")));
    } else {
        assert_eq!(reason, "length");
    }
}

/// `(yes|no), [a-z]{2,5}!` without a regex crate.
fn regex_like(text: &str) -> bool {
    let Some(rest) = text
        .strip_prefix("yes, ")
        .or_else(|| text.strip_prefix("no, "))
    else {
        return false;
    };
    let Some(word) = rest.strip_suffix('!') else {
        return false;
    };
    (2..=5).contains(&word.len()) && word.bytes().all(|b| b.is_ascii_lowercase())
}

#[test]
fn structured_output_faults_are_400s_that_name_the_field() {
    let s = Server::start(&[]);
    let chat = |extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        s.post("/v1/chat/completions", &body)
    };
    let (st, r) = chat(json!({"response_format": {"type": "bogus"}}));
    assert_openai_error(st, &r, 400, Some("response_format.type"));
    let (st, r) = chat(json!({"response_format": {"type": "json_schema",
        "json_schema": {"name": "n", "schema": {"type": "object", "not": {"type": "null"}}}}}));
    assert_openai_error(st, &r, 400, Some("response_format"));
    assert_eq!(r["error"]["code"], "unsupported_schema_keyword", "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("\"not\""),
        "{r}"
    );
    let (st, r) =
        chat(json!({"response_format": {"type": "json_schema", "json_schema": {"schema": 3}}}));
    assert_openai_error(st, &r, 400, Some("response_format.json_schema.schema"));
    let (st, r) = chat(json!({"grammar": "root ::= undefined-rule"}));
    assert_openai_error(st, &r, 400, Some("grammar"));
    let (st, r) = chat(json!({"grammar": "root ::= \"a\"", "json_schema": {"type": "object"}}));
    assert_openai_error(st, &r, 400, None);
    let (st, r) = chat(
        json!({"tools": [weather_tool()], "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
    );
    assert_openai_error(st, &r, 400, Some("tool_choice"));
    let (st, r) = chat(json!({"tools": "get_weather"}));
    assert_openai_error(st, &r, 400, Some("tools"));
    let (st, r) = chat(json!({"tool_choice": "required"}));
    assert_openai_error(st, &r, 400, Some("tool_choice"));
    // The server still answers.
    let (st, r) = chat(json!({}));
    assert_eq!(st, 200, "{r}");
}

#[test]
fn required_and_named_tool_calls_always_parse() {
    let s = Server::start(&["-c", "2048"]);
    let tools = json!([weather_tool(), time_tool()]);
    for (seed, choice) in [
        (1, json!("required")),
        (2, json!("required")),
        (
            3,
            json!({"type": "function", "function": {"name": "get_weather"}}),
        ),
        (
            4,
            json!({"type": "function", "function": {"name": "get_weather"}}),
        ),
    ] {
        let named = choice.is_object();
        let (st, r) = s.post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "Weather in Verona?"}],
                    "tools": tools, "tool_choice": choice, "parallel_tool_calls": false,
                    "seed": seed, "temperature": 1.0, "max_tokens": 400}),
        );
        assert_eq!(st, 200, "{r}");
        let c = &r["choices"][0];
        assert_eq!(c["finish_reason"], "tool_calls", "{r}");
        let calls = c["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{r}");
        let call = &calls[0];
        assert_eq!(call["type"], "function");
        assert!(
            call["id"].as_str().is_some_and(|i| i.starts_with("call_")),
            "{call}"
        );
        let name = call["function"]["name"].as_str().unwrap();
        let args = call["function"]["arguments"].as_str().unwrap();
        if named || name == "get_weather" {
            assert_eq!(name, "get_weather");
            assert_weather_args(args);
        } else {
            assert_eq!(name, "get_time");
            let v: Value = serde_json::from_str(args).unwrap();
            assert!(v["zone"].is_string(), "{v}");
        }
    }
}

#[test]
fn streamed_tool_calls_reassemble_and_results_go_back_in() {
    let s = Server::start(&["-c", "2048"]);
    let body = json!({"messages": [{"role": "user", "content": "Weather in Verona?"}],
        "tools": [weather_tool()], "tool_choice": "required", "parallel_tool_calls": false,
        "stream": true, "seed": 11, "max_tokens": 400});
    let events = read_events(open_stream(&s, "/v1/chat/completions", &body));
    assert_eq!(events.last().unwrap(), "[DONE]");
    let (mut id, mut name, mut args) = (String::new(), String::new(), String::new());
    let mut reason = None;
    let mut fragments = 0;
    for e in &events[..events.len() - 1] {
        let c: Value = serde_json::from_str(e).unwrap();
        let choice = &c["choices"][0];
        if let Some(calls) = choice["delta"]["tool_calls"].as_array() {
            fragments += 1;
            let d = &calls[0];
            assert_eq!(d["index"], 0);
            if let Some(i) = d["id"].as_str() {
                id = i.to_owned();
            }
            if let Some(n) = d["function"]["name"].as_str() {
                name = n.to_owned();
            }
            args.push_str(d["function"]["arguments"].as_str().unwrap_or(""));
        }
        if let Some(r) = choice["finish_reason"].as_str() {
            reason = Some(r.to_owned());
        }
    }
    assert_eq!(reason.as_deref(), Some("tool_calls"));
    assert!(fragments >= 2, "the arguments come in fragments");
    assert!(id.starts_with("call_"));
    assert_eq!(name, "get_weather");
    assert_weather_args(&args);

    // The call and its result in the history: the conversation goes on.
    let (st, r) = s.post(
        "/v1/chat/completions",
        &json!({"messages": [
            {"role": "user", "content": "Weather in Verona?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": id, "type": "function", "function": {"name": name, "arguments": args}}]},
            {"role": "tool", "tool_call_id": id, "name": "get_weather", "content": "{\"temp\": 21}"}
        ], "tools": [weather_tool()], "max_tokens": 8, "seed": 1}),
    );
    assert_eq!(st, 200, "{r}");
    assert!(r["choices"][0]["finish_reason"].is_string(), "{r}");
}

/// Required tool calls with `max_tokens` 200 at temperature 1.2, parallel calls allowed: the
/// list of calls closes inside the budget every time (a call the budget cannot finish is
/// never started), so every answer arrives as `tool_calls` with `finish_reason`
/// `tool_calls`. Before budget-aware closing, the list ran on until the budget cut it (6 of
/// 6 such requests came back as `length` with the raw text).
#[test]
fn required_tool_calls_close_inside_max_tokens() {
    let s = Server::start(&["-c", "2048", "--parallel", "8"]);
    let tools = json!([weather_tool(), time_tool()]);
    let seeds: Vec<u64> = (1..=30).collect();
    let answers: Vec<(u64, u16, Value)> = std::thread::scope(|scope| {
        let workers: Vec<_> = seeds
            .chunks(8)
            .map(|chunk| {
                let (s, tools) = (&s, &tools);
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|&seed| {
                            let (st, r) = s.post(
                                "/v1/chat/completions",
                                &json!({"messages": [{"role": "user", "content": "Weather in Verona and the time in Rome?"}],
                                        "tools": tools, "tool_choice": "required",
                                        "seed": seed, "temperature": 1.2, "max_tokens": 200}),
                            );
                            (seed, st, r)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    assert_eq!(answers.len(), 30);
    for (seed, st, r) in answers {
        assert_eq!(st, 200, "seed {seed}: {r}");
        let c = &r["choices"][0];
        assert_eq!(c["finish_reason"], "tool_calls", "seed {seed}: {r}");
        assert!(
            r["usage"]["completion_tokens"].as_u64().unwrap() <= 200,
            "{r}"
        );
        let calls = c["message"]["tool_calls"].as_array().unwrap();
        assert!(!calls.is_empty(), "seed {seed}: {r}");
        for call in calls {
            let args = call["function"]["arguments"].as_str().unwrap();
            match call["function"]["name"].as_str().unwrap() {
                "get_weather" => assert_weather_args(args),
                name => {
                    assert_eq!(name, "get_time", "seed {seed}: {r}");
                    let v: Value = serde_json::from_str(args).unwrap();
                    assert!(v["zone"].is_string(), "seed {seed}: {v}");
                }
            }
        }
    }
}
