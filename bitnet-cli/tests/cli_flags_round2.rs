//! llama.cpp's spellings through the binary (those that mean the same here are taken, those
//! with no meaning here refused with the reason, never misparsed), and what `--help` shows:
//! the spellings, every flag described, examples and where a real model comes from.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::{bitnet, run_err, run_ok, scratch, shipped_model, stderr_of, stdout_of};

fn generate(extra: &[&str]) -> Output {
    run_ok(
        bitnet()
            .args(["generate", "-m"])
            .arg(shipped_model())
            .args(["-t", "1", "-p", "ROMEO:", "-n", "24", "-s", "1"])
            .args(extra),
    )
}

/// A piped chat: `input` on standard input.
fn chat(extra: &[&str], input: &str) -> Output {
    let mut child = bitnet()
        .args(["chat", "-m"])
        .arg(shipped_model())
        .args(["-t", "1", "-s", "7", "-n", "16", "--no-history"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning bitnet chat");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    out
}

/// Runs a command that clap must not reach: refused before parsing, with status 2.
fn refused(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawning bitnet");
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{cmd:?}: {err}");
    assert!(!err.contains("invalid value"), "a misparse: {err}");
    err
}

fn model_cmd(sub: &str) -> Command {
    let mut cmd = bitnet();
    cmd.args([sub, "-m"]).arg(shipped_model());
    cmd
}

#[test]
fn system_prompt_spellings_set_the_system_prompt() {
    let dir = scratch("flags-system");
    for spelling in [
        vec!["-sys", "Speak in verse."],
        vec!["--system-prompt", "Speak in verse."],
        vec!["--system-prompt=Speak in verse."],
    ] {
        let saved = dir.join("conv.json");
        chat(&spelling, &format!("/save {}\n", saved.display()));
        let json = std::fs::read_to_string(&saved).unwrap();
        assert!(
            json.contains("\"system\"") && json.contains("Speak in verse."),
            "{spelling:?}: {json}"
        );
        std::fs::remove_file(&saved).unwrap();
    }
}

#[test]
fn reverse_prompt_is_stop() {
    let free = stdout_of(&generate(&[]));
    let continuation = free.strip_prefix("ROMEO:").unwrap();
    // A stop text that appears a few characters into the continuation.
    let cut = continuation
        .char_indices()
        .map(|(i, _)| i)
        .find(|&i| {
            i >= 4
                && continuation[i..]
                    .chars()
                    .next()
                    .is_some_and(char::is_alphanumeric)
        })
        .unwrap_or_else(|| panic!("no text to stop at: {free:?}"));
    let stop: String = continuation[cut..].chars().take(3).collect();
    let by_stop = stdout_of(&generate(&["--stop", &stop]));
    assert!(by_stop.len() < free.len(), "{stop:?} stops it: {by_stop:?}");
    for spelling in [["-r", stop.as_str()], ["--reverse-prompt", stop.as_str()]] {
        assert_eq!(stdout_of(&generate(&spelling)), by_stop, "{spelling:?}");
    }
    let eq = format!("-r={stop}");
    assert_eq!(stdout_of(&generate(&[&eq])), by_stop);
    // chat takes it too, as its own --stop.
    let by_stop = chat(&["--stop", &stop], "Good morrow\n");
    let by_r = chat(&["-r", &stop], "Good morrow\n");
    assert_eq!(stdout_of(&by_r), stdout_of(&by_stop));
}

#[test]
fn no_display_prompt_is_no_echo() {
    let echoed = stdout_of(&generate(&[]));
    let quiet = stdout_of(&generate(&["--no-display-prompt"]));
    assert_eq!(quiet, stdout_of(&generate(&["--no-echo"])));
    assert_eq!(echoed, format!("ROMEO:{quiet}"));
}

#[test]
fn flags_with_no_meaning_here_are_refused_with_the_reason() {
    for (sub, args, says) in [
        ("chat", &["-ngl", "99"][..], "CPU"),
        ("generate", &["-ngl", "99"][..], "no GPU layers"),
        ("serve", &["--n-gpu-layers", "99"][..], "no GPU layers"),
        ("chat", &["--gpu-layers=99"][..], "no GPU layers"),
        ("chat", &["-cnv"][..], "bitnet chat"),
        ("generate", &["--conversation"][..], "bitnet chat"),
        ("generate", &["-no-cnv"][..], "bitnet generate"),
        ("chat", &["-fa", "on"][..], "flash"),
        (
            "chat",
            &["-sysf", "sys.txt"][..],
            "--system \"$(cat FILE)\"",
        ),
        (
            "chat",
            &["-hf", "microsoft/bitnet-b1.58-2B-4T"][..],
            "Run a real model",
        ),
        ("chat", &["-tb", "2"][..], "-t"),
        ("chat", &["-mli"][..], "multi-line"),
    ] {
        let err = refused(model_cmd(sub).args(args));
        assert!(err.contains(args[0].split('=').next().unwrap()), "{err}");
        assert!(err.contains(says), "{sub} {args:?}: {err}");
    }
    // A spelling whose meaning this command lacks says so.
    let err = refused(model_cmd("generate").args(["-sys", "Be brief.", "-p", "Hi"]));
    assert!(
        err.contains("--system") && err.contains("bitnet generate"),
        "{err}"
    );
    let err = refused(model_cmd("serve").args(["-r", "User:"]));
    assert!(err.contains("--stop"), "{err}");
}

#[test]
fn a_single_dash_word_is_never_split_into_a_flag_and_a_value() {
    // llama.cpp writes --temp; `-temp` would be -t with the value "emp".
    let err = refused(model_cmd("generate").args(["-temp", "0.5", "-p", "Hi"]));
    assert!(err.contains("-temp") && err.contains("-t emp"), "{err}");
    let err = refused(model_cmd("chat").args(["-ctxk", "512"]));
    assert!(
        err.contains("-c txk") && err.contains("two dashes"),
        "{err}"
    );
    // ... while values, glued numbers and negative numbers stay as they are.
    let out = run_ok(model_cmd("generate").args([
        "-t1", "-n8", "-s", "-1", "--temp", "-1", "-p", "-sys", "--stop", "-ngl",
    ]));
    assert!(stdout_of(&out).starts_with("-sys"), "{}", stdout_of(&out));
    let out = run_ok(model_cmd("generate").args(["-t", "1", "-n", "-1", "-c", "24", "-p", "Hi"]));
    assert!(
        stderr_of(&out).contains("context full"),
        "{}",
        stderr_of(&out)
    );
    // bench's own -r (repetitions, as llama-bench's) is not --stop.
    let out = run_ok(model_cmd("bench").args([
        "-p",
        "0",
        "-n",
        "2",
        "-r",
        "1",
        "-t",
        "1",
        "--warmup",
        "0",
        "--no-membw",
    ]));
    assert!(stdout_of(&out).contains("tg2"), "{}", stdout_of(&out));
    // The text of tokenize may start with '-'.
    let out = run_ok(model_cmd("tokenize").arg("-ngl"));
    assert!(stdout_of(&out).starts_with('['), "{}", stdout_of(&out));
    // The cache spellings still reach their flags.
    let err = run_err(model_cmd("generate").args(["-ctk", "q9", "-p", "Hi"]));
    assert!(err.contains("unknown KV cache type \"q9\""), "{err}");
}

fn help(args: &[&str]) -> String {
    stdout_of(&run_ok(bitnet().args(args)))
}

/// The description clap prints for `flag` in `help` (its line and the indented ones after).
fn description<'a>(help: &'a str, flag: &str) -> &'a str {
    let at = help
        .find(&format!("{flag} "))
        .or_else(|| help.find(&format!("{flag}\n")))
        .unwrap_or_else(|| panic!("{flag} is not in: {help}"));
    let rest = &help[at + flag.len()..];
    let end = rest.find("\n  -").unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn help_describes_every_flag_and_names_the_llama_cpp_spellings() {
    for sub in [
        "chat",
        "generate",
        "serve",
        "perplexity",
        "logits",
        "bench",
        "tokenize",
    ] {
        let h = help(&[sub, "--help"]);
        let m = description(&h, "--model");
        let words = m.split_once('>').map_or(m, |(_, d)| d);
        assert!(
            words.chars().any(char::is_alphabetic),
            "{sub}: -m has no description: {m:?}"
        );
    }
    for sub in ["chat", "generate"] {
        let h = help(&[sub, "--help"]);
        for flag in ["--top-k", "--top-p", "--min-p", "--repeat-penalty"] {
            let d = description(&h, flag);
            let words = d.split_once('>').map_or(d, |(_, d)| d);
            let words = words.split('[').next().unwrap();
            assert!(
                words.chars().filter(|c| c.is_alphabetic()).count() > 8,
                "{sub}: {flag} has no description: {d:?}"
            );
        }
        for spelling in [
            "-ctk = --cache-type-k",
            "-ctv = --cache-type-v",
            "-r, --reverse-prompt = --stop",
        ] {
            assert!(h.contains(spelling), "{sub} --help names {spelling}: {h}");
        }
    }
    assert!(help(&["chat", "--help"]).contains("-sys, --system-prompt = --system"));
    assert!(help(&["generate", "--help"]).contains("-np = --parallel"));
    assert!(help(&["serve", "--help"]).contains("-np = --parallel"));
    assert!(help(&["generate", "--help"]).contains("--no-display-prompt = --no-echo"));
}

#[test]
fn top_level_help_has_examples_and_a_pointer_to_a_real_model() {
    let h = help(&["--help"]);
    let examples: Vec<&str> = h
        .lines()
        .filter(|l| l.trim_start().starts_with("bitnet"))
        .collect();
    assert!(examples.len() >= 3, "{h}");
    assert!(
        examples
            .iter()
            .any(|l| l.contains("chat -m models/shakespeare.gguf")),
        "{h}"
    );
    assert!(examples.iter().any(|l| l.contains("serve")), "{h}");
    assert!(examples.iter().any(|l| l.contains("bitnet-convert")), "{h}");
    // The model the examples use is the one that ships, and the section they point at
    // exists in the README.
    for l in &examples {
        if let Some(m) = l.split("-m ").nth(1) {
            let path = m.split_whitespace().next().unwrap();
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            assert!(root.join(path).exists(), "{l}");
        }
    }
    assert!(h.contains("\"Run a real model\""), "{h}");
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"),
    )
    .unwrap();
    assert!(
        readme
            .lines()
            .any(|l| l.starts_with('#') && l.contains("Run a real model"))
    );
}

fn readme() -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
        .unwrap()
}

/// The README's `bitnet ...` commands: the lines of its shell blocks and its inline code.
fn readme_commands(readme: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_block = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            commands.push(line.trim().to_owned());
        } else {
            commands.extend(line.split('`').skip(1).step_by(2).map(str::to_owned));
        }
    }
    commands.retain(|c| c.starts_with("bitnet ") || c.starts_with("cargo install"));
    commands
}

#[test]
fn readme_installs_at_the_locked_versions() {
    let commands = readme_commands(&readme());
    let installs: Vec<&String> = commands
        .iter()
        .filter(|c| c.starts_with("cargo install"))
        .collect();
    assert!(!installs.is_empty());
    for line in installs {
        for install in line.split("&&") {
            assert!(install.contains(" --locked"), "{install}");
        }
    }
}

#[test]
fn readme_commands_use_flags_their_command_has() {
    let readme = readme();
    let mut checked = 0;
    for command in readme_commands(&readme)
        .into_iter()
        .filter(|c| c.starts_with("bitnet "))
    {
        let words: Vec<&str> = command.split_whitespace().collect();
        let Some(sub) = words.get(1).filter(|s| !s.starts_with('-')) else {
            continue;
        };
        let help = help(&[sub, "--help"]);
        for flag in words.iter().filter(|w| w.starts_with("--")) {
            let flag = flag.split('=').next().unwrap();
            assert!(
                help.match_indices(flag).any(|(at, _)| {
                    !help[at + flag.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '-')
                }),
                "README: `{command}`: `bitnet {sub}` has no {flag}"
            );
            checked += 1;
        }
    }
    assert!(checked > 10, "{checked} flags checked");
}

/// `inspect` takes the file as every other command does (`-m FILE`), as well as bare.
#[test]
fn inspect_takes_the_model_as_m_too() {
    let bare = run_ok(bitnet().arg("inspect").arg(shipped_model()));
    let flagged = run_ok(bitnet().args(["inspect", "-m"]).arg(shipped_model()));
    assert_eq!(bare.stdout, flagged.stdout);
    assert!(String::from_utf8_lossy(&flagged.stdout).contains("architecture: bitnet-b1.58"));
    let both = bitnet()
        .args(["inspect", "-m"])
        .arg(shipped_model())
        .arg(shipped_model())
        .output()
        .unwrap();
    assert!(!both.status.success(), "a file given twice is refused");
    let none = bitnet().arg("inspect").output().unwrap();
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("required"));
}
