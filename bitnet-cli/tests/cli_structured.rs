//! Structured output from the command line, with llama.cpp's flags: `generate` and `chat`
//! under `-j/--json-schema`, `--grammar`, `--grammar-file`, `--regex`, and what a bad
//! grammar or schema says.

mod common;

use std::io::Write;
use std::process::Stdio;

use common::{bitnet, run_err, run_ok, scratch, shipped_model, stderr_of, stdout_of};
use serde_json::Value;

const SCHEMA: &str = r#"{"type": "object", "properties": {"who": {"type": "string", "maxLength": 10},
  "lines": {"type": "integer", "minimum": 0, "maximum": 999}}, "required": ["who", "lines"]}"#;

fn generate(extra: &[&str]) -> std::process::Command {
    let mut cmd = bitnet();
    cmd.arg("generate")
        .arg("-m")
        .arg(shipped_model())
        .args(["-t", "1", "--no-echo", "-p", "ROMEO:"])
        .args(extra);
    cmd
}

#[test]
fn generate_follows_a_json_schema_and_says_what_the_masks_cost() {
    for seed in ["1", "2", "3"] {
        let out = run_ok(&mut generate(&[
            "-j", SCHEMA, "-n", "300", "-s", seed, "--temp", "1.0",
        ]));
        let text = stdout_of(&out);
        let err = stderr_of(&out);
        assert!(
            err.contains("grammar: ") && err.contains("token masks"),
            "{err}"
        );
        if err.contains("stop: eog") {
            let v: Value = serde_json::from_str(text.trim_end_matches('\n'))
                .unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert!(
                v["who"].as_str().is_some_and(|s| s.chars().count() <= 10),
                "{v}"
            );
            assert!(v["lines"].as_u64().is_some_and(|n| n <= 999), "{v}");
            assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
        } else {
            assert!(
                err.contains("stop: max tokens") || err.contains("stop: context full"),
                "{err}"
            );
        }
    }
}

#[test]
fn generate_follows_gbnf_from_text_and_file_and_a_regex() {
    let grammar = r#"root ::= verdict " " [0-9]+ "."
verdict ::= "guilty" | "innocent""#;
    let dir = scratch("cli-structured");
    let file = dir.join("verdict.gbnf");
    std::fs::write(&file, grammar).unwrap();
    let check = |text: &str| {
        let rest = text
            .strip_prefix("guilty ")
            .or_else(|| text.strip_prefix("innocent "))
            .unwrap_or_else(|| panic!("{text:?}"));
        let digits = rest.strip_suffix('.').unwrap_or_else(|| panic!("{text:?}"));
        assert!(
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()),
            "{text:?}"
        );
    };
    let out = run_ok(&mut generate(&[
        "--grammar",
        grammar,
        "-n",
        "40",
        "-s",
        "4",
    ]));
    check(stdout_of(&out).trim_end_matches('\n'));
    let out = run_ok(&mut generate(&[
        "--grammar-file",
        file.to_str().unwrap(),
        "-n",
        "40",
        "-s",
        "5",
    ]));
    check(stdout_of(&out).trim_end_matches('\n'));
    let out = run_ok(&mut generate(&[
        "--regex",
        "(guilty|innocent) [0-9]+\\.",
        "-n",
        "40",
    ]));
    check(stdout_of(&out).trim_end_matches('\n'));
}

#[test]
fn bad_grammars_and_schemas_are_clear_errors() {
    let err = run_err(&mut generate(&["-j", "{not json"]));
    assert!(
        err.contains("--json-schema") && err.contains("not valid JSON"),
        "{err}"
    );
    let err = run_err(&mut generate(&["-j", r#"{"type": "object", "not": {}}"#]));
    assert!(err.contains("\"not\""), "{err}");
    let err = run_err(&mut generate(&["--grammar", "root ::= \"a\" undefined"]));
    assert!(err.contains("undefined") && err.contains("line 1"), "{err}");
    let err = run_err(&mut generate(&["--grammar-file", "/no/such/file.gbnf"]));
    assert!(err.contains("--grammar-file"), "{err}");
    let err = run_err(&mut generate(&["--grammar", "root ::= \"a\"", "-j", "{}"]));
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn every_chat_reply_follows_the_schema() {
    let mut child = bitnet()
        .arg("chat")
        .arg("-m")
        .arg(shipped_model())
        .args(["-t", "1", "-s", "3", "-n", "300", "-j", SCHEMA])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Who art thou?\nAnd thy lines?\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let text = stdout_of(&out);
    let replies: Vec<&str> = text.lines().filter(|l| l.starts_with('{')).collect();
    assert!(!replies.is_empty(), "{text}");
    for r in replies {
        let v: Value = serde_json::from_str(r).unwrap_or_else(|e| panic!("{r:?}: {e}"));
        assert!(v["who"].is_string(), "{v}");
    }
}

#[test]
fn bench_reports_the_mask_beside_the_step() {
    let out = run_ok(bitnet().arg("bench").arg("-m").arg(shipped_model()).args([
        "-p",
        "0",
        "-n",
        "8",
        "-b",
        "1,2",
        "-r",
        "1",
        "--warmup",
        "0",
        "--no-membw",
        "-t",
        "1",
        "-o",
        "json",
        "--json-schema",
        SCHEMA,
    ]));
    let report: Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{report}");
    for r in rows {
        let us = r["mask_us"].as_f64().unwrap();
        let share = r["mask_share"].as_f64().unwrap();
        assert!(us > 0.0 && share > 0.0 && share < 1.0, "{r}");
    }
    let err = run_err(bitnet().arg("bench").arg("-m").arg(shipped_model()).args([
        "-p",
        "0",
        "-n",
        "4",
        "--json-schema",
        "{not json",
    ]));
    assert!(err.contains("--json-schema"), "{err}");
}
