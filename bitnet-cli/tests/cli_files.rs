//! The files the binary writes and reads, end to end: output destinations checked before any
//! work (directories, FIFOs, devices refused; symlinks to files followed; a missing
//! directory an error before the model is touched), no temporary left behind by a failure or
//! Ctrl-C, and a clear message when a mapped model is truncated under a running process.

mod common;

use std::io::Read;
#[cfg(unix)]
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bitnet, entries, run_err, run_ok, scratch, stderr_of, tiny_model};

#[cfg(unix)]
fn mkfifo(path: &Path) {
    let st = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(st.success());
}

#[cfg(unix)]
fn is_fifo(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .file_type()
        .is_fifo()
}

#[cfg(unix)]
fn gen_tiny(out: &Path) -> std::process::Output {
    bitnet()
        .args(["gen-model", "--preset", "tiny", "-o"])
        .arg(out)
        .output()
        .unwrap()
}

// FIFOs, /dev/null and symlinks made without privileges: Unix only.
#[cfg(unix)]
#[test]
fn gen_model_refuses_what_is_not_a_regular_file_before_writing() {
    let d = scratch("gen-dest");
    // A directory: refused up front (it used to be written in full, then fail, leaving
    // DIR.part behind).
    let sub = d.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let out = gen_tiny(&sub);
    assert!(!out.status.success());
    let err = stderr_of(&out);
    assert!(err.contains("is a directory"), "{err}");
    assert!(!err.contains("writing"), "refused before any work: {err}");
    assert_eq!(entries(&d), ["sub"]);
    assert!(entries(&sub).is_empty());

    // A FIFO stays a FIFO (it used to be replaced by a regular file).
    let fifo = d.join("fifo");
    mkfifo(&fifo);
    let err = stderr_of(&gen_tiny(&fifo));
    assert!(err.contains("a FIFO"), "{err}");
    assert!(is_fifo(&fifo));

    // A symlink to a device: the device is refused and the link left alone.
    let link = d.join("null-link");
    std::os::unix::fs::symlink("/dev/null", &link).unwrap();
    let err = stderr_of(&gen_tiny(&link));
    assert!(err.contains("a device"), "{err}");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );

    // A missing directory.
    let err = stderr_of(&gen_tiny(&d.join("nowhere/m.gguf")));
    assert!(err.contains("does not exist"), "{err}");
    assert_eq!(entries(&d), ["fifo", "null-link", "sub"]);
}

// A symlink needs a privilege (or developer mode) on Windows: Unix only.
#[cfg(unix)]
#[test]
fn gen_model_follows_a_symlink_to_a_regular_file() {
    let d = scratch("gen-symlink");
    let real = d.join("real.gguf");
    std::fs::write(&real, b"old").unwrap();
    let link = d.join("link.gguf");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let out = gen_tiny(&link);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link is kept"
    );
    assert!(
        std::fs::metadata(&real).unwrap().len() > 100_000,
        "the file it names is written"
    );
    assert_eq!(entries(&d), ["link.gguf", "real.gguf"]);
}

#[test]
fn gen_model_refuses_one_bit_activations_with_ternary_weights() {
    let d = scratch("gen-act-bits");
    let out = d.join("m.gguf");
    let err = run_err(
        bitnet()
            .args([
                "gen-model",
                "--preset",
                "tiny",
                "--weight-type",
                "i2_s",
                "--act-bits",
                "1",
                "-o",
            ])
            .arg(&out),
    );
    assert!(err.contains("1-bit activations"), "{err}");
    assert!(entries(&d).is_empty(), "no file written");
    // The supported combination still works and runs.
    run_ok(
        bitnet()
            .args([
                "gen-model",
                "--preset",
                "tiny",
                "--weight-type",
                "q1_0",
                "--act-bits",
                "1",
                "-o",
            ])
            .arg(&out),
    );
    run_ok(
        bitnet()
            .args(["generate", "-m"])
            .arg(&out)
            .args(["-p", "hi", "-n", "2", "-t", "1"]),
    );
}

#[test]
fn output_paths_are_checked_before_the_model_is_loaded() {
    let d = scratch("early-checks");
    let missing_model = d.join("no-such-model.gguf");
    // The model does not exist either: the output path is what gets reported, so it was
    // checked first.
    let err = run_err(
        bitnet()
            .args(["logits", "-m"])
            .arg(&missing_model)
            .args(["--tokens", "1,2", "-o"])
            .arg(d.join("nowhere/out.f32")),
    );
    assert!(
        err.contains("nowhere") && err.contains("does not exist"),
        "{err}"
    );
    let err = run_err(
        bitnet()
            .args(["bench", "-m"])
            .arg(&missing_model)
            .args(["-p", "8", "-n", "0", "--json-report"])
            .arg(d.join("nowhere/r.json")),
    );
    assert!(
        err.contains("nowhere") && err.contains("does not exist"),
        "{err}"
    );

    // A failed evaluation leaves an existing output untouched and no temporary behind.
    let out = d.join("out.f32");
    std::fs::write(&out, b"keep").unwrap();
    let err = run_err(
        bitnet()
            .args(["logits", "-m"])
            .arg(tiny_model())
            .args(["--tokens", "1,2,3", "-c", "2", "-o"])
            .arg(&out),
    );
    assert!(err.contains("-c"), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), b"keep");
    assert_eq!(entries(&d), ["out.f32"]);
    let err = run_err(
        bitnet()
            .args(["logits", "-m"])
            .arg(tiny_model())
            .args(["--tokens", "1,2", "-o"])
            .arg(&d),
    );
    assert!(err.contains("is a directory"), "{err}");
}

#[test]
fn ctrl_c_removes_the_partial_output() {
    let d = scratch("interrupt");
    let out = d.join("big.gguf");
    // About 80 MB: long enough to be interrupted half way.
    let mut child = bitnet()
        .args(["gen-model", "--preset", "tiny", "--layers", "400", "-o"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first progress line comes once the temporary exists and writing has begun.
    let mut stderr = child.stderr.take().unwrap();
    let mut first = [0u8; 8];
    stderr.read_exact(&mut first).unwrap();
    assert!(!entries(&d).is_empty(), "a temporary file is being written");
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let mut rest = String::new();
    let _ = stderr.read_to_string(&mut rest);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(entries(&d).is_empty(), "left behind: {:?}", entries(&d));
}

#[test]
fn truncating_a_mapped_model_gives_a_message_naming_it() {
    let d = scratch("sigbus");
    let model = d.join("victim.gguf");
    std::fs::copy(tiny_model(), &model).unwrap();
    let mut child = bitnet()
        .args(["generate", "-m"])
        .arg(&model)
        .args([
            "-p",
            "Once",
            "--no-echo",
            "-n",
            "50000",
            "-c",
            "60000",
            "--ignore-eos",
            "-t",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Generation has started once text arrives; the embedding and head are read from the
    // map for every token from here on.
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&model)
        .unwrap()
        .set_len(0)
        .unwrap();
    let started = Instant::now();
    let drain = std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = stdout.read_to_end(&mut sink);
    });
    let out = child.wait_with_output().unwrap();
    drain.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(60));
    let err = stderr_of(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("victim.gguf") && err.contains("truncated") && err.contains("--no-mmap"),
        "{err}"
    );
}
