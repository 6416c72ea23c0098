//! How the chat talks to the user: styled notes on a terminal, plain ones otherwise; turn
//! marks where the output is not read at the terminal that typed the messages.

use std::io::Write;

use crossterm::style::Stylize;

use crate::output::note;

/// How the chat talks to the user: styled on a terminal, plain otherwise.
pub(super) struct Screen {
    pub(super) styled: bool,
    pub(super) show_stats: bool,
    /// Standard input or output is not the terminal: each reply follows its message as
    /// `> ` lines and ends with a blank line, so a reader (or a script) sees what was asked
    /// and where each reply ends.
    pub(super) marks: bool,
    /// Standard input is the terminal: keys typed while a reply streams are not echoed.
    pub(super) quiet_input: bool,
}

impl Screen {
    pub(super) fn info(&self, msg: &str) {
        if self.styled {
            note!("{}", msg.dark_grey());
        } else {
            note!("{msg}");
        }
    }
    /// With marks on, the message a reply answers, every line behind `> ` (`>` for an empty
    /// one), on standard output before the reply.
    pub(super) fn mark_turn(&self, message: &str) -> std::io::Result<()> {
        if !self.marks {
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        for line in message.split('\n') {
            if line.is_empty() {
                writeln!(out, ">")?;
            } else {
                writeln!(out, "> {line}")?;
            }
        }
        out.flush()
    }

    pub(super) fn warn(&self, msg: &str) {
        if self.styled {
            note!("{}", msg.yellow());
        } else {
            note!("{msg}");
        }
    }
}
