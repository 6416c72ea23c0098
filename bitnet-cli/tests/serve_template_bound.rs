//! A chat template from a file is untrusted code, and minijinja keeps no memory budget: a
//! template that doubles a string (or a list) in a loop or a recursive macro grows until an
//! allocation fails, which aborts the process that renders it. Such templates render in a
//! worker process under a memory limit: the request that set the template off gets an error
//! naming the memory budget, and the server (or the chat) lives on.
//!
//! Each `bitnet` here runs under `ulimit -v` so that a regression (the render back in the
//! serving process) fails the test by the process dying in a second, not by filling the
//! machine's memory first. Linux only: macOS does not enforce an address-space limit.
#![cfg(target_os = "linux")]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bitnet_core::chat::{Message, RenderJob, builtin};
use bitnet_gguf::{GgufFile, GgufWriter, LoadMode};
use common::server::{Server, assert_openai_error};
use common::{scratch, shipped_model, stderr_of, stdout_of, tmp_dir};
use serde_json::{Value, json};

/// A chat template that renders `role: content` lines, and on one of the trigger messages
/// first doubles something until memory runs out: a string with `~` or `+`, a list with `+`
/// (minijinja's lazy list concatenation materializes past a depth of 32), a string through a
/// recursive macro's argument (from a 1 MB `'x' * n`, which minijinja caps at 100 MB).
const HOSTILE: &str = r#"
{%- macro grow(s, n) -%}{%- if n > 0 -%}{{- grow(s ~ s, n - 1) -}}{%- else -%}{{- s|length -}}{%- endif -%}{%- endmacro -%}
{%- for m in messages -%}
{%- if m.content == 'boom-concat' -%}
{%- set ns = namespace(s='x') -%}{%- for i in range(64) -%}{%- set ns.s = ns.s ~ ns.s -%}{%- endfor -%}{{- ns.s|length -}}
{%- elif m.content == 'boom-plus' -%}
{%- set ns = namespace(s='x') -%}{%- for i in range(64) -%}{%- set ns.s = ns.s + ns.s -%}{%- endfor -%}{{- ns.s|length -}}
{%- elif m.content == 'boom-list' -%}
{%- set ns = namespace(l=[0]) -%}{%- for i in range(64) -%}{%- set ns.l = ns.l + ns.l -%}{%- endfor -%}{{- ns.l|length -}}
{%- elif m.content == 'boom-macro' -%}
{{- grow('x' * 1000000, 30) -}}
{%- endif -%}
{{- m.role ~ ': ' ~ m.content ~ '\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'assistant:' -}}{%- endif -%}"#;

const TRIGGERS: [&str; 4] = ["boom-concat", "boom-plus", "boom-list", "boom-macro"];

/// The address space each `bitnet` may use (KiB, for `ulimit -v`): room for a server and its
/// workers' own 1 GiB, far below what a runaway template would take.
const ULIMIT_KIB: &str = "4194304";

/// The shipped model with [`HOSTILE`] as its own `tokenizer.chat_template`.
fn hostile_model() -> &'static Path {
    static MODEL: OnceLock<PathBuf> = OnceLock::new();
    MODEL.get_or_init(|| {
        let f = GgufFile::open(shipped_model(), LoadMode::Read).unwrap();
        let mut md = f.metadata().clone();
        md.insert("tokenizer.chat_template", HOSTILE);
        let mut w = GgufWriter::new(Vec::new(), f.version(), &md, f.tensors(), false).unwrap();
        for t in f.tensors() {
            w.write_tensor_data(f.tensor_data(t)).unwrap();
        }
        let path = tmp_dir().join("hostile-template.gguf");
        std::fs::write(&path, w.finish().unwrap()).unwrap();
        path
    })
}

/// `bitnet ARGS` under the address-space limit (and few malloc arenas, whose reservations
/// count against it on a machine with many cores).
fn limited_bitnet(args: &[&str]) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(format!("ulimit -v {ULIMIT_KIB} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_bitnet"))
        .args(args)
        .env("MALLOC_ARENA_MAX", "2");
    cmd
}

fn start_server(model: &Path) -> Server {
    let model = model.to_str().unwrap();
    let child = limited_bitnet(&["serve", "-m", model, "--port", "0", "-t", "1", "--no-pin"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawning bitnet serve");
    let s = Server::attach(child);
    s.wait_ready();
    s
}

fn chat_request(content: &str) -> Value {
    json!({"messages": [{"role": "user", "content": content}], "max_tokens": 4})
}

#[test]
fn a_template_that_doubles_is_an_error_and_the_server_keeps_serving() {
    let mut s = start_server(hostile_model());
    for trigger in TRIGGERS {
        let t0 = Instant::now();
        let (st, b) = s.post("/v1/chat/completions", &chat_request(trigger));
        assert_openai_error(st, &b, 400, Some("messages"));
        let msg = b["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("ran out of its memory budget"),
            "{trigger}: {b}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{trigger}: {:?}",
            t0.elapsed()
        );
        assert!(s.child.try_wait().unwrap().is_none(), "the server lives");
        let (st, _) = s.get("/health");
        assert_eq!(st, 200, "after {trigger}");
    }
    // The same template still renders an ordinary conversation (in a fresh worker).
    let (st, b) = s.post("/v1/chat/completions", &chat_request("Hello"));
    assert_eq!(st, 200, "{b}");
    assert!(b["choices"][0]["message"]["content"].is_string(), "{b}");
    assert!(b["usage"]["prompt_tokens"].as_u64().unwrap() > 0, "{b}");
}

/// `bitnet chat` with the same template as a `--chat-template` file: the message that sets
/// it off ends a piped chat with the error (and status 1), after the earlier reply.
#[test]
fn a_chat_with_a_doubling_template_file_stops_with_the_error() {
    let dir = scratch("template-bound-chat");
    let file = dir.join("hostile.jinja");
    std::fs::write(&file, HOSTILE).unwrap();
    let model = shipped_model();
    let mut child = limited_bitnet(&[
        "chat",
        "-m",
        model.to_str().unwrap(),
        "--chat-template",
        file.to_str().unwrap(),
        "-n",
        "4",
        "-s",
        "7",
        "-t",
        "1",
        "-v",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Hello\nboom-concat\nWho art thou?\n")
        .unwrap();
    let t0 = Instant::now();
    let out: Output = child.wait_with_output().unwrap();
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{}: {err}", out.status);
    assert!(err.contains("ran out of its memory budget"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("prompt: ")).count(),
        1,
        "one reply before the error: {err}"
    );
    assert!(!stdout_of(&out).is_empty());
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
}

/// Per-render cost in this process and through a worker, for the docs (run with
/// `-- --ignored --nocapture`, in a release build for figures worth quoting).
#[test]
#[ignore]
fn render_cost_in_process_and_through_a_worker() {
    let f = GgufFile::open(shipped_model(), LoadMode::Read).unwrap();
    let shipped = f
        .metadata()
        .get("tokenizer.chat_template")
        .and_then(|v| v.as_str())
        .map_or_else(
            || builtin("bitnet").unwrap().source.to_owned(),
            str::to_owned,
        );
    let conversation = vec![
        Message::system("You are a helpful assistant"),
        Message::user("Hello"),
        Message::assistant("Hi there"),
        Message::user("Who are you"),
        Message::assistant("   I am an assistant   "),
        Message::user("Another question"),
    ];
    for (name, source) in [
        ("shipped model's", shipped),
        ("llama3", builtin("llama3").unwrap().source.to_owned()),
    ] {
        let job = RenderJob {
            name: name.into(),
            source,
            bos_token: "<|begin_of_text|>".into(),
            eos_token: "<|eot_id|>".into(),
            messages: serde_json::to_value(&conversation).unwrap(),
            tools: None,
            add_generation_prompt: true,
        };
        // The median of several rounds: the machine may be busy with other work.
        let (rounds, n) = (7, 500);
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let here = median(
            (0..rounds)
                .map(|_| {
                    let t0 = Instant::now();
                    for _ in 0..n {
                        std::hint::black_box(job.render().unwrap());
                    }
                    t0.elapsed().as_secs_f64() / f64::from(n) * 1e6
                })
                .collect(),
        );

        let t0 = Instant::now();
        let mut worker = Command::new(env!("CARGO_BIN_EXE_bitnet"))
            .args(["__render-template", "--memory-budget", "1073741824"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut to = worker.stdin.take().unwrap();
        let mut from = BufReader::new(worker.stdout.take().unwrap());
        let line = serde_json::to_string(&job).unwrap() + "\n";
        let mut answer = String::new();
        let mut ask = || {
            to.write_all(line.as_bytes()).unwrap();
            answer.clear();
            from.read_line(&mut answer).unwrap();
            assert!(answer.starts_with("{\"Text\""), "{answer}");
        };
        ask();
        let first = t0.elapsed().as_secs_f64() * 1e6;
        let there = median(
            (0..rounds)
                .map(|_| {
                    let t0 = Instant::now();
                    for _ in 0..n {
                        ask();
                    }
                    t0.elapsed().as_secs_f64() / f64::from(n) * 1e6
                })
                .collect(),
        );
        drop(to);
        worker.wait().unwrap();
        println!(
            "{name} template: {here:.1} µs a render in process, {there:.1} µs through a worker \
             (+{:.1} µs); starting a worker and its first render {first:.0} µs",
            there - here
        );
    }
}
