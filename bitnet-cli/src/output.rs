//! Output helpers shared by the subcommands: a closed pipe (`bitnet ... | head`) must end the
//! program quietly instead of panicking inside `println!`, so stdout is written with
//! `writeln!` and `?` (the error reaches `main`, which recognises it), and stderr only through
//! [`note!`], which ignores a closed stderr rather than panicking.

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

/// True when the error chain bottoms out in a broken pipe on stdout (also when the write
/// failed inside `serde_json`, which wraps the `io::Error` in its own type).
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind)
                == Some(io::ErrorKind::BrokenPipe)
    })
}

/// Writes one line to stderr, ignoring failure: a diagnostic must never abort the program
/// (`eprintln!` panics when stderr is a closed pipe, as in `bitnet ... 2>&1 | head`).
pub fn note_fmt(msg: std::fmt::Arguments<'_>) {
    let mut err = io::stderr().lock();
    let _ = err.write_fmt(msg);
    let _ = err.write_all(b"\n");
}

/// `note!("...", args)`: [`note_fmt`] with `format!` syntax.
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::output::note_fmt(format_args!($($arg)*))
    };
}
pub(crate) use note;

/// A progress line on stderr: redrawn in place on a terminal (at most every 200 ms); on a
/// pipe or file, one line per call of [`Progress::step`] so logs stay readable.
#[derive(Debug)]
pub struct Progress {
    tty: bool,
    last: Option<Instant>,
    drawn: bool,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            tty: io::stderr().is_terminal(),
            last: None,
            drawn: false,
        }
    }
}

impl Progress {
    /// Redraws the line (terminal only; rate-limited unless `force`).
    pub fn update(&mut self, msg: &str, force: bool) {
        if !self.tty {
            return;
        }
        if !force
            && self
                .last
                .is_some_and(|t| t.elapsed() < Duration::from_millis(200))
        {
            return;
        }
        self.last = Some(Instant::now());
        self.drawn = true;
        let mut err = io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K{msg}");
        let _ = err.flush();
    }

    /// A milestone: redrawn on a terminal, a line of its own elsewhere.
    pub fn step(&mut self, msg: &str) {
        if self.tty {
            self.update(msg, true);
        } else {
            note_fmt(format_args!("{msg}"));
        }
    }

    /// Erases the line so the next output starts clean.
    pub fn clear(&mut self) {
        if self.tty && self.drawn {
            let mut err = io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}

/// The error and its causes joined with `: `, skipping a cause whose text the message
/// already carries (library errors often print their source too).
pub fn error_chain(err: &anyhow::Error) -> String {
    let mut msg = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if msg.contains(&text) {
            continue;
        }
        let text = without_repeated_head(&msg, &text).to_owned();
        msg.push_str(": ");
        msg.push_str(&text);
    }
    msg
}

/// `text` without a leading `HEAD: ` that `msg` already ends with: a library error names
/// its file (`x.gguf: No such file`) and the context the binary adds names it too (`loading
/// x.gguf`); the path is said once.
fn without_repeated_head<'a>(msg: &str, text: &'a str) -> &'a str {
    match text.split_once(": ") {
        Some((head, rest))
            if !head.is_empty()
                && msg
                    .strip_suffix(head)
                    .is_some_and(|before| before.is_empty() || before.ends_with(' ')) =>
        {
            rest
        }
        _ => text,
    }
}

/// `n` and the noun, singular for one: `count(1, "message")` is "1 message", `count(2,
/// "message")` "2 messages" (for nouns whose plural adds an "s").
pub fn count<N: std::fmt::Display + PartialEq + From<u8>>(n: N, noun: &str) -> String {
    if n == N::from(1) {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Human-readable byte count (binary units), e.g. `1.50 GiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[unit])
    }
}

/// Parameter count with an SI suffix, e.g. `2.41B`.
pub fn human_count(n: u64) -> String {
    let v = n as f64;
    if v >= 1e9 {
        format!("{:.2}B", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.2}K", v / 1e3)
    } else {
        format!("{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(3 << 30), "3.00 GiB");
        assert_eq!(human_count(2_410_000_000), "2.41B");
        assert_eq!(human_count(999), "999");
    }

    #[test]
    fn counts_say_one_in_the_singular() {
        assert_eq!(count(1u32, "message"), "1 message");
        assert_eq!(count(0u32, "message"), "0 messages");
        assert_eq!(count(2u64, "thread"), "2 threads");
    }

    #[test]
    fn error_chain_skips_causes_already_in_the_message() {
        let io = io::Error::new(io::ErrorKind::NotFound, "no such file");
        let err = anyhow::Error::from(io)
            .context("m.gguf: no such file")
            .context("loading m.gguf");
        assert_eq!(error_chain(&err), "loading m.gguf: no such file");
        // A head that only ends a word of the message is not the same thing said twice.
        let err = anyhow::anyhow!("x.gguf: no such file").context("loading bx.gguf");
        assert_eq!(error_chain(&err), "loading bx.gguf: x.gguf: no such file");
        let err = anyhow::anyhow!("bad value").context("parsing --top-p");
        assert_eq!(error_chain(&err), "parsing --top-p: bad value");
    }

    #[test]
    fn broken_pipe_is_detected_through_context() {
        let err = anyhow::Error::from(io::Error::from(io::ErrorKind::BrokenPipe))
            .context("writing the tensor table");
        assert!(is_broken_pipe(&err));
        assert!(!is_broken_pipe(&anyhow::anyhow!("other")));
        let json = serde_json::Error::io(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(is_broken_pipe(
            &anyhow::Error::from(json).context("writing JSON")
        ));
    }
}
