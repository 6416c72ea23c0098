//! The chat's terminal round two (issue 32): `~` in `/save` and `/load`, `/set seed -1`,
//! the file's template named (chat and `inspect`), singular counts, `/system` with none set,
//! `/help` listing every way out, Tab completion, the line editor kept out of redirected
//! output, and `/show info`, `/show template`, `/show parameters`.

// On a pseudo-terminal (rexpect), which these tests have on Unix only; the Windows console is
// tested by hand (docs/windows.md).
#![cfg(unix)]

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::chat::{TIMEOUT_MS, chat, chat_cmd, exits_cleanly, piped};
use common::{bitnet, run_ok, scratch, shipped_model, stderr_of, stdout_of};
use rexpect::session::{PtySession, spawn_command};

fn succeeded(out: &Output) -> (String, String) {
    assert!(out.status.success(), "{}", stderr_of(out));
    (stdout_of(out), stderr_of(out))
}

#[test]
fn save_and_load_read_a_leading_tilde_as_home() {
    let home = scratch("term-home");
    let mut cmd = chat_cmd(&["-n", "4"]);
    cmd.env("HOME", &home);
    let out = piped(cmd, "Hello\n/save ~/conv.json\n/load ~/conv.json\n/show\n");
    let (stdout, err) = succeeded(&out);
    let saved = home.join("conv.json");
    assert!(saved.is_file(), "{err}");
    // The KV goes beside the conversation, at the expanded path too.
    assert!(
        err.contains(&format!("(saved 2 messages to {}; KV of ", saved.display()))
            && home.join("conv.json.kv").is_file(),
        "{err}"
    );
    assert!(err.contains("(loaded 2 messages from"), "{err}");
    assert!(err.contains("tokens kept)"), "{err}");
    assert!(stdout.contains("conversation: 2 messages"), "{stdout}");

    // Without HOME, ~ means nothing: a clear error, not a file named "~".
    let mut cmd = chat_cmd(&[]);
    cmd.env_remove("HOME").current_dir(&home);
    let out = piped(cmd, "/save ~/other.json\n");
    assert!(!out.status.success());
    let err = stderr_of(&out);
    assert!(err.contains("HOME is not set"), "{err}");
    assert!(!home.join("~").exists());
}

/// The seed a `/set seed -1` picked, from its note.
fn picked_seed(err: &str) -> u64 {
    let tail = err
        .split("seed = ")
        .nth(1)
        .unwrap_or_else(|| panic!("no seed note: {err}"));
    let n: String = tail.chars().take_while(char::is_ascii_digit).collect();
    assert!(
        tail[n.len()..].starts_with(", picked at random: /set seed "),
        "{err}"
    );
    n.parse().unwrap()
}

#[test]
fn set_seed_minus_one_picks_a_seed_that_repeats_the_reply() {
    let args = ["--temp", "1.5", "-n", "12"];
    let out = chat(&args, "/set seed -1\nHello\n/show\n");
    let (stdout, err) = succeeded(&out);
    let seed = picked_seed(&err);
    assert!(stdout.contains(&format!(" seed {seed} ")), "{stdout}");
    // Two picks differ (a fixed "random" seed would not be random).
    let again = chat(&[], "/set seed -1\n");
    assert_ne!(picked_seed(&succeeded(&again).1), seed);
    // The seed it named gives the same reply again.
    let out = chat(&args, &format!("/set seed {seed}\nHello\n/show\n"));
    assert_eq!(succeeded(&out).0, stdout);
}

#[test]
fn the_files_template_is_named_in_chat_and_inspect() {
    let (stdout, _) = succeeded(&chat(&[], "/show\n"));
    assert!(
        stdout.contains("template: bitnet (the file's template)"),
        "{stdout}"
    );
    let out = run_ok(bitnet().arg("inspect").arg(shipped_model()));
    let text = stdout_of(&out);
    assert!(
        text.contains("chat template: bitnet (the file's template), 200 bytes"),
        "{text}"
    );
    assert!(
        !text.contains("{{ bos_token }}"),
        "the text only on request"
    );
    let out = run_ok(
        bitnet()
            .arg("inspect")
            .arg(shipped_model())
            .arg("--template"),
    );
    let text = stdout_of(&out);
    assert!(
        text.contains("\n  {{ bos_token }}{% for message in messages %}"),
        "{text}"
    );
    let out = run_ok(bitnet().arg("inspect").arg(shipped_model()).arg("--json"));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["chat_template"]["family"], "bitnet");
    assert!(
        json["chat_template"]["text"]
            .as_str()
            .unwrap()
            .contains("'Assistant: '")
    );
}

#[test]
fn one_is_singular() {
    let dir = scratch("term-plural");
    let saved = dir.join("one.json");
    let script = format!("/show\n/save {0}\n/load {0}\n", saved.display());
    let (stdout, err) = succeeded(&chat(&["--system", "Be brief."], &script));
    assert!(stdout.contains("conversation: 1 message |"), "{stdout}");
    assert!(err.contains("(saved 1 message to"), "{err}");
    assert!(err.contains("(loaded 1 message from"), "{err}");
}

#[test]
fn one_thread_is_singular_in_the_figures() {
    let out = run_ok(
        bitnet()
            .args(["generate", "-m"])
            .arg(shipped_model())
            .args(["-p", "ROMEO:", "-n", "4", "-t", "1", "--verbose"]),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("| 1 thread, "), "{err}");
    assert!(!err.contains("1 threads"), "{err}");
}

#[test]
fn system_without_a_prompt_and_help_lists_every_way_out() {
    let (stdout, err) = succeeded(&chat(&[], "/system\n/help\n"));
    assert!(err.contains("there is no system prompt"), "{err}");
    assert!(!err.contains("removed"), "{err}");
    for cmd in ["/bye", "/exit", "/quit"] {
        assert!(stdout.contains(cmd), "/help lists {cmd}: {stdout}");
    }
    // And /system after one was set still removes it.
    let (_, err) = succeeded(&chat(&["--system", "Be brief."], "/system\n"));
    assert!(err.contains("(system prompt removed)"), "{err}");
}

#[test]
fn show_info_template_and_parameters() {
    let (stdout, _) = succeeded(&chat(
        &["--temp", "0.5", "-n", "6"],
        "/show info\n/show template\n/show parameters\n",
    ));
    // The parameter count is the one inspect reads from the file's tensors.
    let inspect = stdout_of(&run_ok(bitnet().arg("inspect").arg(shipped_model())));
    let exact = inspect
        .lines()
        .find_map(|l| l.trim().strip_prefix("parameters: "))
        .and_then(|l| l.split('(').nth(1))
        .map(|n| n.trim_end_matches(')').to_owned())
        .expect("inspect's parameter count");
    // The first line whose first word is `name`, without it.
    let row = |name: &str| -> String {
        stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} row: {stdout}"))
            .trim_start()[name.len()..]
            .trim()
            .to_owned()
    };
    assert!(
        row("parameters").ends_with(&format!("({exact})")),
        "{stdout}"
    );
    assert!(row("weights").starts_with("I2_S projections, F16 embedding"));
    assert_eq!(row("architecture"), "bitnet-b1.58");
    assert!(row("context").starts_with("256 tokens"));
    assert_eq!(row("template"), "bitnet (the file's template)");
    assert!(stdout.contains("{{ bos_token }}{% for message in messages %}"));
    assert_eq!(row("temp"), "0.5");
    assert_eq!(row("seed"), "7");
    assert_eq!(row("max-tokens"), "6");
    assert!(row("stop").contains("<|eot_id|>"), "{stdout}");
    // A word /show does not know is an error that lists the ones it does.
    let out = chat(&[], "/show nonsense\n");
    assert!(!out.status.success());
    assert!(stderr_of(&out).contains("/show parameters"));
}

/// `bitnet chat` on a pseudo-terminal, standard output as `stdout` says.
fn pty_chat(stdout: Option<&Path>, data: &Path, extra: &[&str]) -> PtySession {
    let bin = env!("CARGO_BIN_EXE_bitnet");
    let mut cmd = match stdout {
        // The shell only redirects: the chat's terminal stays the pseudo-terminal.
        Some(file) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg("out=$1; shift; exec \"$@\" > \"$out\"")
                .arg("sh")
                .arg(file)
                .arg(bin);
            c
        }
        None => Command::new(bin),
    };
    cmd.arg("chat")
        .arg("-m")
        .arg(shipped_model())
        .args(["-s", "1", "-t", "1", "--no-history"])
        .args(extra)
        .env("HOME", data)
        .env("XDG_DATA_HOME", data)
        .env("TERM", "xterm")
        .env_remove("NO_COLOR");
    let mut p = spawn_command(cmd, Some(TIMEOUT_MS)).expect("spawning bitnet chat on a pty");
    p.exp_string("/help for commands").expect("the banner");
    p
}

/// Waits until the line editor draws its prompt, so keys typed next reach it.
fn ready(p: &mut PtySession) {
    p.exp_string("\x1b[K> ").expect("the prompt");
}

#[test]
fn tab_completes_commands_settings_and_show_words() {
    let data = scratch("term-tab");
    let mut p = pty_chat(None, &data, &["-n", "4"]);
    ready(&mut p);
    p.send("/he\t").unwrap();
    p.flush().unwrap();
    p.exp_string("/help").expect("Tab completes /he to /help");
    p.send("\r").unwrap();
    p.flush().unwrap();
    p.exp_string("/bye, /exit, /quit").expect("the help text");
    ready(&mut p);
    p.send("/show par\t").unwrap();
    p.flush().unwrap();
    p.exp_string("parameters")
        .expect("Tab completes /show's word");
    p.send("\r").unwrap();
    p.flush().unwrap();
    p.exp_string("max-tokens").expect("/show parameters ran");
    ready(&mut p);
    p.send("/set repeat\t").unwrap();
    p.flush().unwrap();
    p.exp_string("repeat-penalty")
        .expect("Tab completes /set's name");
    p.send(" 1.1\r").unwrap();
    p.flush().unwrap();
    p.exp_string("(repeat-penalty = 1.1)").unwrap();
    ready(&mut p);
    p.send_line("/bye").unwrap();
    exits_cleanly(&mut p);
}

#[test]
fn the_banner_names_the_files_template() {
    let data = scratch("term-banner");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bitnet"));
    cmd.arg("chat")
        .arg("-m")
        .arg(shipped_model())
        .arg("--no-history")
        .env("HOME", &data)
        .env("TERM", "xterm");
    let mut p = spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    p.exp_string("template bitnet (the file's template)")
        .expect("the banner names the template");
    ready(&mut p);
    p.send_line("/bye").unwrap();
    exits_cleanly(&mut p);
}

#[test]
fn redirected_output_gets_replies_without_the_editors_sequences() {
    let data = scratch("term-tee");
    let log = data.join("log.txt");
    let mut p = pty_chat(Some(&log), &data, &["-n", "8", "-v"]);
    ready(&mut p);
    p.send_line("Hello there").unwrap();
    p.exp_regex(r"prompt: \d+ new tokens?")
        .expect("a reply's figures");
    ready(&mut p);
    p.send_line("/show").unwrap();
    ready(&mut p);
    p.send_line("/bye").unwrap();
    exits_cleanly(&mut p);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains('\x1b'),
        "control sequences in the output: {text:?}"
    );
    // The turn mark of the message (docs/chat.md) is the only `> ` line: the editor's prompt
    // and what it echoes (the commands too) stay on the terminal.
    let marked: Vec<&str> = text.lines().filter(|l| l.starts_with('>')).collect();
    assert_eq!(
        marked,
        ["> Hello there"],
        "the prompt in the output: {text:?}"
    );
    assert!(
        text.contains("conversation: 2 messages"),
        "replies and /show still go to standard output: {text:?}"
    );
}
