//! The terminal while a reply streams: what the user types is neither echoed into the reply
//! nor kept for the next prompt, and Ctrl-C is not echoed as `^C`, yet still a signal.
//!
//! The line editor leaves the terminal in its ordinary (cooked, echoing) mode between
//! prompts, so keys pressed during a reply would otherwise appear in the middle of the
//! reply's text. [`QuietTty::new`] turns off ECHO and ECHOCTL on standard input (ISIG
//! stays, so Ctrl-C still stops the reply); dropping it throws away what was typed meanwhile
//! and puts the terminal's settings back, on every path out of the reply.
//!
//! On Windows the same is done to the console's input mode through crossterm's console
//! layer (`crossterm_winapi`): ENABLE_ECHO_INPUT off, ENABLE_PROCESSED_INPUT kept (Ctrl-C
//! stays a signal); the input events queued meanwhile are read and dropped on the way out.

/// Holds the terminal quiet until dropped; does nothing where standard input is not a
/// terminal (or on neither Unix nor Windows).
pub(super) struct QuietTty {
    #[cfg(unix)]
    saved: Option<rustix::termios::Termios>,
    /// The console's input handle and the mode to put back.
    #[cfg(windows)]
    saved: Option<(crossterm_winapi::Handle, u32)>,
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

/// The console input mode's echo bit (wincon.h): typed keys are shown as they are read.
#[cfg(windows)]
const ENABLE_ECHO_INPUT: u32 = 0x0004;

#[cfg(windows)]
impl QuietTty {
    pub(super) fn new() -> QuietTty {
        use crossterm_winapi::{ConsoleMode, Handle};
        use std::io::IsTerminal;
        // CONIN$ is the console even when standard input is redirected: only a console on
        // standard input is quieted, as on Unix.
        if !std::io::stdin().is_terminal() {
            return QuietTty { saved: None };
        }
        let Ok(handle) = Handle::current_in_handle() else {
            return QuietTty { saved: None };
        };
        let console = ConsoleMode::from(handle.clone());
        let Ok(saved) = console.mode() else {
            return QuietTty { saved: None };
        };
        // A console that refuses the change keeps echoing: cosmetic, so not an error.
        let saved = console
            .set_mode(saved & !ENABLE_ECHO_INPUT)
            .is_ok()
            .then_some((handle, saved));
        QuietTty { saved }
    }
}

#[cfg(windows)]
impl Drop for QuietTty {
    fn drop(&mut self) {
        use crossterm_winapi::{Console, ConsoleMode};
        let Some((handle, saved)) = self.saved.take() else {
            return;
        };
        // Typed during the reply, unseen: read and dropped, so it does not become the next
        // message unseen either (the console API's counterpart of tcflush).
        let console = Console::from(handle.clone());
        while console
            .number_of_console_input_events()
            .is_ok_and(|n| n > 0)
        {
            if console.read_console_input().is_err() {
                break;
            }
        }
        let _ = ConsoleMode::from(handle).set_mode(saved);
    }
}

/// Neither Unix nor Windows: no terminal settings to change.
#[cfg(not(any(unix, windows)))]
impl QuietTty {
    pub(super) fn new() -> QuietTty {
        QuietTty {}
    }
}
