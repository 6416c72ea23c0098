//! A new user's first hour, round 3 (issue 57): the context `generate` suggests holds `-n`
//! and a cut is said; `bench` takes the shared flags; help and error texts that name the
//! right thing once; `serve` announces its address only once the model has loaded.

mod common;

use common::{bitnet, run_err, run_ok, scratch, shipped_model, stderr_of, stdout_of};

fn model_cmd(sub: &str) -> std::process::Command {
    let mut cmd = bitnet();
    cmd.args([sub, "-m"]).arg(shipped_model());
    cmd
}

/// A text the shipped model reads as a few hundred tokens.
fn long_text() -> std::path::PathBuf {
    let path = scratch("round3-text").join("long.txt");
    std::fs::write(
        &path,
        "To be or not to be, that is the question. ".repeat(15),
    )
    .unwrap();
    path
}

/// The prompt's token count, from the error `generate` gives with a small context.
fn prompt_tokens(err: &str) -> usize {
    let rest = err
        .split("the prompt has ")
        .nth(1)
        .unwrap_or_else(|| panic!("no prompt size in {err}"));
    rest.split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn the_suggested_context_holds_the_prompt_and_n_and_a_cut_is_said() {
    let text = long_text();
    let err = run_err(
        model_cmd("generate")
            .args(["-t", "1", "-n", "10", "-c", "64", "-f"])
            .arg(&text),
    );
    let n_prompt = prompt_tokens(&err);
    let suggested = format!("-c {}", n_prompt + 10);
    assert!(err.contains(&format!("({suggested})")), "{err}");

    // The suggested context makes all ten tokens.
    let out = run_ok(
        model_cmd("generate")
            .args(["-t", "1", "-n", "10", "--ignore-eos", "--no-echo", "-f"])
            .arg(&text)
            .args(suggested.split(' ')),
    );
    let err = stderr_of(&out);
    assert!(err.contains("generated 10 tok"), "{err}");
    assert!(!err.contains("stopped after"), "{err}");

    // One position short of it: the run stops early and says so.
    let short = (n_prompt + 9).to_string();
    let out = run_ok(
        model_cmd("generate")
            .args([
                "-t",
                "1",
                "-n",
                "10",
                "--ignore-eos",
                "--no-echo",
                "-c",
                &short,
                "-f",
            ])
            .arg(&text),
    );
    let err = stderr_of(&out);
    assert!(
        err.contains(&format!(
            "stopped after 9 of 10 tokens: the context ({short}) is full; {suggested} would \
             hold the prompt and -n"
        )),
        "{err}"
    );
}

/// A quick bench on the shipped model: one repetition, no warm-up, no bandwidth probe.
fn bench(extra: &[&str]) -> std::process::Command {
    let mut cmd = model_cmd("bench");
    cmd.args(["-t", "1", "-r", "1", "--warmup", "0", "--no-membw"])
        .args(extra);
    cmd
}

#[test]
fn bench_takes_the_shared_model_and_context_flags() {
    let out = run_ok(&mut bench(&[
        "-p",
        "16",
        "-n",
        "4",
        "-c",
        "64",
        "--no-pin",
        "--batch-size",
        "32",
        "--npl",
        "1,2",
        "-o",
        "csv",
    ]));
    let csv = stdout_of(&out);
    assert_eq!(csv.lines().filter(|l| l.contains("tg")).count(), 2, "{csv}");
    // -b is --npl's short alias (the bench records use it), and -npl llama-batched-bench's
    // spelling.
    for flag in ["-b", "-npl"] {
        let out = run_ok(&mut bench(&["-p", "0", "-n", "4", flag, "2", "-o", "csv"]));
        assert!(
            stdout_of(&out).contains("tg4"),
            "{flag}: {}",
            stdout_of(&out)
        );
    }
    // --mlock is taken (a host whose memlock limit is too low refuses the lock itself).
    let out = bench(&["-p", "16", "-n", "0", "--mlock"]).output().unwrap();
    let err = stderr_of(&out);
    assert!(out.status.success() || err.contains("mlock"), "{err}");
    assert!(!err.contains("unexpected argument"), "{err}");
}

#[test]
fn bench_refuses_a_context_its_tests_do_not_fit() {
    let err = run_err(&mut bench(&["-p", "64", "-n", "16", "-c", "32"]));
    assert!(err.contains("-c 32 does not hold these tests"), "{err}");
    let suggested = err
        .split("(-c ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("no suggested -c in {err}"))
        .to_owned();
    run_ok(&mut bench(&["-p", "64", "-n", "16", "-c", &suggested]));
    let err = run_err(&mut bench(&[
        "-p",
        "0",
        "-n",
        "4",
        "-b",
        "4",
        "--batch-size",
        "2",
    ]));
    assert!(
        err.contains("--batch-size 2 is less than the 4 sequences"),
        "{err}"
    );
}

#[test]
fn bench_help_says_its_b_counts_sequences() {
    let help = stdout_of(&run_ok(bitnet().args(["bench", "--help"])));
    assert!(help.contains("-b, --npl <N>"), "{help}");
    assert!(help.contains("not the tokens of a batch"), "{help}");
    assert!(help.contains("--batch-size <N>"), "{help}");
    assert!(help.contains("-c, --ctx-size <N>"), "{help}");
}

#[test]
fn the_speculative_bench_counts_its_rounds_apart_from_the_warm_up() {
    let out =
        run_ok(model_cmd("bench").args(["-t", "1", "--verify", "2", "-r", "2", "--warmup", "1"]));
    let err = stderr_of(&out);
    assert!(err.contains("verify 2 positions, warmup 1/1"), "{err}");
    assert!(err.contains("verify 2 positions, rep 2/2"), "{err}");
    assert!(!err.contains("rep 3") && !err.contains("round 3"), "{err}");
}

#[test]
fn negative_numbers_are_invalid_values_saying_what_is_valid() {
    for (flag, value, valid) in [
        ("-c", "-5", "a number of tokens, 0 or more"),
        ("-t", "-1", "0..=4096"),
    ] {
        let out = model_cmd("generate")
            .args(["-p", "hi", flag, value])
            .output()
            .unwrap();
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(&format!("invalid value '{value}'")), "{err}");
        assert!(err.contains(valid), "{err}");
    }
    let out = model_cmd("serve").args(["--port", "-1"]).output().unwrap();
    assert!(
        stderr_of(&out).contains("invalid value '-1'"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn zero_threads_and_context_mean_the_default_and_say_so() {
    let help = stdout_of(&run_ok(bitnet().args(["generate", "--help"])));
    assert!(
        help.contains("0 means the default too, as in llama.cpp"),
        "{help}"
    );
    assert!(
        help.contains("0 means the default too, as llama.cpp's -c 0"),
        "{help}"
    );
    let out = run_ok(model_cmd("generate").args(["-p", "hi", "-n", "2", "-t", "0", "-c", "0"]));
    let err = stderr_of(&out);
    assert!(err.contains("-t 0 means the default"), "{err}");
    assert!(err.contains("-c 0 means the default"), "{err}");
    // The model's own context: 256 tokens for the shipped model, so a -n 300 run stops there.
    let out = run_ok(model_cmd("generate").args([
        "-p",
        "hi",
        "-n",
        "300",
        "-c",
        "0",
        "--ignore-eos",
        "-t",
        "1",
    ]));
    assert!(
        stderr_of(&out).contains("the context (256) is full"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn a_missing_model_is_named_once() {
    let err = run_err(bitnet().args(["generate", "-m", "missing.gguf", "-p", "hi"]));
    assert_eq!(err.matches("missing.gguf").count(), 1, "{err}");
}

#[test]
fn a_text_file_given_as_a_model_shows_its_first_bytes_readably() {
    let path = scratch("round3-magic").join("notes.gguf");
    std::fs::write(&path, "# notes\n").unwrap();
    let err = run_err(bitnet().args(["generate", "-p", "hi", "-m"]).arg(&path));
    assert!(err.contains("not a GGUF file"), "{err}");
    assert!(err.contains("\"# no\" (0x23 0x20 0x6e 0x6f)"), "{err}");
}

#[test]
fn perplexity_reads_a_text_not_a_prompt() {
    let err = run_err(model_cmd("perplexity").args(["-f", "missing.txt"]));
    assert!(err.contains("reading the text file missing.txt"), "{err}");
    assert!(!err.contains("prompt"), "{err}");
}

#[test]
fn a_checkpoint_given_as_a_model_gets_the_converter_s_command() {
    let hf = shipped_model().with_file_name("shakespeare-hf");
    for path in [hf.clone(), hf.join("model.safetensors")] {
        let err = run_err(bitnet().args(["generate", "-p", "hi", "-m"]).arg(&path));
        assert!(
            err.contains(&format!("bitnet-convert {} -o OUT.gguf", hf.display())),
            "{err}"
        );
    }
    // A directory that is no checkpoint is not sent to the converter.
    let dir = scratch("round3-dir");
    let err = run_err(bitnet().args(["generate", "-p", "hi", "-m"]).arg(&dir));
    assert!(err.contains("is a directory, not a GGUF model"), "{err}");
    assert!(!err.contains("bitnet-convert"), "{err}");
}

#[test]
fn tokenize_and_logits_describe_their_own_p() {
    for (sub, says) in [
        ("tokenize", "The text to tokenize"),
        ("logits", "Evaluate this text"),
    ] {
        let help = stdout_of(&run_ok(bitnet().args([sub, "-h"])));
        let p_line = help
            .lines()
            .find(|l| l.trim_start().starts_with("-p, --prompt"))
            .unwrap_or_else(|| panic!("{sub}: no -p in {help}"));
        assert!(p_line.contains(says), "{sub}: {p_line}");
        assert!(!help.contains("--parallel"), "{sub}: {help}");
    }
}

#[test]
fn serve_help_lists_the_built_in_chat_templates() {
    let help = stdout_of(&run_ok(bitnet().args(["serve", "--help"])));
    for t in bitnet_core::chat::BUILTIN_TEMPLATES {
        assert!(
            help.contains(t.name),
            "{} missing from serve --help",
            t.name
        );
    }
}

#[test]
fn serve_with_a_missing_model_never_says_it_listens() {
    use std::process::Stdio;
    let mut child = bitnet()
        .args(["serve", "-m", "missing.gguf", "--port", "0", "-t", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            panic!("serve with a missing model did not exit");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let (stdout, err) = (stdout_of(&out), stderr_of(&out));
    assert!(!out.status.success());
    assert!(!stdout.contains("listening"), "{stdout}");
    assert!(!err.contains("chat page"), "{err}");
    assert_eq!(err.matches("error:").count(), 1, "{err}");
    assert!(err.contains("missing.gguf"), "{err}");
}
