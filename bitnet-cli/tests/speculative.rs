//! Speculative decoding from the command line: `generate`, `chat` and `serve` with the
//! shipped draft model (`-md`, llama.cpp's spelling) or prompt lookup give the greedy text
//! they give without (serve: requests decoded together, some speculating and some not);
//! the figures line says what was drafted; `bench --verify` and `bench --spec-text` print
//! their tables; bad settings and `perplexity` with a draft are refused with the reason.

mod common;

use std::path::PathBuf;

use common::server::Server;
use common::{bitnet, run_err, run_ok, stderr_of, stdout_of, tmp_dir};
use serde_json::json;

fn repo(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
}

const PROMPT: &str = "ROMEO:\nBut soft, what light through yonder window breaks?\n";

fn generate(n: &str, extra: &[&str]) -> (String, String) {
    let out = run_ok(
        bitnet()
            .args(["generate", "-m"])
            .arg(repo("models/shakespeare.gguf"))
            .args(["-p", PROMPT, "-n", n, "--temp", "0", "-t", "1", "--no-pin"])
            .args(extra),
    );
    (stdout_of(&out), stderr_of(&out))
}

#[test]
fn generate_gives_the_same_greedy_text_with_a_draft() {
    let (plain, _) = generate("120", &[]);
    let draft = repo("models/shakespeare-draft.gguf");
    let draft = draft.to_str().unwrap();
    for extra in [
        vec!["-md", draft],
        vec![
            "--model-draft",
            draft,
            "--draft-max",
            "4",
            "--draft-p-min",
            "0.2",
        ],
        vec!["--lookup-ngram", "2"],
    ] {
        let (text, err) = generate("120", &extra);
        assert_eq!(text, plain, "{extra:?}");
        assert!(
            err.contains("draft: ") && err.contains("accepted"),
            "{extra:?}: {err}"
        );
    }
    // Several prompts decoded together, speculating.
    let out = run_ok(
        bitnet()
            .args(["generate", "-m"])
            .arg(repo("models/shakespeare.gguf"))
            .args(["-p", PROMPT, "-p", "KING RICHARD III:\n", "--parallel", "2"])
            .args([
                "-n", "40", "--temp", "0", "-t", "1", "--no-pin", "-md", draft,
            ]),
    );
    let both = stdout_of(&out);
    let (first, _) = generate("40", &[]);
    assert!(both.starts_with(first.trim_end()), "{both}\n---\n{first}");
}

#[test]
fn chat_answers_the_same_with_a_draft() {
    let chat = |extra: &[&str]| {
        let mut cmd = bitnet();
        cmd.args(["chat", "-m"])
            .arg(repo("models/shakespeare.gguf"))
            .args(["--temp", "0", "-n", "48", "-t", "1", "--no-pin"])
            .args(extra)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"Good morrow, what news?\n")
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (plain, _) = chat(&[]);
    assert!(!plain.trim().is_empty());
    let draft = repo("models/shakespeare-draft.gguf");
    let (text, figures) = chat(&["-md", draft.to_str().unwrap(), "--draft-fixed", "-v"]);
    assert_eq!(text, plain);
    // -v's figures say what the draft did.
    assert!(figures.contains("tokens a verification"), "{figures}");
    assert_eq!(chat(&["--lookup-ngram", "3"]).0, plain);
}

#[test]
fn serve_speculates_inside_continuous_batching() {
    let draft = repo("models/shakespeare-draft.gguf");
    let plain = Server::start(&["--parallel", "4"]);
    // Drafts every step: with the adaptive length, whether a request verifies anything
    // would depend on what the server measured of its passes before it came.
    let with_model = Server::start(&[
        "--parallel",
        "4",
        "--model-draft",
        draft.to_str().unwrap(),
        "--draft-max",
        "6",
        "--draft-fixed",
    ]);
    let with_lookup = Server::start(&[
        "--parallel",
        "4",
        "--lookup-ngram",
        "2",
        "--draft-max",
        "6",
        "--draft-fixed",
    ]);
    let prompts = [
        "ROMEO:",
        "KING RICHARD III:\n",
        "First Citizen:\nWe are",
        "JULIET:\nO",
    ];
    let body = |p: &str, extra: serde_json::Value| {
        let mut b = json!({"prompt": p, "max_tokens": 40, "temperature": 0});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let want: Vec<String> = prompts
        .iter()
        .map(|p| {
            let (st, a) = plain.post("/v1/completions", &body(p, json!({})));
            assert_eq!(st, 200, "{a}");
            a["choices"][0]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    // All at once: speculating requests (one turning it off, one with a shorter draft)
    // share the server's batched steps.
    let extras = [
        json!({}),
        json!({"speculative.n_max": 0}),
        json!({"speculative.n_max": 2, "speculative.p_min": 0.1}),
        json!({}),
    ];
    for (what, spec) in [("draft model", &with_model), ("lookup", &with_lookup)] {
        let mut drafted_total = 0;
        std::thread::scope(|scope| {
            let handles: Vec<_> = prompts
                .iter()
                .zip(&extras)
                .map(|(p, e)| {
                    let b = body(p, e.clone());
                    scope.spawn(move || spec.post("/v1/completions", &b))
                })
                .collect();
            for (i, ((h, w), p)) in handles.into_iter().zip(&want).zip(&prompts).enumerate() {
                let (st, a) = h.join().unwrap();
                assert_eq!(st, 200, "{what}: {a}");
                let text = a["choices"][0]["text"].as_str().unwrap();
                assert_eq!(text, w, "{what}: prompt {p:?}");
                // llama.cpp's timings say what was drafted; the request that turned it off
                // drafted nothing.
                let drafted = a["timings"]["draft_n"].as_u64();
                if i == 1 {
                    assert_eq!(drafted, None, "{what}: {a}");
                }
                if let Some(n) = drafted {
                    assert!(a["timings"]["draft_n_accepted"].as_u64().unwrap() <= n);
                    drafted_total += n;
                }
            }
        });
        assert!(drafted_total > 0, "{what}: nothing was drafted");
        // /metrics counts them too.
        assert!(spec.metric("bitnet_draft_tokens_total") >= drafted_total as f64);
        assert!(
            spec.metric("bitnet_draft_tokens_accepted_total")
                <= spec.metric("bitnet_draft_tokens_total")
        );
        // The draft model proposes for every request; lookup only where a suffix recurs.
        if what == "draft model" {
            assert!(drafted_total >= 3, "{what}: {drafted_total}");
        }
    }
    // A bad value is a 400 naming the field.
    let (st, a) = with_model.post(
        "/v1/completions",
        &body("ROMEO:", json!({"speculative.p_min": 3})),
    );
    common::server::assert_openai_error(st, &a, 400, Some("speculative.p_min"));
}

#[test]
fn bench_prints_the_verification_and_generation_tables() {
    let out = run_ok(
        bitnet()
            .args(["bench", "-m"])
            .arg(repo("models/shakespeare.gguf"))
            .args(["--verify", "2,4", "-r", "2", "-t", "1"]),
    );
    let text = stdout_of(&out);
    assert!(text.contains("| positions in the pass |"), "{text}");
    for k in ["| 1 |", "| 2 |", "| 4 |"] {
        assert!(text.contains(k), "{k}: {text}");
    }
    let out = run_ok(
        bitnet()
            .args(["bench", "-m"])
            .arg(repo("models/shakespeare.gguf"))
            .args(["--lookup-ngram", "3", "--spec-text"])
            .arg(repo("models/shakespeare-ref/heldout.txt"))
            .args([
                "--spec-task",
                "copy",
                "--spec-prompts",
                "2",
                "-n",
                "24",
                "-r",
                "1",
            ])
            .args(["--spec-temp", "0", "-t", "1"]),
    );
    let text = stdout_of(&out);
    assert!(text.contains("| temp | tok/s without |"), "{text}");
    // Greedy output with lookup drafts is checked against greedy output without.
    assert!(text.contains("| yes |"), "{text}");
}

#[test]
fn bad_speculation_settings_are_refused() {
    let model = repo("models/shakespeare.gguf");
    let refused = |extra: &[&str]| {
        run_err(
            bitnet()
                .args(["generate", "-m"])
                .arg(&model)
                .args(["-p", "x", "-n", "4"])
                .args(extra),
        )
    };
    let e = refused(&["--draft-max", "4"]);
    assert!(e.contains("--model-draft FILE or --lookup-ngram N"), "{e}");
    let e = refused(&["--lookup-ngram", "2", "--draft-max", "0"]);
    assert!(e.contains("draft_max"), "{e}");
    let e = refused(&["--lookup-ngram", "2", "--draft-max", "300"]);
    assert!(e.contains("do not fit a pass"), "{e}");
    let e = refused(&["--lookup-ngram", "0"]);
    assert!(e.contains("lookup-ngram"), "{e}");
    // A draft model with another vocabulary.
    let other = tmp_dir().join("spec-other-vocab.gguf");
    run_ok(
        bitnet()
            .args(["gen-model", "--preset", "tiny", "-o"])
            .arg(&other),
    );
    let e = refused(&["-md", other.to_str().unwrap()]);
    assert!(e.contains("vocabulary"), "{e}");
    // bench: a speculation flag without a draft source is not silently ignored.
    let bench = |extra: &[&str]| {
        run_err(
            bitnet()
                .args(["bench", "-m"])
                .arg(&model)
                .args(["-r", "1"])
                .args(extra),
        )
    };
    let heldout = repo("models/shakespeare-ref/heldout.txt");
    let e = bench(&["--spec-text", heldout.to_str().unwrap()]);
    assert!(e.contains("--model-draft FILE or --lookup-ngram N"), "{e}");
    let e = bench(&["--draft-max", "4"]);
    assert!(e.contains("--model-draft FILE or --lookup-ngram N"), "{e}");
    let e = bench(&[
        "--lookup-ngram",
        "2",
        "--spec-text",
        heldout.to_str().unwrap(),
        "--spec-prompts",
        "0",
    ]);
    assert!(e.contains("--spec-prompts"), "{e}");
    // perplexity scores given text: nothing to draft.
    let e = run_err(
        bitnet()
            .args(["perplexity", "-m"])
            .arg(&model)
            .args(["-f"])
            .arg(repo("models/shakespeare-ref/heldout.txt"))
            .args(["--model-draft"])
            .arg(&model),
    );
    assert!(e.contains("proposes none"), "{e}");
    let e = run_err(
        bitnet()
            .args(["perplexity", "-m"])
            .arg(&model)
            .args(["-md"])
            .arg(&model),
    );
    assert!(e.contains("--model-draft"), "{e}");
}
