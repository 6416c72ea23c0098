//! A new user's first hour, round 3 (issue 57): the context `generate` suggests holds `-n`
//! and a cut is said; `bench` takes the shared flags; help and error texts that name the
//! right thing once; `serve` announces its address only once the model has loaded.

mod common;

use common::{bitnet, stderr_of, stdout_of};

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
