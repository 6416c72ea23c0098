//! How the chat talks to the user: styled notes on a terminal, plain ones otherwise.

use crossterm::style::Stylize;

use crate::output::note;

/// How the chat talks to the user: styled on a terminal, plain otherwise.
pub(super) struct Screen {
    pub(super) styled: bool,
    pub(super) show_stats: bool,
}

impl Screen {
    pub(super) fn info(&self, msg: &str) {
        if self.styled {
            note!("{}", msg.dark_grey());
        } else {
            note!("{msg}");
        }
    }
    pub(super) fn warn(&self, msg: &str) {
        if self.styled {
            note!("{}", msg.yellow());
        } else {
            note!("{msg}");
        }
    }
}
