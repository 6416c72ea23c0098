//! llama.cpp's conventions, where users' fingers already are: prompts from a file or stdin,
//! text that starts with '-', `-n -1`, `--temp -1`, `-s -1` and random seeds, `--ctx-size`,
//! `--ignore-eos`, `-b/--batch-size`, and llama-tokenize's flags.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::{bitnet, run_err, run_ok, scratch, stderr_of, stdout_of, testdata, tiny_model};

const SPM: &str = "vocab/ggml-vocab-llama-spm.gguf";

fn with_stdin(cmd: &mut Command, input: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn generate(extra: &[&str]) -> Output {
    run_ok(
        bitnet()
            .args(["generate", "-m"])
            .arg(tiny_model())
            .args(["-t", "1"])
            .args(extra),
    )
}

/// The `seed N` of the figures line.
fn seed_of(out: &Output) -> u64 {
    let err = stderr_of(out);
    let tail = err
        .split("| seed ")
        .nth(1)
        .unwrap_or_else(|| panic!("no seed in: {err}"));
    tail.trim().parse().unwrap()
}

#[test]
fn prompts_come_from_files_and_stdin() {
    let d = scratch("prompt-files");
    let file = d.join("prompt.txt");
    std::fs::write(&file, "Once upon a time").unwrap();
    let by_arg = generate(&["-p", "Once upon a time", "-n", "6", "--greedy"]);
    let by_file = generate(&["-f", file.to_str().unwrap(), "-n", "6", "--greedy"]);
    assert_eq!(by_arg.stdout, by_file.stdout);
    assert!(stdout_of(&by_file).starts_with("Once upon a time"));
    let by_stdin = with_stdin(
        bitnet()
            .args(["generate", "-m"])
            .arg(tiny_model())
            .args(["-t", "1", "-f", "-", "-n", "6", "--greedy"]),
        b"Once upon a time",
    );
    assert!(by_stdin.status.success(), "{}", stderr_of(&by_stdin));
    assert_eq!(by_arg.stdout, by_stdin.stdout);

    // logits -f gives the same floats as -p.
    let (a, b) = (d.join("a.f32"), d.join("b.f32"));
    run_ok(
        bitnet()
            .args(["logits", "-m"])
            .arg(tiny_model())
            .args(["-p", "Once upon a time", "-o"])
            .arg(&a),
    );
    run_ok(
        bitnet()
            .args(["logits", "-m"])
            .arg(tiny_model())
            .arg("-f")
            .arg(&file)
            .arg("-o")
            .arg(&b),
    );
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());

    // A prompt larger than one command-line argument may be (128 KiB) goes through -f.
    let big = d.join("big.txt");
    std::fs::write(&big, "hello ".repeat(40_000)).unwrap();
    let out = run_ok(
        bitnet()
            .args(["tokenize", "-m"])
            .arg(testdata(SPM))
            .args(["--show-count", "-f"])
            .arg(&big),
    );
    let text = stdout_of(&out);
    let last = text.lines().last().unwrap_or("");
    let n: usize = last
        .strip_prefix("Total number of tokens: ")
        .unwrap_or_else(|| panic!("{last}"))
        .parse()
        .unwrap();
    assert!(n > 40_000, "{n}");
    assert_eq!(text.matches(',').count() + 1, n);

    let err = run_err(bitnet().args(["generate", "-m"]).arg(tiny_model()));
    assert!(err.contains("-p TEXT or -f FILE"), "{err}");
    let err = run_err(
        bitnet()
            .args(["generate", "-m"])
            .arg(tiny_model())
            .args(["-f"])
            .arg(d.join("missing.txt")),
    );
    assert!(err.contains("missing.txt"), "{err}");
}

#[test]
fn text_may_start_with_a_hyphen() {
    let spm = testdata(SPM);
    let out = run_ok(
        bitnet()
            .args(["tokenize", "-m"])
            .arg(&spm)
            .args(["--no-bos", "-hello"]),
    );
    let ids = stdout_of(&out);
    assert!(ids.starts_with('[') && ids.trim() != "[]", "{ids}");
    let by_p = run_ok(
        bitnet()
            .args(["tokenize", "-m"])
            .arg(&spm)
            .args(["--no-bos", "-p", "-hello"]),
    );
    assert_eq!(by_p.stdout, out.stdout);
    let hyphen = generate(&["-p", "- item", "-n", "2", "--stop", "-x"]);
    assert!(stdout_of(&hyphen).starts_with("- item"));
}

#[test]
fn generation_flags_follow_llama_cpp() {
    // -n -1: until the context is full.
    let out = generate(&["-p", "Hi", "-n", "-1", "-c", "40", "--ignore-eos"]);
    let err = stderr_of(&out);
    assert!(err.contains("stop: context full"), "{err}");

    // --temp -1 is greedy, whatever the seed.
    let greedy = generate(&["-p", "Hi", "-n", "12", "--greedy"]);
    for seed in ["1", "2"] {
        let neg = generate(&["-p", "Hi", "-n", "12", "--temp", "-1", "-s", seed]);
        assert_eq!(greedy.stdout, neg.stdout);
    }

    // The default seed is random and printed; giving it back repeats the run.
    let sample = [
        "-p", "Hi", "-n", "24", "--temp", "1.5", "--top-k", "0", "--min-p", "0",
    ];
    let a = generate(&sample);
    let b = generate(&sample);
    let c = generate(&[&sample[..], &["-s", "-1"]].concat());
    let seeds = [seed_of(&a), seed_of(&b), seed_of(&c)];
    assert!(seeds[0] != seeds[1] && seeds[1] != seeds[2], "{seeds:?}");
    let again = generate(&[&sample[..], &["-s", &seeds[0].to_string()]].concat());
    assert_eq!(a.stdout, again.stdout);
    assert_eq!(seed_of(&again), seeds[0]);

    // --ctx-size is -c.
    let long_prompt = "word ".repeat(100);
    let err = run_err(bitnet().args(["generate", "-m"]).arg(tiny_model()).args([
        "--ctx-size",
        "48",
        "-p",
        &long_prompt,
    ]));
    assert!(err.contains("context holds 48"), "{err}");

    // -b / --batch-size (the prefill chunk) changes nothing in the result.
    let prompt = "The quick brown fox jumps over the lazy dog";
    let base = generate(&["-p", prompt, "-n", "8", "--greedy"]);
    for b in [["-b", "1"], ["--batch-size", "5"]] {
        let out = generate(&[&["-p", prompt, "-n", "8", "--greedy"][..], &b[..]].concat());
        assert_eq!(base.stdout, out.stdout, "{b:?}");
    }
    let err = run_err(
        bitnet()
            .args(["generate", "-m"])
            .arg(tiny_model())
            .args(["-p", "Hi", "-b", "0"]),
    );
    assert!(err.contains("batch-size"), "{err}");
    let err = run_err(
        bitnet()
            .args(["generate", "-m"])
            .arg(tiny_model())
            .args(["-p", "Hi", "-n", "-5"]),
    );
    assert!(err.contains("-1"), "{err}");
}

#[test]
fn ignore_eos_never_stops_at_an_end_token() {
    // The tiny model's vocabulary is 512 tokens, so over thousands of sampled tokens an
    // end-of-generation token would come up many times.
    for seed in ["1", "2", "3"] {
        let out = generate(&[
            "-p",
            "Hi",
            "-n",
            "-1",
            "-c",
            "512",
            "--temp",
            "2",
            "--top-k",
            "0",
            "--min-p",
            "0",
            "--ignore-eos",
            "-s",
            seed,
        ]);
        let err = stderr_of(&out);
        assert!(err.contains("stop: context full"), "seed {seed}: {err}");
    }
}

#[test]
fn tokenize_takes_llama_tokenize_flags() {
    let spm = testdata(SPM);
    let tok = |extra: &[&str]| run_ok(bitnet().args(["tokenize", "-m"]).arg(&spm).args(extra));
    let ids = tok(&["Hello world"]);
    let text = stdout_of(&ids);
    assert!(text.starts_with('['));
    assert_eq!(tok(&["--ids", "Hello world"]).stdout, ids.stdout);
    assert_eq!(tok(&["-p", "Hello world", "--ids"]).stdout, ids.stdout);
    let counted = stdout_of(&tok(&["-p", "Hello world", "--show-count"]));
    let n = text.matches(',').count() + 1;
    assert_eq!(counted, format!("{text}Total number of tokens: {n}\n"));
    let from_stdin = with_stdin(
        bitnet().args(["tokenize", "-m"]).arg(&spm).arg("--stdin"),
        b"Hello world",
    );
    assert!(from_stdin.status.success(), "{}", stderr_of(&from_stdin));
    assert_eq!(from_stdin.stdout, ids.stdout);
    let pieces = stdout_of(&tok(&["--pieces", "-p", "Hello world"]));
    assert!(pieces.contains("-> '"), "{pieces}");
    let err = run_err(bitnet().args(["tokenize", "-m"]).arg(&spm));
    assert!(err.contains("--stdin"), "{err}");
    let err = run_err(
        bitnet()
            .args(["tokenize", "-m"])
            .arg(&spm)
            .args(["--ids", "--pieces", "x"]),
    );
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn inspect_takes_c_and_ctx_size_like_the_other_commands() {
    let golden = testdata("golden/gguf/bitnet-tiny-i2_s.gguf");
    let kv = |flag: &str| {
        let out = run_ok(
            bitnet()
                .arg("inspect")
                .arg(&golden)
                .args(["--json", flag, "1024"]),
        );
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["memory"]["ctx"], 1024, "{flag}");
        r["memory"]["kv_f16_bytes"].as_u64().unwrap()
    };
    // 2 (K and V) x 4 layers x 1024 positions x 128 (2 kv heads x 64) x 2 bytes.
    assert_eq!(kv("-c"), 2 * 4 * 1024 * 128 * 2);
    assert_eq!(kv("--ctx-size"), kv("--ctx"));
}

/// `-ctk` / `-ctv` (llama.cpp's spelling) on every command that runs a model: a bad name is
/// a clear error listing the valid ones, before the model is touched; good names run.
#[test]
fn cache_types_are_chosen_per_side_on_every_model_command() {
    let names = "f16, f32, q8_0, q8_r, fp8, q4_0, b1";
    for cmd in ["generate", "chat", "serve", "bench", "perplexity"] {
        for flag in ["-ctk", "-ctv", "--cache-type-k", "--cache-type-v"] {
            let err = run_err(
                bitnet()
                    .args([cmd, "-m"])
                    .arg(tiny_model())
                    .args([flag, "q3_k"]),
            );
            assert!(
                err.contains("unknown KV cache type \"q3_k\""),
                "{cmd} {flag}: {err}"
            );
            assert!(err.contains(names), "{cmd} {flag}: {err}");
        }
    }
    // K and V differ; the greedy text stays text.
    let out = generate(&[
        "-p", "Once", "-n", "4", "--greedy", "-ctk", "q4_0", "-ctv", "b1",
    ]);
    assert!(stdout_of(&out).starts_with("Once"));
    let out = generate(&["-p", "Once", "-n", "4", "--greedy", "-ctk=fp8", "-ctv=q8_r"]);
    assert!(stdout_of(&out).starts_with("Once"));
    // bench: lists of both, every pair reported.
    let out = run_ok(
        bitnet()
            .args(["bench", "-m"])
            .arg(tiny_model())
            .args(["-p", "0", "-n", "2", "-r", "1", "--warmup", "0", "-t", "1"])
            .args(["--no-membw", "-ctk", "q8_0,f16", "-ctv", "q4_0"]),
    );
    let text = stdout_of(&out);
    assert!(text.contains("K q8_0 V q4_0"), "{text}");
    assert!(text.contains("K f16 V q4_0"), "{text}");
}
