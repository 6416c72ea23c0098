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
