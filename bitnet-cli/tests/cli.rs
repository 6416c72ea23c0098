//! End-to-end tests of the `bitnet` binary: every subcommand run as a user runs it, on the
//! test data's files written by llama.cpp / bitnet.cpp and on models the generator makes. The
//! expected facts about those files come from their independent Python decoder
//! (`testdata/golden/tools/gguf_tool.py`), not from our reader.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::Stdio;

use common::{bitnet, run_err, run_ok, stdout_of, testdata, tiny_model, tmp_dir};
use serde_json::Value;

fn inspect_json(path: &Path, extra: &[&str]) -> Value {
    let out = run_ok(bitnet().arg("inspect").arg(path).arg("--json").args(extra));
    serde_json::from_slice(&out.stdout).expect("inspect --json prints JSON")
}

fn type_count(report: &Value, ty: &str) -> u64 {
    report["totals_by_type"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == ty)
        .map_or(0, |t| t["tensors"].as_u64().unwrap())
}

#[test]
fn inspect_reads_every_shared_model_file() {
    // (file, architecture, tensors, ternary type, tokenizer model, vocab size)
    let cases = [
        (
            "golden/gguf/bitnet-tiny-i2_s.gguf",
            "bitnet-25",
            46,
            "I2_S",
            "llama",
            32000,
        ),
        (
            "golden/gguf/upstream-tiny-tq1_0.gguf",
            "bitnet",
            46,
            "TQ1_0",
            "llama",
            32000,
        ),
        (
            "golden/gguf/upstream-tiny-tq2_0.gguf",
            "bitnet",
            46,
            "TQ2_0",
            "llama",
            32000,
        ),
    ];
    for (file, arch, n_tensors, ternary, tok, n_vocab) in cases {
        let r = inspect_json(&testdata(file), &["--weights"]);
        assert_eq!(r["architecture"], arch, "{file}");
        assert_eq!(r["tensors"].as_array().unwrap().len(), n_tensors, "{file}");
        assert_eq!(type_count(&r, ternary), 28, "{file}");
        assert_eq!(type_count(&r, "F16"), 1, "{file}");
        assert_eq!(type_count(&r, "F32"), 17, "{file}");
        assert_eq!(r["tokenizer"]["model"], tok, "{file}");
        assert_eq!(r["tokenizer"]["n_tokens"], n_vocab, "{file}");
        assert_eq!(r["hyper_parameters"]["block_count"], 4, "{file}");
        assert_eq!(r["hyper_parameters"]["embedding_length"], 256, "{file}");
        // KV cache at the training context (512): 2 x 4 layers x 512 x (2 kv heads x 64) x 2 bytes.
        assert_eq!(r["memory"]["kv_f16_bytes"], 2 * 4 * 512 * 128 * 2, "{file}");
        // Every ternary tensor has a histogram that sums to 1 with all three values present.
        for w in r["weights"].as_array().unwrap() {
            if w["type"] == ternary {
                let s: Vec<f64> = w["ternary_shares"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap())
                    .collect();
                assert!((s.iter().sum::<f64>() - 1.0).abs() < 1e-9);
                assert!(
                    s.iter().all(|&x| x > 0.2 && x < 0.5),
                    "{file} {}: {s:?}",
                    w["name"]
                );
            } else {
                assert!(w["ternary_shares"].is_null());
            }
        }
    }
}

#[test]
fn inspect_reads_vocab_only_files_and_prints_tables() {
    let cases = [
        ("vocab/ggml-vocab-gpt-2.gguf", "gpt2", "gpt2", 50257),
        ("vocab/ggml-vocab-llama-bpe.gguf", "llama", "gpt2", 128256),
        ("vocab/ggml-vocab-llama-spm.gguf", "llama", "llama", 32000),
        (
            "vocab/ggml-vocab-starcoder.gguf",
            "starcoder2",
            "gpt2",
            49152,
        ),
    ];
    for (file, arch, tok, n_vocab) in cases {
        let r = inspect_json(&testdata(file), &[]);
        assert_eq!(r["architecture"], arch, "{file}");
        assert_eq!(r["tensors"].as_array().unwrap().len(), 0, "{file}");
        assert_eq!(r["tokenizer"]["model"], tok, "{file}");
        assert_eq!(r["tokenizer"]["n_tokens"], n_vocab, "{file}");
    }
    let out = run_ok(
        bitnet()
            .arg("inspect")
            .arg(testdata("golden/gguf/bitnet-tiny-i2_s.gguf")),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "architecture: bitnet-25",
        "tokenizer: llama",
        "blk.0.attn_q.weight",
        "I2_S",
        "KV cache f16",
        "KV cache q8_0",
        "KV cache b1",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

#[test]
fn inspect_reports_broken_files_without_panicking() {
    let good = std::fs::read(testdata("golden/gguf/upstream-tiny-tq2_0.gguf")).unwrap();
    let dir = tmp_dir();
    for (name, bytes) in [
        ("truncated.gguf", &good[..good.len() / 2]),
        ("header-only.gguf", &good[..10]),
        ("not-gguf.gguf", &b"this is not a model file at all"[..]),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        let out = bitnet().arg("inspect").arg(&p).output().unwrap();
        assert!(!out.status.success(), "{name} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: opening"), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
}

#[test]
fn gen_model_writes_the_requested_types() {
    let dir = tmp_dir();
    for (wt, ty) in [
        ("tq1_0", "TQ1_0"),
        ("tq2_0", "TQ2_0"),
        ("i2_s", "I2_S"),
        ("q1_0", "Q1_0"),
    ] {
        let p = dir.join(format!("gen-{wt}.gguf"));
        run_ok(
            bitnet()
                .args([
                    "gen-model",
                    "--preset",
                    "tiny",
                    "--weight-type",
                    wt,
                    "--embd-type",
                    "q8_0",
                    "-o",
                ])
                .arg(&p),
        );
        let r = inspect_json(&p, &[]);
        assert_eq!(type_count(&r, ty), 14, "{wt}");
        assert_eq!(type_count(&r, "Q8_0"), 1, "{wt}");
        assert_eq!(r["architecture"], "bitnet-b1.58");
    }
    let out = run_ok(bitnet().args(["gen-model", "--list-presets"]));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("2b-4t") && text.contains("falcon3-1b"));
}

#[test]
fn tokenize_matches_llama_cpp_expectations_on_vocab_only_files() {
    for name in ["llama-spm", "llama-bpe"] {
        let inp = std::fs::read_to_string(testdata(&format!("vocab/ggml-vocab-{name}.gguf.inp")))
            .unwrap();
        let outp = std::fs::read_to_string(testdata(&format!("vocab/ggml-vocab-{name}.gguf.out")))
            .unwrap();
        // Take a plain case: a test string with no leading/trailing whitespace subtleties.
        let cases: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
        let (i, text) = cases
            .iter()
            .enumerate()
            .find(|(_, c)| c.trim() == "Hello world")
            .unwrap();
        let expected: Vec<&str> = outp.lines().nth(i).unwrap().split_whitespace().collect();
        let out = run_ok(
            bitnet()
                .arg("tokenize")
                .arg("-m")
                .arg(testdata(&format!("vocab/ggml-vocab-{name}.gguf")))
                .arg("--no-bos")
                .arg(text),
        );
        let got = String::from_utf8(out.stdout).unwrap();
        assert_eq!(got.trim(), format!("[{}]", expected.join(", ")), "{name}");
    }
}

#[test]
fn logits_writes_n_tokens_by_n_vocab_floats() {
    let out_path = tmp_dir().join("golden.f32");
    run_ok(
        bitnet()
            .args(["logits", "-m"])
            .arg(testdata("golden/gguf/bitnet-tiny-i2_s.gguf"))
            .args(["--tokens", "1,512,29871,29896", "-t", "1", "-o"])
            .arg(&out_path),
    );
    let bytes = std::fs::read(&out_path).unwrap();
    assert_eq!(bytes.len(), 4 * 32000 * 4);
    assert!(
        bytes
            .chunks_exact(4)
            .all(|c| f32::from_le_bytes(c.try_into().unwrap()).is_finite())
    );
}

#[test]
fn generate_streams_and_reports_figures() {
    let out = run_ok(bitnet().args(["generate", "-m"]).arg(tiny_model()).args([
        "-p",
        "Hello",
        "-n",
        "8",
        "--greedy",
        "--profile",
        "-t",
        "1",
    ]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("Hello"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "load ",
        "prompt ",
        "tok/s",
        "generated ",
        "peak RSS",
        "| op",
        "share",
        "total",
    ] {
        assert!(stderr.contains(needle), "missing {needle:?} in:\n{stderr}");
    }
    // Same seed, same text.
    let again = run_ok(
        bitnet()
            .args(["generate", "-m"])
            .arg(tiny_model())
            .args(["-p", "Hello", "-n", "8", "--greedy", "-t", "2"]),
    );
    assert_eq!(out.stdout, again.stdout);
}

#[test]
fn generate_ends_quietly_on_a_closed_pipe() {
    let mut child = bitnet()
        .args(["generate", "-m"])
        .arg(tiny_model())
        .args([
            "-p", "Hello", "-n", "400", "--temp", "1.0", "--min-p", "0", "--top-k", "0", "--top-p",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 4];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn generate_rejects_bad_options_with_clear_errors() {
    let out = bitnet()
        .args(["generate", "-m"])
        .arg(tiny_model())
        .args(["-p", "Hi", "--top-p", "1.5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("top_p"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = bitnet()
        .args(["generate", "-m"])
        .arg(tiny_model())
        .args(["-p", "Hi", "--kernel", "sve2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown kernel set"));
    // A known set of the other architecture is refused with what this CPU lacks.
    let foreign = if cfg!(target_arch = "aarch64") {
        "avx2"
    } else {
        "neon"
    };
    let out = bitnet()
        .args(["generate", "-m"])
        .arg(tiny_model())
        .args(["-p", "Hi", "--kernel", foreign])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("lacks"), "{err}");
    let long_prompt = "word ".repeat(600);
    let out = bitnet()
        .args(["generate", "-m"])
        .arg(tiny_model())
        .args(["-c", "64", "-p", &long_prompt])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("context holds 64"));
}

#[test]
fn bench_reports_pp_and_tg_rows_in_every_format() {
    let report_path = tmp_dir().join("bench.json");
    let out = run_ok(
        bitnet()
            .args(["bench", "-m"])
            .arg(tiny_model())
            .args([
                "-p",
                "16",
                "-n",
                "4",
                "-t",
                "1,2",
                "-r",
                "2",
                "--warmup",
                "0",
                "--no-membw",
                "-o",
                "json",
                "--json-report",
            ])
            .arg(&report_path),
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = r["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "pp16 and tg4 for 1 and 2 threads");
    for row in rows {
        assert_eq!(row["samples"].as_array().unwrap().len(), 2);
        assert!(row["mean_tps"].as_f64().unwrap() > 0.0);
        assert!(row["peak_rss_bytes"].as_u64().unwrap() > 0);
        assert!(row["n_params"].as_u64().unwrap() > 1_000_000);
        assert!(["pp", "tg"].contains(&row["test"].as_str().unwrap()));
        if row["test"] == "tg" {
            // A tied-head model streams every projection and the head: close to the file size.
            let per_tok = row["bytes_per_token"].as_f64().unwrap();
            let file = row["model_bytes"].as_f64().unwrap();
            assert!(
                per_tok > 0.5 * file && per_tok < 1.2 * file,
                "{per_tok} vs file {file}"
            );
        }
    }
    assert_eq!(rows.iter().filter(|r| r["threads"] == 2).count(), 2);
    let saved: Value = serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    assert_eq!(saved["rows"], r["rows"]);

    let md = run_ok(bitnet().args(["bench", "-m"]).arg(tiny_model()).args([
        "-p", "8", "-n", "2", "-t", "1,2", "-r", "1", "--warmup", "0", "--membw",
    ]));
    let text = String::from_utf8(md.stdout).unwrap();
    assert!(text.lines().next().unwrap().starts_with("| model"));
    assert!(
        text.contains("pp8")
            && text.contains("tg2")
            && text.contains("with 1 thread(s)")
            && text.contains("with 2 thread(s)")
    );
    assert!(
        String::from_utf8_lossy(&md.stderr).contains("[bench]"),
        "progress line on stderr"
    );

    let csv = run_ok(bitnet().args(["bench", "-m"]).arg(tiny_model()).args([
        "-p",
        "8",
        "-n",
        "0",
        "-r",
        "1",
        "--no-membw",
        "-o",
        "csv",
    ]));
    let text = String::from_utf8(csv.stdout).unwrap();
    assert_eq!(text.lines().count(), 2);
    assert!(text.lines().nth(1).unwrap().contains(",pp8,8,"));
}

#[test]
fn bench_compare_flags_regressions_beyond_the_spread() {
    let dir = tmp_dir();
    let report = |tg: [f64; 3]| {
        let mean = tg.iter().sum::<f64>() / 3.0;
        let sd = (tg.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
        serde_json::json!({
            "bitnet_version": "0.1.0", "commit": null, "date": "2026-11-21T00:00:00Z",
            "machine": {"cpu": "x", "logical_cpus": 2, "membw_gbs": null, "membw_threads": null},
            "rows": [{
                "model": "m.gguf", "model_bytes": 1, "n_params": 1, "kernel": "avx512", "threads": 2,
                "batch": 1, "mmap": true, "test": "tg", "n_tokens": 128, "samples": tg,
                "mean_tps": mean, "stddev_tps": sd, "peak_rss_bytes": 1,
                "bytes_per_token": null, "bound_tps": null, "bound_share": null
            }]
        })
    };
    let old = dir.join("old.json");
    let same = dir.join("same.json");
    let worse = dir.join("worse.json");
    std::fs::write(&old, report([20.0, 20.2, 19.8]).to_string()).unwrap();
    std::fs::write(&same, report([19.9, 20.1, 20.0]).to_string()).unwrap();
    std::fs::write(&worse, report([15.0, 15.1, 14.9]).to_string()).unwrap();

    let ok = run_ok(
        bitnet()
            .args(["bench", "--fail-on-regress", "--compare"])
            .arg(&old)
            .arg(&same),
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("1 row compared, 0 regressed"));

    let bad = bitnet()
        .args(["bench", "--fail-on-regress", "--compare"])
        .arg(&old)
        .arg(&worse)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let text = String::from_utf8_lossy(&bad.stdout);
    assert!(
        text.contains("REGRESSED") && text.contains("-25.0%"),
        "{text}"
    );

    // Without --fail-on-regress the same comparison exits 0.
    run_ok(bitnet().args(["bench", "--compare"]).arg(&old).arg(&worse));
}

#[test]
fn inspect_names_the_kernel_set_and_what_the_cpu_runs() {
    let model = tiny_model();
    let available: Vec<&str> = bitnet_kernels::Isa::available()
        .into_iter()
        .map(bitnet_kernels::Isa::name)
        .collect();
    let best = bitnet_kernels::Isa::best().name();
    let r = inspect_json(model, &[]);
    // The suite also runs with BITNET_KERNEL=scalar: the report follows the variable.
    let expected = std::env::var("BITNET_KERNEL")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| best.to_owned());
    assert_eq!(r["kernels"]["selected"], expected.as_str());
    assert_eq!(r["kernels"]["available"], serde_json::json!(available));
    let out = run_ok(
        bitnet()
            .arg("inspect")
            .arg(model)
            .env("BITNET_KERNEL", "scalar"),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text.lines().find(|l| l.starts_with("kernels: ")).unwrap();
    assert!(
        line.starts_with("kernels: scalar (this CPU runs: scalar"),
        "{line}"
    );
    // A set this CPU cannot run is named with the reason, not silently replaced.
    let foreign = if cfg!(target_arch = "aarch64") {
        "avx2"
    } else {
        "neon"
    };
    let r = inspect_json_env(model, "BITNET_KERNEL", foreign);
    let selected = r["kernels"]["selected"].as_str().unwrap();
    assert!(selected.starts_with("none (BITNET_KERNEL"), "{selected}");
}

#[test]
fn decode_prefetch_policy_is_reported_and_a_bad_one_refused() {
    let model = tiny_model();
    for (set, name) in [("l2", "l2"), ("OFF", "off"), ("tuned", "tuned")] {
        let r = inspect_json_env(model, "BITNET_PREFETCH", set);
        assert_eq!(r["kernels"]["decode_prefetch"], name);
    }
    let err = run_err(
        bitnet()
            .args(["generate", "-m"])
            .arg(model)
            .args(["-p", "Hi", "-n", "2"])
            .env("BITNET_PREFETCH", "t0"),
    );
    assert!(err.contains("unknown prefetch policy \"t0\""), "{err}");
    // And a run under each policy writes the same text (prefetching is only a hint).
    let text = |policy: &str| {
        stdout_of(&run_ok(
            bitnet()
                .args(["generate", "-m"])
                .arg(model)
                .args(["-p", "Hi", "-n", "8", "--temp", "0"])
                .env("BITNET_PREFETCH", policy),
        ))
    };
    let off = text("off");
    assert!(!off.trim().is_empty());
    for policy in ["l1", "l2", "tuned"] {
        assert_eq!(text(policy), off, "{policy}");
    }
}

/// `inspect --json` of `path` with the environment variable `var` set to `value`.
fn inspect_json_env(path: &Path, var: &str, value: &str) -> Value {
    let out = run_ok(
        bitnet()
            .arg("inspect")
            .arg(path)
            .arg("--json")
            .env(var, value),
    );
    serde_json::from_slice(&out.stdout).expect("inspect --json prints JSON")
}

#[test]
fn bench_profiles_prompt_processing_and_decode() {
    let out = run_ok(bitnet().args(["bench", "-m"]).arg(tiny_model()).args([
        "-p",
        "16",
        "-n",
        "4",
        "-r",
        "1",
        "-t",
        "1",
        "--no-membw",
        "--profile",
    ]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for heading in [
        "pp16, 1 thread (last repetition):",
        "tg4 b1, 1 thread (last repetition):",
    ] {
        let at = stderr
            .find(heading)
            .unwrap_or_else(|| panic!("no {heading:?} profile in:\n{stderr}"));
        // The table under each heading names the ternary products and adds up to a total.
        let table = &stderr[at..];
        assert!(
            table.contains("matmul_ternary") && table.contains("| total"),
            "{stderr}"
        );
    }
}
