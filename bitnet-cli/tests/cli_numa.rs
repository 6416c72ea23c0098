//! `--numa` end to end on this machine (one node here): every mode runs and gives the text
//! of a run without it, a bad mode is refused by name, and `bench` reports the node layout.
//! The modes' placements on two-node and CPU-less-node topologies are unit tests
//! (`bitnet_core::numa`), on fake sysfs trees.

mod common;

use common::{bitnet, run_err, run_ok, shipped_model, stderr_of, stdout_of};

fn generate(extra: &[&str]) -> String {
    stdout_of(&run_ok(
        bitnet()
            .args(["generate", "-m"])
            .arg(shipped_model())
            .args(["-p", "ROMEO:", "-n", "24", "--greedy", "-t", "2"])
            .args(extra),
    ))
}

#[test]
fn every_mode_runs_and_changes_no_token() {
    let want = generate(&[]);
    for mode in ["distribute", "isolate", "numactl"] {
        assert_eq!(generate(&["--numa", mode]), want, "--numa {mode}");
    }
    let err = run_err(
        bitnet()
            .args(["generate", "-m"])
            .arg(shipped_model())
            .args(["-p", "x", "--numa", "spread"]),
    );
    assert!(err.contains("distribute, isolate or numactl"), "{err}");
}

#[test]
fn bench_reports_the_node_layout() {
    let out = run_ok(bitnet().args(["bench", "-m"]).arg(shipped_model()).args([
        "-p",
        "8",
        "-n",
        "8",
        "-r",
        "1",
        "--no-membw",
        "--numa",
        "isolate",
    ]));
    let text = stdout_of(&out);
    let line = text
        .lines()
        .find(|l| l.starts_with("NUMA: "))
        .unwrap_or_else(|| panic!("no NUMA line: {text}{}", stderr_of(&out)));
    assert!(
        line.contains(" node") && line.ends_with("; --numa isolate"),
        "{line}"
    );
}
