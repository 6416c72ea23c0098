//! Helpers of the chat test files: the piped chat on the shipped model, a model slow enough
//! to interrupt, and a pty session's clean end.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

#[cfg(unix)]
use rexpect::session::PtySession;

use super::{bitnet, run_ok, shipped_model, stderr_of, stdout_of, tmp_dir};

/// How long a pty test waits for any one expected text.
pub const TIMEOUT_MS: u64 = 60_000;

/// `bitnet chat` on the shipped model, seed 7, one thread, `extra` flags.
pub fn chat_cmd(extra: &[&str]) -> Command {
    let mut cmd = bitnet();
    cmd.arg("chat")
        .arg("-m")
        .arg(shipped_model())
        .args(["-s", "7", "-t", "1"])
        .args(extra);
    cmd
}

/// Runs `cmd` with `input` on standard input; it must not panic.
pub fn piped(mut cmd: Command, input: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning bitnet chat");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        !stdout_of(&out).contains("panicked") && !stderr_of(&out).contains("panicked"),
        "{}",
        stderr_of(&out)
    );
    out
}

/// A piped chat on the shipped model (see [`chat_cmd`]) with `input` on standard input.
pub fn chat(extra: &[&str], input: &str) -> Output {
    piped(chat_cmd(extra), input)
}

/// A model slow enough (2 layers of BitNet-large widths, the shipped model's vocabulary)
/// that a long reply is still running, or a long prompt still being read, when Ctrl-C
/// arrives.
pub fn slow_model() -> &'static Path {
    static MODEL: OnceLock<PathBuf> = OnceLock::new();
    MODEL.get_or_init(|| {
        let path = tmp_dir().join("chat-slow.gguf");
        run_ok(
            bitnet()
                .args(["gen-model", "--preset", "large", "--layers", "2"])
                .args(["--weight-type", "i2_s", "--vocab"])
                .arg(shipped_model())
                .arg("-o")
                .arg(&path),
        );
        path
    })
}

/// Waits for the chat to end and checks it exited with status 0.
#[cfg(unix)]
pub fn exits_cleanly(p: &mut PtySession) {
    p.exp_eof().expect("the chat ends");
    let status = p.process.wait().expect("exit status");
    assert!(
        format!("{status:?}").ends_with(", 0)"),
        "exit status {status:?}"
    );
}
