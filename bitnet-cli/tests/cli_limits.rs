//! Limits that are said, not silent: contexts beyond the trained one or the machine's
//! memory, prompts that do not fit, bench arguments checked before anything is measured,
//! too many threads, files that are not models; and every command ending quietly on a
//! closed pipe, with JSON numbers as numbers.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bitnet, run_err, run_ok, scratch, stderr_of, testdata, tiny_model};

/// The tiny model's trained context (`context_length`).
const TINY_TRAINED_CTX: usize = 512;

#[test]
fn contexts_beyond_training_or_memory_are_said_before_allocating() {
    let out = run_ok(
        bitnet()
            .args(["generate", "-m"])
            .arg(tiny_model())
            .args(["-p", "Hi", "-n", "2", "-t", "1", "-c", "4096"]),
    );
    let err = stderr_of(&out);
    assert!(
        err.contains("beyond the 512 the model was trained on") && err.contains("KV cache"),
        "{err}"
    );
    let quiet = run_ok(
        bitnet()
            .args(["generate", "-m"])
            .arg(tiny_model())
            .args(["-p", "Hi", "-n", "2", "-t", "1"]),
    );
    assert!(
        !stderr_of(&quiet).contains("warning"),
        "{}",
        stderr_of(&quiet)
    );

    // Far beyond any machine: refused at once, with the memory it would take.
    let start = Instant::now();
    let err = run_err(bitnet().args(["generate", "-m"]).arg(tiny_model()).args([
        "-p",
        "Hi",
        "-c",
        "1000000000000",
    ]));
    assert!(start.elapsed() < Duration::from_secs(20));
    assert!(
        err.contains("machine's memory") && err.contains("TiB") && err.contains("lower -c"),
        "{err}"
    );

    // A prompt that leaves no room says how much context it needs.
    let err = run_err(bitnet().args(["generate", "-m"]).arg(tiny_model()).args([
        "-p",
        "Hello world",
        "-c",
        "2",
    ]));
    assert!(err.contains("at least") && err.contains("-c "), "{err}");
}

#[test]
fn logits_honours_the_context_size() {
    let d = scratch("logits-ctx");
    let out = d.join("l.f32");
    let ids: Vec<String> = (1..=20).map(|i| i.to_string()).collect();
    let ids = ids.join(",");
    let err = run_err(
        bitnet()
            .args(["logits", "-m"])
            .arg(tiny_model())
            .args(["--tokens", &ids, "-c", "16", "-o"])
            .arg(&out),
    );
    assert!(err.contains("20 tokens") && err.contains("16"), "{err}");
    // Without -c the model's default context (its trained 512) is the limit.
    let many: Vec<String> = (0..TINY_TRAINED_CTX + 1)
        .map(|i| (i % 500).to_string())
        .collect();
    let err = run_err(
        bitnet()
            .args(["logits", "-m"])
            .arg(tiny_model())
            .args(["--tokens", &many.join(","), "-o"])
            .arg(&out),
    );
    assert!(err.contains("raise -c"), "{err}");
    run_ok(
        bitnet()
            .args(["logits", "-m"])
            .arg(tiny_model())
            .args(["--tokens", &ids, "-c", "20", "-t", "1", "-o"])
            .arg(&out),
    );
    assert_eq!(std::fs::metadata(&out).unwrap().len(), 20 * 512 * 4);
}

#[test]
fn bench_validates_everything_before_measuring() {
    let bench = |extra: &[&str]| {
        let mut c = bitnet();
        c.args(["bench", "-m"]).arg(tiny_model()).args(extra);
        c
    };
    // Beyond the trained context: refused, and before the bandwidth probe.
    let err = run_err(&mut bench(&["-p", "100000", "-n", "0"]));
    assert!(err.contains("trained context is 512"), "{err}");
    assert!(!err.contains("measuring"), "{err}");
    let err = run_err(&mut bench(&["-p", "0", "-n", "0"]));
    assert!(err.contains("nothing to measure"), "{err}");
    let err = run_err(bitnet().args([
        "bench",
        "-m",
        "/nonexistent/model.gguf",
        "-p",
        "8",
        "-n",
        "8",
    ]));
    assert!(err.contains("/nonexistent/model.gguf"), "{err}");
    assert!(!err.contains("measuring"), "{err}");
    let err = run_err(
        bitnet()
            .args(["bench", "-m"])
            .arg(testdata("vocab/ggml-vocab-gpt-2.gguf"))
            .args(["-p", "8", "-n", "0"]),
    );
    assert!(err.contains("only a tokenizer"), "{err}");

    // Progress counts warm-up and timed runs apart.
    let out = run_ok(&mut bench(&[
        "-p",
        "8",
        "-n",
        "0",
        "-r",
        "1",
        "--warmup",
        "1",
        "-t",
        "1",
        "--no-membw",
    ]));
    let err = stderr_of(&out);
    assert!(
        err.contains("warmup 1/1") && err.contains("rep 1/1"),
        "{err}"
    );
    assert!(!err.contains("2/2"), "{err}");
}

#[test]
fn more_threads_than_cpus_are_warned_about() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let t = (cpus + 1).to_string();
    let out = run_ok(
        bitnet()
            .args(["generate", "-m"])
            .arg(tiny_model())
            .args(["-p", "Hi", "-n", "2", "-t", &t]),
    );
    let err = stderr_of(&out);
    assert!(
        err.contains(&format!("-t {t}")) && err.contains("logical CPUs"),
        "{err}"
    );
    let out = run_ok(
        bitnet()
            .args(["generate", "-m"])
            .arg(tiny_model())
            .args(["-p", "Hi", "-n", "2", "-t", "1"]),
    );
    assert!(!stderr_of(&out).contains("logical CPUs"));
}

#[test]
fn files_that_are_not_models_are_named_for_what_they_are() {
    for vocab in [
        "vocab/ggml-vocab-gpt-2.gguf",
        "vocab/ggml-vocab-llama-spm.gguf",
    ] {
        let err = run_err(
            bitnet()
                .args(["generate", "-m"])
                .arg(testdata(vocab))
                .args(["-p", "Hi"]),
        );
        assert!(err.contains("holds only a tokenizer"), "{vocab}: {err}");
        assert!(!err.contains("block_count"), "{err}");
    }
    let d = scratch("dir-as-model");
    for cmd in [
        &["generate", "-p", "Hi", "-m"][..],
        &["inspect"][..],
        &["tokenize", "-p", "Hi", "-m"][..],
    ] {
        let err = run_err(bitnet().args(cmd).arg(&d));
        assert!(err.contains("is a directory"), "{cmd:?}: {err}");
        assert!(!err.contains("No such device"), "{err}");
    }
}

/// Runs a command whose stdout is closed before it writes anything: it must exit 0, quietly.
fn ends_quietly_on_closed_pipe(cmd: &mut Command) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = stderr_of(&out);
    assert!(out.status.success(), "{cmd:?}: {:?} {err}", out.status);
    assert!(
        !err.contains("Broken pipe") && !err.contains("panicked"),
        "{cmd:?}: {err}"
    );
}

#[test]
fn every_command_ends_quietly_on_a_closed_pipe() {
    let golden = testdata("golden/gguf/bitnet-tiny-i2_s.gguf");
    let d = scratch("pipes");
    let mut inspect_json = bitnet();
    inspect_json
        .arg("inspect")
        .arg(&golden)
        .args(["--json", "--weights"]);
    let mut inspect_text = bitnet();
    inspect_text.arg("inspect").arg(&golden).arg("--weights");
    let mut tokenize = bitnet();
    tokenize
        .args(["tokenize", "--pieces", "-m"])
        .arg(&golden)
        .args(["-p", "Hello world"]);
    let mut generate = bitnet();
    generate
        .args(["generate", "-m"])
        .arg(tiny_model())
        .args(["-p", "Hi", "-n", "4", "-t", "1"]);
    let mut bench_md = bitnet();
    bench_md.args(["bench", "-m"]).arg(tiny_model()).args([
        "-p",
        "4",
        "-n",
        "0",
        "-r",
        "1",
        "--no-membw",
    ]);
    let mut bench_json = bitnet();
    bench_json.args(["bench", "-m"]).arg(tiny_model()).args([
        "-p",
        "4",
        "-n",
        "0",
        "-r",
        "1",
        "--no-membw",
        "-o",
        "json",
    ]);
    let mut presets = bitnet();
    presets.args(["gen-model", "--list-presets"]);
    let model = d.join("m.gguf");
    let mut gen_model = bitnet();
    gen_model
        .args(["gen-model", "--preset", "tiny", "-o"])
        .arg(&model);
    for cmd in [
        &mut inspect_json,
        &mut inspect_text,
        &mut tokenize,
        &mut generate,
        &mut bench_md,
        &mut bench_json,
        &mut presets,
        &mut gen_model,
    ] {
        ends_quietly_on_closed_pipe(cmd);
    }
    assert!(
        model.exists(),
        "gen-model finished its file before the message"
    );
}

#[test]
fn inspect_json_numbers_are_numbers() {
    let out = run_ok(
        bitnet()
            .arg("inspect")
            .arg(testdata("golden/gguf/upstream-tiny-tq2_0.gguf"))
            .arg("--json"),
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let hp = &r["hyper_parameters"];
    assert_eq!(hp["block_count"], 4);
    assert_eq!(hp["context_length"], 512);
    let eps = hp["attention.layer_norm_rms_epsilon"].as_f64().unwrap();
    assert!(eps > 0.0 && eps < 1e-3, "{eps}");
    for (k, v) in hp.as_object().unwrap() {
        if let Some(s) = v.as_str() {
            assert!(
                s.parse::<f64>().is_err(),
                "{k} is a number written as a string: {s:?}"
            );
        }
    }
}

#[test]
fn prompt_files_without_an_end_are_refused_not_read_without_bound() {
    // /dev/zero never ends: the read stops past 1 GiB with an error (it used to grow until
    // the machine ran out of memory); a directory is named as one.
    if std::path::Path::new("/dev/zero").exists() {
        let err = run_err(
            bitnet()
                .args(["tokenize", "-m"])
                .arg(tiny_model())
                .args(["-f", "/dev/zero"]),
        );
        assert!(err.contains("more than 1 GiB of text"), "{err}");
    }
    let dir = scratch("prompt-dir");
    let err = run_err(
        bitnet()
            .args(["generate", "-m"])
            .arg(tiny_model())
            .arg("-f")
            .arg(&dir),
    );
    assert!(err.contains("it is a directory"), "{err}");
}

/// `serve --timeout` is refused outside 1 s to a year before anything loads: 0 used to become
/// 1 s silently, and a deadline past what an `Instant` holds panicked the request's task.
#[test]
fn serve_timeout_out_of_range_is_refused() {
    for bad in ["0", "31536001", "18446744073709551615"] {
        let err = run_err(
            bitnet()
                .args(["serve", "-m"])
                .arg(tiny_model())
                .args(["--timeout", bad]),
        );
        assert!(
            err.contains("--timeout") && err.contains(bad),
            "{bad}: {err}"
        );
    }
}

/// Sampler values the sampler refuses are refused before the model is read: a model path
/// that does not exist shows it (the sampling error comes first, not a missing file).
#[test]
fn bad_sampling_values_are_refused_before_loading() {
    for cmd in [&["generate", "-p", "Hi"][..], &["chat"]] {
        for (flag, bad) in [
            ("--temp", "nan"),
            ("--top-p", "0"),
            ("--repeat-penalty", "0"),
        ] {
            let err =
                run_err(
                    bitnet()
                        .args(cmd)
                        .args(["-m", "/nonexistent/model.gguf", flag, bad]),
                );
            assert!(
                err.contains("sampling settings") && !err.contains("nonexistent"),
                "{cmd:?} {flag} {bad}: {err}"
            );
        }
    }
}

/// `bench --interleave` with no tg test said nothing and measured no pairs; it is refused.
#[test]
fn bench_interleave_without_tg_is_refused() {
    let err = run_err(bitnet().args(["bench", "-m"]).arg(tiny_model()).args([
        "-p",
        "8",
        "-n",
        "0",
        "-t",
        "1,2",
        "--interleave",
    ]));
    assert!(err.contains("--interleave") && err.contains("-n"), "{err}");
    // Nor with no model at all (the bandwidth probe alone has nothing to pair).
    let err = run_err(bitnet().args(["bench", "--membw", "--interleave"]));
    assert!(err.contains("--interleave"), "{err}");
}
