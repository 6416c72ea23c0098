//! The chat page of `bitnet serve` (`/`, its assets under `/webui/`, `--no-webui`) and
//! `GET /props`, over HTTP: what the browser is sent and with which headers. The page's
//! behaviour in a browser is tested by scripts/browser_test.py; the last test here is only
//! a cheap guard on the page's sources.

mod common;

use std::path::PathBuf;

use common::server::{Server, assert_openai_error};
use serde_json::Value;

/// A GET's status, headers of interest and body; `headers`: extra request headers.
struct Got {
    status: u16,
    content_type: String,
    csp: String,
    nosniff: bool,
    etag: Option<String>,
    body: String,
}

fn get(s: &Server, path: &str, headers: &[(&str, &str)]) -> Got {
    let mut req = ureq::get(&s.url(path));
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let r = match req.call() {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("GET {path}: {e}"),
    };
    let header = |name: &str| r.header(name).unwrap_or("").to_owned();
    Got {
        status: r.status(),
        content_type: header("content-type"),
        csp: header("content-security-policy"),
        nosniff: r.header("x-content-type-options") == Some("nosniff"),
        etag: r.header("etag").map(str::to_owned),
        body: r.into_string().unwrap(),
    }
}

fn webui_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("webui")
}

/// The page's files on disk: (name, text).
fn sources() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(webui_dir())
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// Every `"/webui/..."` the page names, and every `from "./..."` a script imports.
fn referenced_assets(html: &str, scripts: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for part in html.split("\"/webui/").skip(1) {
        out.push(format!("/webui/{}", part.split('"').next().unwrap()));
    }
    for js in scripts {
        for part in js.split("from \"./").skip(1) {
            out.push(format!("/webui/{}", part.split('"').next().unwrap()));
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn the_page_and_its_assets_load_with_a_strict_csp() {
    let s = Server::start(&[]);
    let page = get(&s, "/", &[]);
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(page.content_type, "text/html; charset=utf-8");
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "img-src 'self' data:",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
        "require-trusted-types-for 'script'",
    ] {
        assert!(
            page.csp.split(';').any(|d| d.trim() == directive),
            "CSP lacks {directive:?}: {}",
            page.csp
        );
    }
    assert!(!page.csp.contains("unsafe"), "{}", page.csp);
    assert!(page.nosniff);
    // The hooks the browser test drives (docs/web.md).
    for hook in [
        "id=\"prompt\"",
        "id=\"send\"",
        "id=\"stop\"",
        "id=\"messages\"",
        "id=\"conversations\"",
        "id=\"model-name\"",
        "id=\"ctx-size\"",
        "id=\"ctx-warning\"",
        "id=\"api-key-dialog\"",
        "id=\"import-conv\"",
    ] {
        assert!(page.body.contains(hook), "the page lacks {hook}");
    }

    let served: Vec<(String, Got)> = {
        let mut scripts = Vec::new();
        let mut got = Vec::new();
        // Two passes: the page's own references, then what the scripts import.
        for _ in 0..2 {
            for path in referenced_assets(&page.body, &scripts) {
                if got.iter().any(|(p, _)| p == &path) {
                    continue;
                }
                let g = get(&s, &path, &[]);
                if path.ends_with(".js") {
                    scripts.push(g.body.clone());
                }
                got.push((path, g));
            }
        }
        got
    };
    assert!(served.len() >= 2, "the page names no assets");
    for (path, g) in &served {
        assert_eq!(g.status, 200, "{path}: {}", g.body);
        let want = match path.rsplit('.').next() {
            Some("js") => "text/javascript; charset=utf-8",
            Some("css") => "text/css; charset=utf-8",
            other => panic!("{path}: an asset of unexpected kind {other:?}"),
        };
        assert_eq!(g.content_type, want, "{path}");
        assert!(g.nosniff, "{path}");
    }
    // Every file of webui/ is embedded and reachable: a new file not added to the binary
    // would load on disk but 404 here.
    for (name, text) in sources() {
        if name == "index.html" {
            continue;
        }
        let g = get(&s, &format!("/webui/{name}"), &[]);
        assert_eq!(g.status, 200, "webui/{name} is not served");
        assert_eq!(g.body, text, "webui/{name} is served stale");
    }
    assert_eq!(get(&s, "/webui/nothing.js", &[]).status, 404);
    // A POST to the page is a 405 that names the methods it takes, as the API's routes do.
    let (status, body) = s.post("/", &Value::Null);
    assert_openai_error(status, &body, 405, None);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("GET"),
        "{body}"
    );

    // The browser revalidates; an unchanged page costs a 304.
    let tag = page.etag.expect("the page has an ETag");
    let again = get(&s, "/", &[("If-None-Match", &tag)]);
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    assert_eq!(get(&s, "/", &[("If-None-Match", "\"other\"")]).status, 200);
}

#[test]
fn no_webui_leaves_the_root_a_404() {
    let s = Server::start(&["--no-webui"]);
    for path in ["/", "/webui/app.js"] {
        let g = get(&s, path, &[]);
        assert_eq!(g.status, 404, "{path}: {}", g.body);
        let body: Value = serde_json::from_str(&g.body).unwrap();
        assert_openai_error(g.status, &body, 404, None);
    }
    // The API itself is unchanged.
    assert_eq!(s.get("/v1/models").0, 200);
    assert_eq!(s.get("/props").0, 200);
}

#[test]
fn props_gives_the_model_its_context_and_the_defaults() {
    let s = Server::start(&["--alias", "bard", "-n", "17", "--parallel", "3"]);
    let (status, text) = s.get("/props");
    assert_eq!(status, 200, "{text}");
    let p: Value = serde_json::from_str(&text).unwrap();
    let (_, models) = s.get("/v1/models");
    let models: Value = serde_json::from_str(&models).unwrap();
    let n_ctx = &models["data"][0]["meta"]["n_ctx"];
    assert!(n_ctx.as_u64().is_some_and(|n| n > 0), "{models}");
    assert_eq!(p["model"], "bard", "{p}");
    assert_eq!(&p["n_ctx"], n_ctx, "{p}");
    assert_eq!(p["total_slots"], 3, "{p}");
    let d = &p["default_generation_settings"];
    assert_eq!(&d["n_ctx"], n_ctx, "{p}");
    assert_eq!(d["params"]["n_predict"], 17, "{p}");
    for k in ["temperature", "top_p", "top_k", "min_p"] {
        assert!(d["params"][k].is_number(), "{k}: {p}");
    }
    // What /props calls the defaults is what a request that names none gets: the same seed
    // and settings give the same text as a request that spells them out.
    let ask = |extra: Value| {
        let mut body = serde_json::json!({
            "messages": [{"role": "user", "content": "ROMEO:"}],
            "max_tokens": 12, "seed": 5,
        });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, r) = s.post("/v1/chat/completions", &body);
        assert_eq!(status, 200, "{r}");
        r["choices"][0]["message"]["content"].clone()
    };
    let params = &d["params"];
    let spelled = serde_json::json!({
        "temperature": params["temperature"], "top_p": params["top_p"],
        "top_k": params["top_k"], "min_p": params["min_p"],
        "repeat_penalty": params["repeat_penalty"],
    });
    assert_eq!(ask(serde_json::json!({})), ask(spelled));
}

/// The page sends no `max_tokens` unless its field is filled (scripts/browser_test.py's step
/// l checks what it sends), so the server's default decides how long a reply may be: the
/// reply budget, which leaves the shipped model's 256-token context room for a conversation
/// sent back whole at every turn (issue 57: a reply took the 236 tokens its first prompt
/// left, and the second turn got "the context holds 256").
#[test]
fn three_turns_without_max_tokens_fit_the_context() {
    let s = Server::start(&[]);
    let (_, props) = s.get("/props");
    let props: Value = serde_json::from_str(&props).unwrap();
    let budget = &props["default_generation_settings"]["params"]["n_predict"];
    assert_eq!(budget, 32, "{props}");
    let mut messages: Vec<Value> = Vec::new();
    for (turn, text) in ["Who art thou?", "Speak of love.", "Farewell, good friend."]
        .into_iter()
        .enumerate()
    {
        messages.push(serde_json::json!({"role": "user", "content": text}));
        let body = serde_json::json!({"messages": messages, "seed": turn});
        let (status, r) = s.post("/v1/chat/completions", &body);
        assert_eq!(status, 200, "turn {}: {r}", turn + 1);
        let usage = &r["usage"];
        assert!(
            usage["completion_tokens"].as_u64().unwrap() <= 32,
            "turn {}: {r}",
            turn + 1
        );
        // The shipped model never ends its turn: the budget ends it, as OpenAI says it.
        assert_eq!(r["choices"][0]["finish_reason"], "length", "{r}");
        let reply = r["choices"][0]["message"]["content"].clone();
        messages.push(serde_json::json!({"role": "assistant", "content": reply}));
        if turn == 2 {
            let used = usage["total_tokens"].as_u64().unwrap();
            assert!(used + 32 <= 256, "room for a fourth reply: {r}");
        }
    }
}

#[test]
fn with_an_api_key_the_page_loads_but_its_data_needs_the_key() {
    let s = Server::start(&["--api-key", "sesame"]);
    let page = get(&s, "/", &[]);
    assert_eq!(page.status, 200, "{}", page.body);
    for path in referenced_assets(&page.body, &[]) {
        assert_eq!(get(&s, &path, &[]).status, 200, "{path}");
    }
    for path in ["/props", "/v1/models"] {
        let g = get(&s, path, &[]);
        let body: Value = serde_json::from_str(&g.body).unwrap();
        assert_openai_error(g.status, &body, 401, None);
        let g = get(&s, path, &[("Authorization", "Bearer sesame")]);
        assert_eq!(g.status, 200, "{path}: {}", g.body);
    }
    let g = get(&s, "/props", &[("Authorization", "Bearer wrong")]);
    assert_eq!(g.status, 401);
}

/// A guard, not the proof (the browser test is): the page's scripts never turn a string
/// into HTML or code, and the HTML holds no inline script, style or handler, so the CSP
/// need not allow any.
#[test]
fn the_page_never_parses_strings_as_html_or_code() {
    const SINKS: [&str; 10] = [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        "createContextualFragment",
        "DOMParser",
        "srcdoc",
        "setAttribute(\"on",
    ];
    let files = sources();
    assert!(files.iter().any(|(n, _)| n.ends_with(".js")));
    for (name, text) in &files {
        for sink in SINKS {
            assert!(!text.contains(sink), "webui/{name} uses {sink}");
        }
        if name.ends_with(".html") {
            let tags = text.matches("<script").count();
            let external = text
                .matches("<script type=\"module\" src=\"/webui/")
                .count();
            assert_eq!(tags, external, "webui/{name} holds an inline script");
            let lower = text.to_ascii_lowercase();
            assert!(
                !lower.contains(" style="),
                "webui/{name}: a style attribute"
            );
            assert!(
                !lower.contains("<style"),
                "webui/{name}: an inline style sheet"
            );
            assert!(
                !lower
                    .split(|c: char| c.is_whitespace())
                    .any(|w| w.starts_with("on") && w.contains('=')),
                "webui/{name}: an inline event handler"
            );
            assert!(!lower.contains("javascript:"), "webui/{name}");
        }
    }
}
