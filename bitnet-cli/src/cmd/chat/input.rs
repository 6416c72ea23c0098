//! Where the chat's messages come from: a line editor on a terminal, or plain lines from a
//! pipe (or one whole file with `-f`), so scripts and tests can drive the chat.
//!
//! The editor is rustyline: maintained, handles bracketed paste (a pasted block stays one
//! message), history with a file, wide characters and line wrapping, and reports Ctrl-C and
//! Ctrl-D as such. reedline (built on crossterm) was the other choice; it asks the terminal
//! for the cursor position before every prompt and waits for the answer, which a
//! pseudo-terminal test or a dumb terminal never gives (rustyline gives up after 100 ms).
//! crossterm still does the styling.

use std::io::{self, BufRead, BufReader, IsTerminal, Stdin};
use std::path::PathBuf;

use anyhow::{Context, Result};
use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::{Behavior, CompletionType, Config, Editor};

use super::complete::SlashCompleter;

/// What reading the next message gave.
#[derive(Debug, PartialEq)]
pub enum Read {
    Line(String),
    /// Ctrl-C at the prompt.
    Interrupted,
    /// Ctrl-D, or the end of the input.
    End,
}

/// Text that opens and closes a multi-line message.
const FENCE: &str = "\"\"\"";

pub enum Input {
    Terminal {
        editor: Box<Editor<SlashCompleter, DefaultHistory>>,
        history: Option<PathBuf>,
    },
    Lines(BufReader<Stdin>),
    /// `-f FILE`: one message, then the end.
    Whole(Option<String>),
}

/// The terminal itself, whatever standard output is.
#[cfg(windows)]
const OWN_TERMINAL: &str = "CONOUT$";
#[cfg(not(windows))]
const OWN_TERMINAL: &str = "/dev/tty";

impl Input {
    /// A line editor, with the history file loaded if there is one. With standard output
    /// not a terminal (`bitnet chat | tee log`) the editor draws on the terminal itself
    /// (`/dev/tty`; on Windows the console, `CONOUT$`, which rustyline opens the same way),
    /// so its prompt and control sequences stay out of the output; without a terminal to
    /// open, plain lines are read instead.
    pub fn terminal(history: Option<PathBuf>) -> Result<Input> {
        let own_terminal = !io::stdout().is_terminal();
        if own_terminal
            && std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(OWN_TERMINAL)
                .is_err()
        {
            // rustyline would fall back to standard output and draw there.
            return Ok(Input::lines(io::stdin()));
        }
        let config = Config::builder()
            .auto_add_history(false)
            .bracketed_paste(true)
            .max_history_size(1000)
            .context("configuring the line editor")?
            .completion_type(CompletionType::List)
            .behavior(if own_terminal {
                Behavior::PreferTerm
            } else {
                Behavior::Stdio
            })
            .build();
        let mut editor = Editor::<SlashCompleter, DefaultHistory>::with_config(config)
            .context("starting the line editor")?;
        editor.set_helper(Some(SlashCompleter::new()));
        let history = history.filter(|p| {
            // A missing file is a first run; one that cannot be read is left alone.
            !p.exists() || editor.load_history(p).is_ok()
        });
        Ok(Input::Terminal {
            editor: Box::new(editor),
            history,
        })
    }

    pub fn lines(stdin: Stdin) -> Input {
        Input::Lines(BufReader::new(stdin))
    }

    pub fn whole(text: String) -> Input {
        Input::Whole(Some(text))
    }

    /// The next message or command; a `"""` fence gathers lines until the closing one.
    pub fn read(&mut self, prompt: &str) -> Result<Read> {
        let first = match self.raw_line(prompt)? {
            Read::Line(l) => l,
            other => return Ok(other),
        };
        let Some(opened) = first.trim_start().strip_prefix(FENCE) else {
            self.remember(&first);
            return Ok(Read::Line(first));
        };
        let mut text = String::new();
        let mut line = opened.to_owned();
        loop {
            if let Some(body) = line.trim_end().strip_suffix(FENCE) {
                text.push_str(body);
                break;
            }
            text.push_str(&line);
            text.push('\n');
            line = match self.raw_line("... ")? {
                Read::Line(l) => l,
                // Ctrl-C inside a block drops the block; the end of input sends it.
                Read::Interrupted => return Ok(Read::Interrupted),
                Read::End => break,
            };
        }
        let text = text.trim_matches('\n').to_owned();
        self.remember(&text);
        Ok(Read::Line(text))
    }

    fn raw_line(&mut self, prompt: &str) -> Result<Read> {
        match self {
            Input::Terminal { editor, .. } => match editor.readline(prompt) {
                Ok(l) => Ok(Read::Line(l)),
                Err(ReadlineError::Interrupted) => Ok(Read::Interrupted),
                Err(ReadlineError::Eof) => Ok(Read::End),
                Err(e) => Err(e).context("reading the terminal"),
            },
            Input::Lines(r) => {
                let mut l = String::new();
                let n = r.read_line(&mut l).context("reading standard input")?;
                if n == 0 {
                    return Ok(Read::End);
                }
                if l.ends_with('\n') {
                    l.pop();
                    if l.ends_with('\r') {
                        l.pop();
                    }
                }
                Ok(Read::Line(l))
            }
            Input::Whole(t) => Ok(t.take().map_or(Read::End, Read::Line)),
        }
    }

    /// Adds a message to the history (and its file, when there is one).
    fn remember(&mut self, text: &str) {
        if let Input::Terminal { editor, history } = self {
            if text.trim().is_empty() {
                return;
            }
            let _ = editor.add_history_entry(text);
            if let Some(p) = history
                && editor.append_history(p).is_err()
            {
                // Not writable after all: keep the history in memory only.
                *history = None;
            }
        }
    }
}

/// `$XDG_DATA_HOME/bitnet/chat_history` (or `~/.local/share/...`), if the directory can be
/// made.
pub fn default_history_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))?;
    let dir = base.join("bitnet");
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir.join("chat_history"))
}
