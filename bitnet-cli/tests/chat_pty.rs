//! `bitnet chat` on a real (pseudo-)terminal: the line editor, history (in memory and in
//! the history file), multi-line input, the commands, Ctrl-C at the prompt and during a
//! reply, Ctrl-D; and that a second turn evaluates only its own tokens.

// On a pseudo-terminal (rexpect), which these tests have on Unix only; the Windows console is
// tested by hand (docs/windows.md).
#![cfg(unix)]

mod common;

use std::path::Path;
use std::process::Command;

use common::chat::{TIMEOUT_MS, exits_cleanly, slow_model};
use common::{scratch, shipped_model};
use rexpect::session::{PtySession, spawn_command};

/// `bitnet chat` on a pseudo-terminal, with its own data directory (history file).
fn chat(model: &Path, data: &Path, extra: &[&str]) -> PtySession {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bitnet"));
    cmd.arg("chat")
        .arg("-m")
        .arg(model)
        .args(extra)
        .env("XDG_DATA_HOME", data)
        .env("HOME", data)
        .env("TERM", "xterm")
        .env_remove("NO_COLOR");
    let mut p = spawn_command(cmd, Some(TIMEOUT_MS)).expect("spawning bitnet chat on a pty");
    p.exp_string("/help for commands").expect("the banner");
    p
}

/// Waits for the figures line of a reply; returns (new tokens, kept tokens, context used).
fn figures(p: &mut PtySession) -> (usize, usize, usize) {
    let (_, line) = p
        .exp_regex(r"prompt: \d+ new tokens? \(\d+ kept from the cache\).*context \d+/\d+")
        .expect("a figures line");
    let nums: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect();
    // prompt N, kept M, tok/s (integer and fraction), reply ..., context U/S
    let n = nums.len();
    (nums[0], nums[1], nums[n - 2])
}

/// Waits until the line editor draws its prompt, so keys typed next reach it (typed
/// earlier, rustyline may drop them).
fn ready(p: &mut PtySession) {
    p.exp_string("\x1b[K> ").expect("the prompt");
}

/// Types a line at the next prompt.
fn say(p: &mut PtySession, line: &str) {
    ready(p);
    p.send_line(line).unwrap();
}

fn show_messages(p: &mut PtySession) -> usize {
    say(p, "/show");
    let (_, line) = p.exp_regex(r"conversation: \d+ messages").unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_conversation_on_a_terminal() {
    let data = scratch("chat-pty-data");
    let mut p = chat(
        &shipped_model(),
        &data,
        &["-s", "1", "-n", "12", "-v", "-t", "1"],
    );

    say(&mut p, "Hello there");
    let (new1, kept1, used1) = figures(&mut p);
    assert_eq!(kept1, 0, "the first turn has nothing cached");
    assert!(new1 > 0 && used1 > new1);

    say(&mut p, "Who art thou?");
    let (new2, kept2, used2) = figures(&mut p);
    assert_eq!(
        kept2, used1,
        "the second turn keeps everything the first left"
    );
    assert!(new2 < 20, "only the new turn is evaluated ({new2} tokens)");
    assert!(used2 > used1);

    // Up recalls the last message; Enter sends it again.
    ready(&mut p);
    p.send("\x1b[A").unwrap();
    p.flush().unwrap();
    p.exp_string("Who art thou?").expect("history recall");
    p.send("\r").unwrap();
    p.flush().unwrap();
    let (_, kept3, _) = figures(&mut p);
    assert_eq!(kept3, used2);

    // A multi-line message between fences is one message.
    say(&mut p, "\"\"\"");
    p.exp_string("... ").unwrap();
    p.send_line("First line,").unwrap();
    p.exp_string("... ").unwrap();
    p.send_line("and the second.\"\"\"").unwrap();
    figures(&mut p);
    assert_eq!(show_messages(&mut p), 8);

    say(&mut p, "/undo");
    p.exp_string("(removed 2 messages)").unwrap();
    assert_eq!(show_messages(&mut p), 6);
    say(&mut p, "/regen");
    let (new_regen, _, _) = figures(&mut p);
    assert!(
        new_regen <= 2,
        "regenerating re-reads at most the last token ({new_regen})"
    );
    assert_eq!(show_messages(&mut p), 6);

    say(&mut p, "/frobnicate");
    p.exp_string("unknown command /frobnicate").unwrap();

    say(&mut p, "/clear");
    p.exp_string("(new conversation)").unwrap();
    say(&mut p, "/show");
    p.exp_string("conversation: 0 messages | context 0/")
        .unwrap();

    // Ctrl-C on an empty line says how to quit; Ctrl-D quits.
    ready(&mut p);
    p.send_control('c').unwrap();
    p.exp_string("(Ctrl-D or /bye quits)").unwrap();
    ready(&mut p);
    p.send_control('d').unwrap();
    exits_cleanly(&mut p);

    // The history file keeps the messages (commands too) for the next run.
    let hist = std::fs::read_to_string(data.join("bitnet/chat_history")).expect("history file");
    assert!(
        hist.contains("Who art thou?") && hist.contains("First line,"),
        "{hist}"
    );
    let mut p = chat(&shipped_model(), &data, &["-s", "1", "-n", "4", "-v"]);
    ready(&mut p);
    p.send("\x1b[A").unwrap();
    p.flush().unwrap();
    p.exp_string("/show")
        .expect("the last line of the earlier run");
    p.send("\r").unwrap();
    p.flush().unwrap();
    p.exp_string("conversation: 0 messages").unwrap();
    say(&mut p, "/bye");
    exits_cleanly(&mut p);
}

#[test]
fn ctrl_c_stops_a_reply_and_keeps_the_conversation() {
    let data = scratch("chat-pty-ctrl-c");
    let mut p = chat(
        slow_model(),
        &data,
        &[
            "-s",
            "3",
            "-n",
            "-1",
            "--ignore-eos",
            "-v",
            "-t",
            "1",
            "--no-history",
        ],
    );
    say(&mut p, "Hello");
    // The prompt status shows once the reply is under way; it would run for seconds.
    p.exp_string("tokens").unwrap();
    p.send_control('c').unwrap();
    p.exp_string("(stopped; the reply so far is kept)")
        .expect("the reply stops");
    let (first_prompt, _, used) = figures(&mut p);
    assert!(
        used < 2000,
        "stopped well before the context's end ({used})"
    );
    assert_eq!(
        show_messages(&mut p),
        2,
        "the partial reply stays in the conversation"
    );
    // The random model may emit a byte token that is half of a character; the message keeps
    // U+FFFD for it, whose tokens differ, so the cache is kept only up to that point.
    let saved = data.join("stopped.json");
    say(&mut p, &format!("/save {}", saved.display()));
    p.exp_string("(saved 2 messages").unwrap();
    let reply_is_valid_text = !std::fs::read_to_string(&saved)
        .unwrap()
        .contains('\u{FFFD}');
    // The conversation goes on from the cache.
    say(&mut p, "/set max-tokens 5");
    say(&mut p, "And then?");
    let (new, kept, _) = figures(&mut p);
    assert!(kept <= used, "{kept} of {used}");
    if reply_is_valid_text {
        // The template trims the reply, so trailing whitespace it ended with may be read again.
        assert!(
            kept + 4 >= used,
            "the partial reply stays cached ({kept} of {used})"
        );
        assert!(new < 20, "{new}");
    } else {
        assert!(
            kept >= first_prompt,
            "the first turn's prompt stays cached ({kept} of {used})"
        );
    }
    say(&mut p, "/bye");
    exits_cleanly(&mut p);
}

#[test]
fn pasted_blocks_and_a_full_context_on_a_terminal() {
    let data = scratch("chat-pty-overflow");
    let mut p = chat(
        &shipped_model(),
        &data,
        &["-s", "2", "-n", "24", "-v", "--no-history"],
    );
    // A bracketed paste of two lines is one message, sent by the Enter after it.
    ready(&mut p);
    p.send("\x1b[200~Pasted first line\nand its second\x1b[201~")
        .unwrap();
    p.flush().unwrap();
    p.send("\r").unwrap();
    p.flush().unwrap();
    figures(&mut p);
    assert_eq!(show_messages(&mut p), 2, "the pasted block was one message");
    let msg = "Now is the winter of our discontent made glorious summer by this sun of York";
    let mut dropped = false;
    for _ in 0..6 {
        say(&mut p, msg);
        let (before, _) = p.exp_regex(r"context \d+/256").unwrap();
        dropped |= before.contains("oldest message");
    }
    assert!(dropped, "the chat said it dropped old messages");
    say(&mut p, "/bye");
    exits_cleanly(&mut p);
}
