//! `bitnet chat` (and `generate`), second pass: a refused message leaves the conversation
//! and the cache as they were; Ctrl-C during the prompt's reading keeps no empty reply and
//! reports what was read; the default reply budget fits the context; piped turns are marked;
//! nothing typed or echoed lands in a streaming reply; the figures line fits the terminal.

// On a pseudo-terminal (rexpect), which these tests have on Unix only; the Windows console is
// tested by hand (docs/windows.md).
#![cfg(unix)]

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::chat::{TIMEOUT_MS, exits_cleanly, piped, slow_model};
use common::{scratch, shipped_model, stderr_of, stdout_of};
use rexpect::session::{PtySession, spawn_command};

/// A prompt of a few thousand tokens, ending with a mark.
fn long_prompt() -> String {
    format!(
        "{}THE END.",
        "To be, or not to be, that is the question. ".repeat(90)
    )
}

/// How the pseudo-terminal is set up: its width (0: not set), and whether it echoes as a
/// user's terminal does (rexpect turns echo off).
#[derive(Clone, Copy, Default)]
struct Tty {
    cols: u16,
    echo: bool,
}

/// A command on a pseudo-terminal.
fn on_pty(args: &[&str], data: &Path, tty: Tty) -> PtySession {
    let bin = env!("CARGO_BIN_EXE_bitnet");
    let mut script = String::new();
    if tty.cols > 0 {
        script.push_str(&format!("stty cols {} rows 40 && ", tty.cols));
    }
    if tty.echo {
        script.push_str("stty echo echoctl && ");
    }
    script.push_str("exec \"$0\" \"$@\"");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .arg(bin)
        .args(args)
        .env("XDG_DATA_HOME", data)
        .env("HOME", data)
        .env("TERM", "xterm")
        .env_remove("NO_COLOR");
    spawn_command(cmd, Some(TIMEOUT_MS)).expect("spawning bitnet on a pty")
}

/// `bitnet chat` on a pseudo-terminal with no history file.
fn chat_pty(model: &Path, data: &Path, extra: &[&str]) -> PtySession {
    chat_pty_with(model, data, extra, Tty::default())
}

fn chat_pty_with(model: &Path, data: &Path, extra: &[&str], tty: Tty) -> PtySession {
    let model = model.to_str().unwrap();
    let mut args = vec!["chat", "-m", model, "--no-history"];
    args.extend_from_slice(extra);
    let mut p = on_pty(&args, data, tty);
    p.exp_string("/help for commands").expect("the banner");
    p
}

/// Piped `bitnet chat` on the shipped model, stderr into the same pipe as stdout when
/// `merged` (to see what comes before what).
fn chat_piped(extra: &[&str], input: &str, merged: bool) -> Output {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(if merged {
            "exec \"$0\" \"$@\" 2>&1"
        } else {
            "exec \"$0\" \"$@\""
        })
        .arg(env!("CARGO_BIN_EXE_bitnet"))
        .arg("chat")
        .arg("-m")
        .arg(shipped_model())
        .args(["-s", "7", "-t", "1"])
        .args(extra);
    piped(cmd, input)
}

/// Drops terminal control sequences (colours, line clears) from pty output.
fn plain(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() || d == '~' {
                        break;
                    }
                }
            }
            continue;
        }
        if c != '\r' {
            out.push(c);
        }
    }
    out
}

/// Waits until the line editor draws its prompt, so keys typed next reach it.
fn ready(p: &mut PtySession) {
    p.exp_string("\x1b[K> ").expect("the prompt");
}

fn say(p: &mut PtySession, line: &str) {
    ready(p);
    p.send_line(line).unwrap();
}

/// The numbers of a figures line: (new tokens, kept tokens, context used).
fn figures(p: &mut PtySession) -> (usize, usize, usize) {
    let (_, line) = p
        .exp_regex(r"prompt: \d+ new tokens? \(\d+ kept from the cache\)(.|\s)*?context \d+/\d+")
        .expect("a figures line");
    let nums: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect();
    let n = nums.len();
    (nums[0], nums[1], nums[n - 2])
}

/// `/show`'s conversation line: "conversation: N messages | context U/S tokens".
fn show_line(p: &mut PtySession) -> String {
    say(p, "/show");
    let (_, line) = p
        .exp_regex(r"conversation: \d+ messages? \| context \d+/\d+ tokens")
        .expect("/show's conversation line");
    line
}

fn save(p: &mut PtySession, path: &Path) -> String {
    say(p, &format!("/save {}", path.display()));
    p.exp_string("(saved").unwrap();
    std::fs::read_to_string(path).unwrap()
}

/// A message too long for the context used to drop every earlier exchange on its way to
/// the refusal and bring back only itself: `/show` said 0 messages and `/save` wrote `[]`.
#[test]
fn a_refused_message_leaves_the_conversation_and_the_cache_as_they_were() {
    let data = scratch("chat-r2-refused");
    let mut p = chat_pty(&shipped_model(), &data, &["-n", "20", "-s", "1", "-v"]);
    say(&mut p, "Good morrow");
    figures(&mut p);
    say(&mut p, "Who art thou?");
    let (_, _, used) = figures(&mut p);
    let before = show_line(&mut p);
    assert!(before.starts_with("conversation: 4 messages"), "{before}");
    let saved_before = save(&mut p, &data.join("before.json"));

    let long = "To be, or not to be, that is the question. ".repeat(70);
    say(&mut p, long.trim_end());
    let (_, refusal) = p
        .exp_regex(r"does not fit the context[^\r\n]*")
        .expect("the refusal");
    assert_eq!(show_line(&mut p), before, "/show is unchanged");
    assert_eq!(
        save(&mut p, &data.join("after.json")),
        saved_before,
        "/save writes the same conversation"
    );
    assert!(
        refusal.contains("of 256") && refusal.contains("unchanged"),
        "the refusal gives the sizes and says nothing changed: {refusal}"
    );
    // The cache too: the next turn keeps everything the second one left.
    say(&mut p, "And then?");
    let (_, kept, _) = figures(&mut p);
    assert_eq!(kept, used, "the cache was kept whole");
    say(&mut p, "/bye");
    exits_cleanly(&mut p);
}

/// Ctrl-C while a long message is read used to keep an empty reply after it (the next
/// message then followed two user messages' worth of turn) and to report every prompt token
/// as read, at 0.0 tok/s.
#[test]
fn ctrl_c_while_reading_the_message_drops_the_turn_and_counts_what_was_read() {
    let data = scratch("chat-r2-prefill");
    let mut p = chat_pty(
        slow_model(),
        &data,
        &[
            "-c", "4096", "-b", "16", "-t", "1", "-s", "1", "-n", "4", "-v",
        ],
    );
    say(&mut p, "Hello");
    p.exp_string("\x1b[2K").expect("the reply begins");
    let (_, _, used) = figures(&mut p);
    say(&mut p, &long_prompt());
    p.exp_regex(r"reading \d+ tokens").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    p.send_control('c').unwrap();
    let before = p
        .exp_string("(stopped before the reply began")
        .expect("the turn is dropped");
    assert!(
        !plain(&before).contains("(stopped; the reply so far is kept)"),
        "{before}"
    );
    let (_, line) = p
        .exp_regex(r"prompt: \d+ of \d+ new tokens read(.|\s)*?context \d+/\d+")
        .expect("the figures say how much was read");
    let nums: Vec<f64> = line
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|s| s.parse().ok())
        .collect();
    let (read, asked, tps) = (nums[0], nums[1], nums[3]);
    assert!(read < asked, "only part was read: {line}");
    if read > 0.0 {
        assert!(tps > 0.0, "at a real speed: {line}");
    }
    // The conversation is as it was: the first exchange, no empty reply, no orphan message.
    let show = show_line(&mut p);
    assert!(show.starts_with("conversation: 2 messages"), "{show}");
    let saved = save(&mut p, &data.join("after.json"));
    let json: serde_json::Value = serde_json::from_str(&saved).unwrap();
    let msgs = json.as_array().unwrap();
    assert_eq!(msgs.len(), 2, "{saved}");
    assert!(
        msgs.iter().all(|m| m["content"] != ""),
        "no empty message: {saved}"
    );
    // The next turn follows the first exchange, which stays cached (and the template's
    // opening of a user message, read before the Ctrl-C, matches the new one's).
    say(&mut p, "/set max-tokens 2");
    say(&mut p, "Again");
    let (_, kept, _) = figures(&mut p);
    assert!(kept + 4 >= used, "{kept} of {used}");
    assert!(show_line(&mut p).starts_with("conversation: 4 messages"));
    say(&mut p, "/bye");
    exits_cleanly(&mut p);
}

/// `generate` ended on Ctrl-C with no figures at all.
#[test]
fn ctrl_c_in_generate_reports_what_was_read() {
    let data = scratch("gen-r2-prefill");
    let model = slow_model().to_str().unwrap().to_owned();
    let prompt = long_prompt();
    let mut p = on_pty(
        &[
            "generate", "-m", &model, "-p", &prompt, "-c", "4096", "-b", "16", "-t", "1", "-n", "4",
        ],
        &data,
        Tty::default(),
    );
    p.exp_string("THE END.").expect("the prompt's echo");
    std::thread::sleep(std::time::Duration::from_millis(300));
    p.send_control('c').unwrap();
    let (_, line) = p
        .exp_regex(r"prompt \d+ of \d+ tok, [\d.]+ tok/s")
        .expect("the figures of what was read");
    let nums: Vec<f64> = line
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|s| s.parse().ok())
        .collect();
    assert!(nums[0] < nums[1], "{line}");
    assert!(line.contains("stop: cancelled") || p.exp_string("stop: cancelled").is_ok());
    p.exp_string("interrupted").unwrap();
    p.exp_eof().unwrap();
    let status = p.process.wait().unwrap();
    assert!(format!("{status:?}").contains("130"), "{status:?}");
}

/// The default reply budget was 512 tokens, twice the shipped model's context; every reply
/// that filled the context ended with "older messages go at the next turn", said after the
/// reply (or at the end of a chat, with no next turn), not before the reply whose prompt
/// lost them. (The default is now an eighth of the context: issue 57.)
#[test]
fn the_default_budget_fits_and_a_drop_is_said_before_its_reply() {
    let out = chat_piped(&["-v"], "/show\nhi\n", false);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(
        stdout_of(&out).contains("max tokens 32 (the default for this context)"),
        "the default is an eighth of the 256-token context: {}",
        stdout_of(&out)
    );
    assert!(
        !stderr_of(&out).contains("next turn"),
        "no promise about a next turn: {}",
        stderr_of(&out)
    );

    let msg = "Now is the winter of our discontent made glorious summer by this sun of York";
    let out = chat_piped(
        &["-v", "-n", "60"],
        &format!("{msg}\n{msg}\n{msg}\n{msg}\n"),
        true,
    );
    assert!(out.status.success(), "{}", stdout_of(&out));
    let all = stdout_of(&out);
    let notice = all
        .find("oldest messages were dropped")
        .unwrap_or_else(|| panic!("a drop: {all}"));
    // The notice follows the message of its turn and comes before that turn's reply and
    // figures.
    let turn_start = all[..notice].rfind(&format!("> {msg}")).expect("a mark");
    assert!(
        !all[turn_start..notice].contains("prompt: "),
        "the notice comes before the reply's figures: {all}"
    );
    assert!(
        all[notice..].contains("prompt: "),
        "the figures of its reply follow: {all}"
    );
}

/// Piped replies had no sign of what was asked or where a reply ends.
#[test]
fn piped_turns_are_marked() {
    let out = chat_piped(
        &["-n", "6"],
        "Hello there\n/show\nWho art thou?\n/regen\n",
        false,
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let stdout = stdout_of(&out);
    let marks: Vec<&str> = stdout.lines().filter(|l| l.starts_with("> ")).collect();
    assert_eq!(
        marks,
        ["> Hello there", "> Who art thou?", "> /regen"],
        "{stdout}"
    );
    // Each turn: its mark, the reply, a blank line; /show's lines are not a turn.
    let turns: Vec<&str> = stdout.split("> ").skip(1).collect();
    assert_eq!(turns.len(), 3, "{stdout}");
    assert!(turns[0].contains("\n\nmodel: "), "{stdout}");
    assert!(
        turns[1].ends_with("\n\n") && turns[2].ends_with("\n\n"),
        "{stdout}"
    );
}

/// Keys typed while a reply streamed were echoed into it, and Ctrl-C showed as `^C` with
/// another piece of the reply after it.
#[test]
fn typing_during_a_reply_is_not_echoed_or_kept() {
    let data = scratch("chat-r2-quiet");
    let mut p = chat_pty_with(
        slow_model(),
        &data,
        &["-s", "3", "-n", "-1", "--ignore-eos", "-t", "1"],
        Tty {
            cols: 0,
            echo: true,
        },
    );
    say(&mut p, "Hello");
    p.exp_string("\x1b[2K").expect("the reply begins");
    p.send("typed-while-streaming").unwrap();
    p.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    p.send_control('c').unwrap();
    let during = p
        .exp_string("(stopped; the reply so far is kept)")
        .expect("the reply stops");
    assert!(!during.contains("typed-while"), "echoed: {during:?}");
    assert!(!during.contains("^C"), "^C echoed: {during:?}");
    // What was typed is dropped, not sent with the next line.
    say(&mut p, "/show");
    p.exp_regex(r"conversation: 2 messages")
        .expect("/show ran as a command");
    say(&mut p, "/bye");
    exits_cleanly(&mut p);
}

/// The figures line was about 150 characters and wrapped mid-field on a narrower terminal.
#[test]
fn the_figures_fit_the_terminal() {
    let data = scratch("chat-r2-width");
    let mut p = chat_pty_with(
        &shipped_model(),
        &data,
        &["-s", "1", "-n", "6", "-v"],
        Tty {
            cols: 60,
            echo: false,
        },
    );
    say(&mut p, "Good morrow");
    let (_, figs) = p
        .exp_regex(r"prompt: \d+ new tokens?(.|\s)*?context \d+/\d+")
        .expect("the figures");
    let figs = plain(&figs);
    assert!(figs.lines().count() > 1, "{figs}");
    for line in figs.lines() {
        assert!(line.chars().count() <= 60, "{line:?} in {figs:?}");
    }
    say(&mut p, "/bye");
    exits_cleanly(&mut p);
}
