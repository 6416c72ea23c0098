//! Many sequences from the command line: `generate --parallel` with several prompts, and
//! `bench -b` / `--mixed` decoding sequences together.

mod common;

use common::{bitnet, run_err, run_ok, run_ok_within, scratch, stderr_of, stdout_of, tiny_model};

fn generate(extra: &[&str]) -> std::process::Output {
    run_ok(
        bitnet()
            .args(["generate", "-m"])
            .arg(tiny_model())
            .args(["-t", "1", "--greedy", "-n", "8"])
            .args(extra),
    )
}

#[test]
fn parallel_prompts_print_each_answer_in_order_as_alone() {
    let prompts = ["Once upon a time", "- a list item", "The king said"];
    let alone: Vec<String> = prompts
        .iter()
        .map(|p| stdout_of(&generate(&["-p", p])))
        .collect();
    let mut args = vec!["--parallel", "2"];
    for p in &prompts {
        args.extend(["-p", p]);
    }
    let together = generate(&args);
    let want = alone
        .iter()
        .map(|a| a.trim_end_matches('\n'))
        .collect::<Vec<_>>()
        .join("\n\n")
        + "\n";
    assert_eq!(stdout_of(&together), want);
    assert!(stderr_of(&together).contains("3 prompts, 2 at a time"));

    // One prompt a line from a file, the same answers.
    let file = scratch("parallel").join("prompts.txt");
    std::fs::write(&file, prompts.join("\n") + "\n\n").unwrap();
    let from_file = generate(&["--parallel", "3", "-f", file.to_str().unwrap()]);
    assert_eq!(stdout_of(&from_file), want);

    // llama.cpp's `-np N` and `-np=N` are --parallel, not `-n p`.
    let mut np = vec!["-np", "2"];
    let mut np_eq = vec!["-np=3"];
    for p in &prompts {
        np.extend(["-p", p]);
        np_eq.extend(["-p", p]);
    }
    let out = generate(&np);
    assert_eq!(stdout_of(&out), want);
    assert!(stderr_of(&out).contains("3 prompts, 2 at a time"));
    let out = generate(&np_eq);
    assert_eq!(stdout_of(&out), want);
    assert!(stderr_of(&out).contains("3 prompts, 3 at a time"));

    // Several -p without --parallel is an error that says what to do.
    let err = run_err(
        bitnet()
            .args(["generate", "-m"])
            .arg(tiny_model())
            .args(["-p", "a", "-p", "b"]),
    );
    assert!(err.contains("--parallel"), "{err}");
}

#[test]
fn bench_decodes_batches_and_mixed_runs() {
    let out = run_ok(
        bitnet()
            .args(["bench", "-m"])
            .arg(tiny_model())
            .args([
                "-p", "16", "-n", "8", "-b", "1,4", "-r", "1", "--warmup", "0",
            ])
            .args(["-t", "1", "--no-membw", "--mixed", "-o", "json"]),
    );
    let report: serde_json::Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    let rows = report["rows"].as_array().unwrap();
    let find = |test: &str, batch: u64| {
        rows.iter()
            .find(|r| r["test"] == test && r["batch"] == batch)
            .unwrap_or_else(|| panic!("no {test} b{batch} row in {rows:?}"))
    };
    let tg1 = find("tg", 1);
    let tg4 = find("tg", 4);
    assert!(tg1["mean_tps"].as_f64().unwrap() > 0.0);
    let per_seq = tg4["per_seq_tps"].as_f64().unwrap();
    let agg = tg4["mean_tps"].as_f64().unwrap();
    assert!(
        (per_seq * 4.0 - agg).abs() < 1e-6 * agg,
        "{per_seq} x 4 != {agg}"
    );
    assert!(tg4["pp_share"].as_f64().unwrap() > 0.0);
    let mixed = find("mixed", 4);
    assert_eq!(mixed["n_prompt"], 16);
    assert!(mixed["prefill_tps"].as_f64().unwrap() > 0.0);
    assert!(mixed["decode_tps"].as_f64().unwrap() > 0.0);
    // The markdown table names the batched figures.
    let md = run_ok(
        bitnet()
            .args(["bench", "-m"])
            .arg(tiny_model())
            .args(["-p", "0", "-n", "4", "-b", "2", "-r", "1", "--warmup", "0"])
            .args(["-t", "1", "--no-membw"]),
    );
    let text = stdout_of(&md);
    assert!(text.contains("t/s per sequence"), "{text}");
    // Zero sequences is refused before anything runs.
    let err = run_err(
        bitnet()
            .args(["bench", "-m"])
            .arg(tiny_model())
            .args(["-b", "0"]),
    );
    assert!(err.contains("-b 0"), "{err}");
}

#[test]
fn bench_measures_at_a_context_depth() {
    let out = run_ok(
        bitnet()
            .args(["bench", "-m"])
            .arg(tiny_model())
            .args([
                "-p", "8", "-n", "4", "-d", "0,64", "-r", "1", "--warmup", "0",
            ])
            .args(["-t", "1", "--no-membw", "-o", "json"]),
    );
    let report: serde_json::Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "pp and tg at two depths: {rows:?}");
    for (test, depth) in [("pp", 0), ("pp", 64), ("tg", 0), ("tg", 64)] {
        let row = rows
            .iter()
            .find(|r| r["test"] == test && r["n_depth"].as_u64().unwrap_or(0) == depth)
            .unwrap_or_else(|| panic!("no {test} @ d{depth} row in {rows:?}"));
        assert!(row["mean_tps"].as_f64().unwrap() > 0.0);
    }
    let md = run_ok(
        bitnet()
            .args(["bench", "-m"])
            .arg(tiny_model())
            .args(["-p", "0", "-n", "4", "-d", "32", "-r", "1", "--warmup", "0"])
            .args(["-t", "1", "--no-membw"]),
    );
    assert!(stdout_of(&md).contains("tg4 @ d32"), "{}", stdout_of(&md));
    // A depth past the trained context (512 for the tiny model) is refused up front.
    let err = run_err(
        bitnet()
            .args(["bench", "-m"])
            .arg(tiny_model())
            .args(["-p", "0", "-n", "4", "-d", "600"]),
    );
    assert!(err.contains("does not fit"), "{err}");
    // A depth at the trained context whose test runs past it is measured, with a warning.
    let edge = run_ok(
        bitnet()
            .args(["bench", "-m"])
            .arg(tiny_model())
            .args([
                "-p", "0", "-n", "4", "-d", "512", "-r", "1", "--warmup", "0",
            ])
            .args(["-t", "1", "--no-membw"]),
    );
    assert!(
        stdout_of(&edge).contains("tg4 @ d512"),
        "{}",
        stdout_of(&edge)
    );
    assert!(
        stderr_of(&edge).contains("past the 512 tokens"),
        "{}",
        stderr_of(&edge)
    );
}

/// `--interleave`: the tg repetitions of two K/V type pairs run in turn (the second round in
/// reverse order), and the second row carries its round-by-round ratios against the first.
#[test]
fn bench_interleaves_configurations_round_by_round() {
    let out = run_ok(
        bitnet()
            .args(["bench", "-m"])
            .arg(tiny_model())
            .args(["-p", "0", "-n", "4", "-d", "32", "-r", "3", "--warmup", "0"])
            .args(["-t", "1", "--no-membw", "-ctk", "f16,q8_0", "--interleave"])
            .args(["-o", "json"]),
    );
    let report: serde_json::Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["type_k"], "f16");
    assert!(rows[0].get("paired").is_none(), "{:?}", rows[0]);
    assert_eq!(rows[1]["type_k"], "q8_0");
    let paired = &rows[1]["paired"];
    assert_eq!(paired["against"], "t1 K f16 V f16");
    assert_eq!(paired["rounds"], 3);
    // The ratios are taken round by round from the two rows' own samples.
    let samples = |r: &serde_json::Value| -> Vec<f64> {
        r["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    let (base, other) = (samples(&rows[0]), samples(&rows[1]));
    let mut ratios: Vec<f64> = other.iter().zip(&base).map(|(o, b)| o / b).collect();
    ratios.sort_by(f64::total_cmp);
    let close = |a: f64, b: &serde_json::Value| (a - b.as_f64().unwrap()).abs() < 1e-9 * a;
    assert!(
        close(ratios[1], &paired["median_ratio"]),
        "{ratios:?} {paired}"
    );
    assert!(
        close(ratios[0], &paired["min_ratio"]),
        "{ratios:?} {paired}"
    );
    assert!(
        close(ratios[2], &paired["max_ratio"]),
        "{ratios:?} {paired}"
    );
    let faster = ratios.iter().filter(|&&r| r > 1.0).count() as u64;
    assert_eq!(paired["faster"].as_u64(), Some(faster));
    // Rounds alternate their order: f16 first in the first round, q8_0 first in the second.
    let err = stderr_of(&out);
    let at = |what: &str| {
        err.find(what)
            .unwrap_or_else(|| panic!("no {what:?} in {err}"))
    };
    assert!(
        at("K f16 V f16 rep 1/3") < at("K q8_0 V f16 rep 1/3"),
        "{err}"
    );
    assert!(
        at("K q8_0 V f16 rep 2/3") < at("K f16 V f16 rep 2/3"),
        "{err}"
    );
    // The markdown table says it in words.
    let md = run_ok(
        bitnet()
            .args(["bench", "-m"])
            .arg(tiny_model())
            .args(["-p", "0", "-n", "4", "-r", "2", "--warmup", "0", "-t", "1"])
            .args(["--no-membw", "-ctv", "f16,q4_0", "--interleave"]),
    );
    let text = stdout_of(&md);
    assert!(text.contains("vs t1 K f16 V f16, faster in "), "{text}");
}

/// Prompts that run their sequences to a small context one after another: the second's
/// prompt matches a part of a block the first left cached, which used to cost the one block
/// the pool did not have, and the run spun at full CPU forever.
#[test]
fn parallel_prompts_that_fill_the_context_in_turn_finish() {
    for extra in [
        &["--parallel", "1", "-p", "hi", "-p", "b", "-n", "-1"][..],
        &[
            "--parallel",
            "3",
            "-p",
            "hi",
            "-p",
            "a",
            "-p",
            "b",
            "-n",
            "300",
        ][..],
    ] {
        let out = run_ok_within(
            bitnet()
                .args(["generate", "-m"])
                .arg(tiny_model())
                .args(["-t", "1", "--no-pin", "-s", "1", "-c", "64", "--ignore-eos"])
                .args(extra),
            std::time::Duration::from_secs(60),
        );
        let err = stderr_of(&out);
        assert!(err.contains("prompts"), "{extra:?}: {err}");
    }
}
