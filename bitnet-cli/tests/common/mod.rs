//! Helpers shared by the CLI test files: running the built `bitnet` binary, the test data, a
//! scratch directory and a tiny generated model. Each test file uses a subset.
#![allow(dead_code)]

pub mod chat;
pub mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub fn bitnet() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bitnet"))
}

/// A file of the test data (`testdata/`); a missing one fails the test.
pub fn testdata(rel: &str) -> PathBuf {
    bitnet_testdata::path(rel)
}

pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("spawning bitnet");
    assert_succeeded(cmd, out)
}

fn assert_succeeded(cmd: &Command, out: Output) -> Output {
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// As [`run_ok`], and the command must end within `limit`: a hang is killed and fails the
/// test instead of stalling the suite.
pub fn run_ok_within(cmd: &mut Command, limit: std::time::Duration) -> Output {
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning bitnet");
    let start = std::time::Instant::now();
    while child.try_wait().expect("waiting for bitnet").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("reaping bitnet");
            panic!(
                "{cmd:?} did not end within {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("reading bitnet's output");
    assert_succeeded(cmd, out)
}

/// Runs a command that must fail; returns its stderr.
pub fn run_err(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawning bitnet");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "{cmd:?} should have failed; stdout: {}\nstderr: {stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!stderr.contains("panicked"), "{cmd:?} panicked: {stderr}");
    stderr
}

pub fn stdout_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// This test process's scratch directory, removed when the process exits.
pub fn tmp_dir() -> PathBuf {
    bitnet_test_scratch::process_dir().to_path_buf()
}

/// A fresh empty directory under [`tmp_dir`].
pub fn scratch(name: &str) -> PathBuf {
    let d = tmp_dir().join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The names in a directory, sorted.
pub fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A tiny generated model shared by the tests of a file (I2_S weights, F16 tied head,
/// trained context 512, vocabulary 512).
pub fn tiny_model() -> &'static Path {
    static MODEL: OnceLock<PathBuf> = OnceLock::new();
    MODEL.get_or_init(|| {
        let path = tmp_dir().join("tiny-i2_s.gguf");
        run_ok(
            bitnet()
                .args([
                    "gen-model",
                    "--preset",
                    "tiny",
                    "--weight-type",
                    "i2_s",
                    "--seed",
                    "5",
                    "-o",
                ])
                .arg(&path),
        );
        path
    })
}

/// The model the repository ships (`models/shakespeare.gguf`).
pub fn shipped_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/shakespeare.gguf")
}

/// `perplexity` of the shipped model over `text`: `chunks` windows of `ctx` tokens on
/// `threads` threads, against (or writing) the KL-divergence base `base`; the caller adds
/// the flags of the run.
pub fn shipped_perplexity(
    text: &Path,
    ctx: usize,
    chunks: usize,
    threads: usize,
    base: &Path,
) -> Command {
    let mut cmd = bitnet();
    cmd.args(["perplexity", "-m"])
        .arg(shipped_model())
        .arg("-f")
        .arg(text)
        .args(["-c", &ctx.to_string(), "--chunks", &chunks.to_string()])
        .args(["-t", &threads.to_string(), "--kl-divergence-base"])
        .arg(base);
    cmd
}
