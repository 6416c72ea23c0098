//! The terminal while a reply streams: what the user types is neither echoed into the reply
//! nor kept for the next prompt, and Ctrl-C is not echoed as `^C`, yet still a signal.
//!
//! The line editor leaves the terminal in its ordinary (cooked, echoing) mode between
//! prompts, so keys pressed during a reply would otherwise appear in the middle of the
//! reply's text. [`QuietTty::new`] turns off ECHO and ECHOCTL on standard input (ISIG
//! stays, so Ctrl-C still stops the reply); dropping it throws away what was typed meanwhile
//! and puts the terminal's settings back, on every path out of the reply.

/// Holds the terminal quiet until dropped; does nothing where standard input is not a
/// terminal (or off Unix).
pub(super) struct QuietTty {
    #[cfg(unix)]
    saved: Option<rustix::termios::Termios>,
}

#[cfg(unix)]
impl QuietTty {
    pub(super) fn new() -> QuietTty {
        use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
        let stdin = std::io::stdin();
        let Ok(saved) = tcgetattr(&stdin) else {
            return QuietTty { saved: None };
        };
        let mut quiet = saved.clone();
        quiet
            .local_modes
            .remove(LocalModes::ECHO | LocalModes::ECHOCTL);
        // A terminal that refuses the change keeps echoing: cosmetic, so not an error.
        let saved = tcsetattr(&stdin, OptionalActions::Now, &quiet)
            .is_ok()
            .then_some(saved);
        QuietTty { saved }
    }
}

#[cfg(unix)]
impl Drop for QuietTty {
    fn drop(&mut self) {
        use rustix::termios::{OptionalActions, QueueSelector, tcflush, tcsetattr};
        let Some(saved) = self.saved.take() else {
            return;
        };
        let stdin = std::io::stdin();
        // Typed during the reply, unseen: it must not become the next message unseen either.
        let _ = tcflush(&stdin, QueueSelector::IFlush);
        let _ = tcsetattr(&stdin, OptionalActions::Now, &saved);
    }
}

#[cfg(not(unix))]
impl QuietTty {
    pub(super) fn new() -> QuietTty {
        QuietTty {}
    }
}
