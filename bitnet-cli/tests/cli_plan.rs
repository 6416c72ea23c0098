//! `bitnet calibrate` and `--plan` end to end on the shipped (trained) model: calibrate
//! writes a plan within its budget that is cheaper than f16; generate, chat, perplexity,
//! bench and serve's engine run it; perplexity measures about the KL divergence calibrate
//! promised on the same text; bad plans and conflicting flags are clear errors.

mod common;

use std::path::{Path, PathBuf};

use common::{bitnet, run_err, run_ok, shipped_model, shipped_perplexity, stderr_of, stdout_of};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/text/tinyshakespeare.txt")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bitnet-cli-plan-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The first `n` bytes of the corpus (whole lines), as a file: calibration text.
fn text_file(dir: &Path, n: usize) -> PathBuf {
    let text = std::fs::read_to_string(corpus()).unwrap();
    let cut = text[..n].rfind('\n').unwrap();
    let path = dir.join("calib.txt");
    std::fs::write(&path, &text[..cut + 1]).unwrap();
    path
}

/// Writes a plan of `layers` (K, V, activations) stored with `rotate` to `path`, as a user
/// would by hand.
fn write_plan(path: &Path, rotate: &str, layers: &[(&str, &str, &str)]) -> PathBuf {
    let layers: Vec<String> = layers
        .iter()
        .map(|(k, v, a)| format!(r#"{{"k": "{k}", "v": "{v}", "acts": "{a}"}}"#))
        .collect();
    std::fs::write(
        path,
        format!(
            r#"{{"format": "bitnet-precision-plan", "version": 1, "kv_rotate": "{rotate}", "layers": [{}]}}"#,
            layers.join(", ")
        ),
    )
    .unwrap();
    path.to_owned()
}

fn calibrate(dir: &Path, text: &Path, budget: &str) -> (PathBuf, String) {
    let plan = dir.join(format!("plan-{budget}.json"));
    let out = run_ok(
        bitnet()
            .args(["calibrate", "-m"])
            .arg(shipped_model())
            .arg("-f")
            .arg(text)
            .args([
                "--samples",
                "4",
                "-c",
                "128",
                "-t",
                "2",
                "--max-kld",
                budget,
                "-o",
            ])
            .arg(&plan)
            .arg("--compare-uniform"),
    );
    (plan, stdout_of(&out))
}

/// `KV N bytes a token` and `KL divergence X` of calibrate's summary.
fn summary(stdout: &str) -> (u64, f64) {
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("KV ") && l.contains("bytes a token"))
        .unwrap_or_else(|| panic!("no summary: {stdout}"));
    let bytes = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let kld = line
        .rsplit("KL divergence ")
        .next()
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    (bytes, kld)
}

#[test]
fn calibrate_writes_a_plan_within_budget_that_every_front_end_runs() {
    let dir = scratch("fronts");
    let text = text_file(&dir, 40_000);
    // f16 on 4 layers x 2 KV heads x 64: 4 * 2 * (128 + 128) bytes a token.
    let f16_bytes = 4 * 2 * 256;
    let (tight, tight_out) = calibrate(&dir, &text, "0");
    let (mid, mid_out) = calibrate(&dir, &text, "0.003");
    let (tight_bytes, tight_kld) = summary(&tight_out);
    assert_eq!((tight_bytes, tight_kld), (f16_bytes, 0.0), "{tight_out}");
    let (mid_bytes, mid_kld) = summary(&mid_out);
    assert!(mid_kld <= 0.003, "{mid_out}");
    assert!(
        mid_bytes < f16_bytes / 2,
        "a 0.003 budget should halve f16: {mid_out}"
    );
    // The table has a row a layer, a column a setting.
    assert!(mid_out.contains("| 3 |") && mid_out.contains("K b1") && mid_out.contains("acts int4"));
    // The cheapest single pair as accurate as the plan is no cheaper than the plan.
    let cmp = mid_out
        .lines()
        .find(|l| l.starts_with("the cheapest single pair"))
        .unwrap_or_else(|| panic!("no comparison: {mid_out}"));
    let pair_bytes: u64 = cmp
        .split(" at ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(mid_bytes <= pair_bytes, "{cmp}");
    let _ = tight;

    // generate and chat run it (the plan is named on stderr); the text differs from f16's
    // only as the budget allows, so both produce text.
    let generate = |extra: &[&str]| {
        run_ok(
            bitnet()
                .args(["generate", "-m"])
                .arg(shipped_model())
                .args(["-p", "ROMEO:", "-n", "16", "--greedy", "-t", "2"])
                .args(extra),
        )
    };
    let planned = generate(&["--plan", mid.to_str().unwrap()]);
    assert!(
        stderr_of(&planned).contains("plan "),
        "{}",
        stderr_of(&planned)
    );
    assert!(stdout_of(&planned).len() > 10);
    // An all-f16 plan gives the f16 run's text exactly.
    assert_eq!(
        stdout_of(&generate(&["--plan", tight.to_str().unwrap()])),
        stdout_of(&generate(&[]))
    );

    // perplexity with the plan against the f16 base on the calibration text reports about
    // what calibrate measured (same windows: -c 128, the first 4).
    let base = dir.join("base.kld");
    let perplexity =
        |extra: &[&str]| run_ok(shipped_perplexity(&text, 128, 4, 2, &base).args(extra));
    perplexity(&[]);
    let out = perplexity(&["--kl-divergence", "--plan", mid.to_str().unwrap()]);
    let stdout = stdout_of(&out);
    let kld: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Mean KLD: "))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no KLD in perplexity's output: {stdout}"));
    assert!(
        (kld - mid_kld).abs() <= 1e-4 + 0.05 * mid_kld,
        "perplexity says {kld}, calibrate {mid_kld}"
    );

    // bench runs it and labels its rows.
    let out = run_ok(
        bitnet()
            .args(["bench", "-m"])
            .arg(shipped_model())
            .args(["-p", "8", "-n", "8", "-r", "1", "--no-membw", "--plan"])
            .arg(&mid),
    );
    assert!(
        stdout_of(&out).contains("plan plan-0.003.json"),
        "{}",
        stdout_of(&out)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_plans_and_conflicting_flags_are_clear_errors() {
    let dir = scratch("bad");
    let generate = |plan: &Path, extra: &[&str]| {
        run_err(
            bitnet()
                .args(["generate", "-m"])
                .arg(shipped_model())
                .args(["-p", "x", "-n", "2", "--plan"])
                .arg(plan)
                .args(extra),
        )
    };
    let missing = generate(&dir.join("none.json"), &[]);
    assert!(missing.contains("none.json"), "{missing}");
    let garbage = dir.join("garbage.json");
    std::fs::write(&garbage, "{\"format\": 3").unwrap();
    assert!(generate(&garbage, &[]).contains("not a precision plan"));
    let q = ("q8_0", "q4_0", "int8");
    let two = write_plan(&dir.join("two.json"), "auto", &[q, q]);
    let err = generate(&two, &[]);
    assert!(err.contains("2 layers and the model 4"), "{err}");
    let err = generate(&two, &["-ctk", "q8_0"]);
    assert!(err.contains("cannot be used with"), "{err}");
    // A hand-written plan with int4 activations and unusual formats on each layer runs.
    let four = write_plan(
        &dir.join("four.json"),
        "off",
        &[
            ("f32", "fp8", "int4"),
            ("q8_r", "b1", "int8"),
            ("q4_0", "q8_0", "int4"),
            ("f16", "f16", "int8"),
        ],
    );
    let out = run_ok(
        bitnet()
            .args(["generate", "-m"])
            .arg(shipped_model())
            .args(["-p", "ROMEO:", "-n", "8", "--greedy", "--plan"])
            .arg(&four),
    );
    assert!(
        stderr_of(&out).contains("acts int4 x2, int8 x2"),
        "{}",
        stderr_of(&out)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A plan with a format of each kind, as `calibrate` could write it.
fn mixed_plan(dir: &Path) -> PathBuf {
    let int8 = |k, v| (k, v, "int8");
    write_plan(
        &dir.join("mixed.json"),
        "auto",
        &[
            int8("q8_0", "q8_0"),
            int8("q4_0", "q8_0"),
            int8("q8_0", "q4_0"),
            int8("q4_0", "q4_0"),
        ],
    )
}

#[test]
fn chat_and_serve_run_a_plan() {
    let dir = scratch("chat-serve");
    let plan = mixed_plan(&dir);
    let plan_arg = plan.to_str().unwrap();
    let out = common::chat::chat(&["--plan", plan_arg, "-n", "12"], "Good morrow\n");
    assert!(out.status.success(), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    assert!(err.contains("K q8_0 x2, q4_0 x2"), "{err}");
    assert!(!stdout_of(&out).trim().is_empty());

    let (s, log) = common::server::Server::start_logged(&["--plan", plan_arg]);
    let (status, body) = s.post(
        "/v1/completions",
        &serde_json::json!({"prompt": "ROMEO:", "max_tokens": 8, "temperature": 0}),
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        body["choices"][0]["text"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{body}"
    );
    assert!(log.text().contains("K q8_0 x2, q4_0 x2"), "{}", log.text());
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}
