//! `--clean-input` end to end on the shipped model: `tokenize` and `generate` read the
//! cleaned text and say what it saved, `prose` leaves code as it is, a bad mode is refused;
//! `serve` cleans a completion's prompt and a chat's messages when a request (or the
//! server's flag) asks, reports it in `X-Clean-Input`, and reads exactly the tokens of the
//! text cleaned by hand.

mod common;

use common::server::Server;
use common::{bitnet, run_err, run_ok, shipped_model, stderr_of, stdout_of};
use serde_json::{Value, json};

/// Soft hyphens, zero-width spaces, a no-break space run, a BOM and a variation selector.
const DIRTY: &str = "To\u{00AD}mor\u{00AD}row\u{00A0}\u{00A0}and\u{200B} to\u{200B}mor\u{00AD}row\u{FEFF}, \u{2764}\u{FE0F} and   to-morrow";
/// The same, cleaned by hand.
const CLEAN: &str = "Tomorrow and tomorrow, \u{2764} and to-morrow";

fn ids(extra: &[&str], text: &str) -> (String, String) {
    let out = run_ok(
        bitnet()
            .args(["tokenize", "-m"])
            .arg(shipped_model())
            .args(extra)
            .args(["-p", text]),
    );
    (stdout_of(&out), stderr_of(&out))
}

#[test]
fn tokenize_reads_the_cleaned_text_and_says_what_it_saved() {
    let (clean_ids, _) = ids(&[], CLEAN);
    let (dirty_ids, quiet) = ids(&[], DIRTY);
    assert_ne!(clean_ids, dirty_ids);
    assert!(!quiet.contains("clean-input"), "off by default: {quiet}");
    let (got, err) = ids(&["--clean-input"], DIRTY);
    assert_eq!(got, clean_ids);
    let n = |s: &str| s.matches(',').count() + 1;
    let saved = n(&dirty_ids) - n(&clean_ids);
    assert!(saved > 0);
    assert!(
        err.contains(&format!(
            "{} -> {} tokens ({saved} saved)",
            n(&dirty_ids),
            n(&clean_ids)
        )),
        "{err}"
    );
    assert!(err.contains("clean-input (all): 7 invisible"), "{err}");
    let (_, err) = ids(&["--clean-input=prose"], DIRTY);
    assert!(err.contains("clean-input (prose)"), "{err}");
    // The vocabulary's unknown tokens are counted on request (the shipped one falls back to
    // bytes: none).
    let out = run_ok(
        bitnet()
            .args(["tokenize", "-m"])
            .arg(shipped_model())
            .args(["--show-unknown", "-p", DIRTY]),
    );
    assert!(stdout_of(&out).ends_with("Unknown tokens: 0\n"));
}

#[test]
fn generate_echoes_the_cleaned_prompt_and_prose_mode_keeps_code() {
    let code = "```\nlet  a\u{00A0}=\u{200B}1;\n```\n";
    let prompt = format!("Say\u{00A0}\u{00A0}it:\n{code}and  `x\u{200B}y`\u{00AD} now");
    let out = run_ok(
        bitnet()
            .args(["generate", "-m"])
            .arg(shipped_model())
            .args(["-n", "1", "--greedy", "--clean-input=prose", "-p", &prompt]),
    );
    let text = stdout_of(&out);
    assert!(
        text.starts_with(&format!("Say it:\n{code}and `x\u{200B}y` now")),
        "{text:?}"
    );
    assert!(stderr_of(&out).contains("clean-input (prose): 1 invisible and 3 whitespace"));
    let err = run_err(
        bitnet()
            .args(["generate", "-m"])
            .arg(shipped_model())
            .args(["--clean-input=some", "-p", "x"]),
    );
    assert!(err.contains("all or prose"), "{err}");
}

fn header(s: &Server, path: &str, body: &Value) -> (Option<String>, Value) {
    let r = ureq::post(&s.url(path))
        .send_string(&body.to_string())
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let h = r.header("x-clean-input").map(str::to_owned);
    let v: Value = serde_json::from_str(&r.into_string().unwrap()).unwrap();
    (h, v)
}

/// The prompt's tokens (all of them: `timings.prompt_n` leaves out what the cache held).
fn prompt_n(v: &Value) -> u64 {
    v["usage"]["prompt_tokens"]
        .as_u64()
        .expect("usage.prompt_tokens")
}

#[test]
fn serve_cleans_what_a_request_asks_and_says_what_it_saved() {
    let s = Server::start(&["--parallel", "1"]);
    let complete = |prompt: &str, clean: Value| {
        header(
            &s,
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": 1, "temperature": 0, "clean_input": clean}),
        )
    };
    let (none, plain) = complete(CLEAN, Value::Null);
    assert_eq!(none, None, "no clean-up asked, no header");
    let (h, cleaned) = complete(DIRTY, json!(true));
    let h = h.expect("X-Clean-Input");
    assert!(h.starts_with("mode=all; removed=7; whitespace="), "{h}");
    let (_, dirty) = complete(DIRTY, json!(false));
    let saved = prompt_n(&dirty) - prompt_n(&cleaned);
    assert!(
        saved > 0 && h.ends_with(&format!("tokens_saved={saved}")),
        "{h}"
    );
    assert_eq!(prompt_n(&cleaned), prompt_n(&plain));
    assert_eq!(cleaned["choices"][0]["text"], plain["choices"][0]["text"]);
    // A chat's messages, string and parts; the answer is the hand-cleaned chat's.
    let chat = |content: Value, clean: Value| {
        header(
            &s,
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": content}], "max_tokens": 3,
                    "temperature": 0, "clean_input": clean}),
        )
    };
    let (_, want) = chat(json!(CLEAN), Value::Null);
    let (h, got) = chat(json!([{"type": "text", "text": DIRTY}]), json!("prose"));
    assert!(
        h.expect("X-Clean-Input")
            .starts_with("mode=prose; removed=7")
    );
    assert_eq!(prompt_n(&got), prompt_n(&want));
    assert_eq!(
        got["choices"][0]["message"]["content"],
        want["choices"][0]["message"]["content"]
    );
    let (status, e) = s.post(
        "/v1/completions",
        &json!({"prompt": "x", "clean_input": "sometimes"}),
    );
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["param"], "clean_input");
}

#[test]
fn a_servers_flag_is_the_default_a_request_can_turn_off() {
    let s = Server::start(&["--parallel", "1", "--clean-input"]);
    let body = |clean: Value| json!({"prompt": DIRTY, "max_tokens": 1, "temperature": 0, "clean_input": clean});
    let (h, _) = header(&s, "/v1/completions", &body(Value::Null));
    assert!(h.expect("the server's default").starts_with("mode=all"));
    let (h, _) = header(&s, "/v1/completions", &body(json!(false)));
    assert_eq!(h, None);
}
