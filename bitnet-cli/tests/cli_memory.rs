//! Peak memory of a run against the file it runs: a tensor repacked for the kernels must not
//! stay resident twice (its mapped source pages are given back once repacked), and
//! `--no-mmap` must not hold the whole file beside its own copy. Memory, not time: the
//! figures are the kernel's high-water mark (`VmHWM`), which load and machine speed do not
//! move.

mod common;

use common::{bitnet, run_ok, scratch, stderr_of};

/// The `peak RSS N UNIT` of generate's figures line, in bytes.
fn peak_rss(stderr: &str) -> f64 {
    let tail = stderr
        .split("peak RSS ")
        .nth(1)
        .unwrap_or_else(|| panic!("no peak RSS in {stderr}"));
    let mut it = tail.split_whitespace();
    let v: f64 = it.next().unwrap().parse().unwrap();
    let unit = it.next().unwrap();
    let scale = match unit {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        u => panic!("unit {u}"),
    };
    v * scale
}

#[test]
fn repacked_weights_are_not_resident_twice() {
    // 1bitLLM-large shapes, 12 layers: ~90 MB of TQ2_0 projections that get repacked,
    // beside a 98 MB F16 embedding that is used in place (mmap) or copied (--no-mmap).
    let dir = scratch("memory");
    let model = dir.join("large.gguf");
    run_ok(
        bitnet()
            .args(["gen-model", "--preset", "large", "--layers", "12", "-o"])
            .arg(&model),
    );
    let file = std::fs::metadata(&model).unwrap().len() as f64;
    let run = |extra: &[&str]| {
        let out = run_ok(
            bitnet()
                .args(["generate", "-m"])
                .arg(&model)
                .args(["-p", "a", "-n", "2", "--greedy", "-c", "64", "-t", "1"])
                .args(extra),
        );
        peak_rss(&stderr_of(&out))
    };
    let slack = 48.0 * 1024.0 * 1024.0;
    let mapped = run(&[]);
    // Mapped: the repacked projections (about their file size, a third of the file), the
    // F16 head (read whole every token, a third) and the few embedding rows read; the
    // projections' file pages were released (before, they stayed: about the whole file).
    assert!(
        mapped < 0.8 * file + slack / 2.0,
        "mapped run peaked at {mapped} bytes for a {file}-byte file"
    );
    // Without a map: the copy of what is still needed, never the whole file beside it.
    let read = run(&["--no-mmap"]);
    assert!(
        read < 1.1 * file + slack,
        "--no-mmap run peaked at {read} bytes for a {file}-byte file (twice would be {})",
        2.0 * file
    );
}
