//! One reply of the chat, as the person at the terminal sees it: streamed text, the status
//! line while the prompt is read, Ctrl-C, and what is said after (stopped, shifted, cut,
//! at its budget).

use std::io::{self, IsTerminal, Write};

use anyhow::Result;
use bitnet_core::chat::{ChatSession, ReplyIo, SessionError, TurnStats, TurnStatus};
use bitnet_core::scheduler::StopReason;
use crossterm::style::Stylize;

use super::figures;
use super::quiet_tty::QuietTty;
use super::screen::Screen;
use crate::args::attn_entropy::entropy_figures;
use crate::interrupt;

/// Runs one reply with streaming output, the prompt status line and Ctrl-C handling.
pub(super) fn reply(
    chat: &mut ChatSession,
    screen: &Screen,
    f: impl FnOnce(&mut ChatSession, ReplyIo<'_>) -> Result<TurnStats, SessionError>,
) -> Result<()> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut pipe_error: Option<io::Error> = None;
    let mut on_text = |t: &str| {
        // The ^C may land between two steps: nothing of the reply prints after it.
        if interrupt::pending() {
            return false;
        }
        match out.write_all(t.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => true,
            Err(e) => {
                pipe_error = Some(e);
                false
            }
        }
    };
    let status_tty = screen.styled && io::stderr().is_terminal();
    let mut on_status = |s: TurnStatus| match s {
        // Said before the reply it makes room for, not after.
        TurnStatus::Dropped(n) => screen.warn(&format!(
            "(context full: the {n} oldest message{} dropped to make room; the rest is read \
             again)",
            if n == 1 { " was" } else { "s were" }
        )),
        _ if !status_tty => {}
        TurnStatus::Reading(n) => {
            let mut err = io::stderr().lock();
            let _ = write!(
                err,
                "{}",
                format!("reading {}…", crate::output::count(n, "token")).dark_grey()
            );
            let _ = err.flush();
        }
        _ => {
            let mut err = io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    };
    let quiet = screen.quiet_input.then(QuietTty::new);
    interrupt::catch(true);
    let result = f(
        chat,
        ReplyIo {
            on_text: &mut on_text,
            interrupted: &interrupt::take,
            on_status: &mut on_status,
        },
    );
    interrupt::catch(false);
    drop(quiet);
    if let Some(e) = pipe_error {
        return Err(e.into());
    }
    let stats = result?;
    if !stats.unanswered {
        writeln!(out)?;
        if screen.marks {
            writeln!(out)?;
        }
    }
    out.flush()?;
    drop(out);
    if stats.unanswered {
        screen.info(
            "(stopped before the reply began: the message was not kept, and the conversation \
             is as it was)",
        );
    } else if stats.was_interrupted() {
        screen.info("(stopped; the reply so far is kept)");
    }
    if stats.shifted > 0 {
        screen.info(&format!(
            "(context full: {} older tokens shifted out of the cache; the conversation goes on)",
            stats.shifted
        ));
    }
    match stats.reply.stop_reason {
        StopReason::ContextFull => screen.warn("(the context is full: the reply was cut)"),
        // The model did not end its turn: say where the limit came from and how to move it.
        StopReason::MaxTokens => screen.info(&format!(
            "(the reply stopped at its budget of {}: /set max-tokens N changes it, -1 lifts it)",
            crate::output::count(chat.settings.max_tokens, "token")
        )),
        _ => {}
    }
    if screen.show_stats {
        let fields = figures::fields(&stats, entropy_figures(chat.engine()));
        screen.info(&figures::fit(&fields, figures::stderr_width()));
    }
    Ok(())
}
