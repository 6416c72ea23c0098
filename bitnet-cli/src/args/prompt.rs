//! Where a prompt comes from, as in llama.cpp: `-p TEXT` on the command line, or `-f FILE`
//! (`-f -` reads standard input), so prompts of any size and any first character can be
//! given (the command line is limited to about 128 KiB per argument, and a text starting
//! with `-` is taken as the text, not an option).

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

#[derive(Clone, Debug, clap::Args)]
pub struct PromptArgs {
    /// The prompt text (may start with '-'); with --parallel, give it several times.
    #[arg(short = 'p', long, allow_hyphen_values = true, conflicts_with = "file")]
    pub prompt: Vec<String>,
    /// Read the prompt from FILE ('-' = standard input).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
}

impl PromptArgs {
    /// The prompt, if one was given by either option.
    pub fn text(&self) -> Result<Option<String>> {
        match (self.prompt.as_slice(), &self.file) {
            ([p], _) => Ok(Some(p.clone())),
            ([_, _, ..], _) => bail!(
                "{} prompts given with -p: only `generate --parallel N` takes several",
                self.prompt.len()
            ),
            ([], Some(f)) => read_text(f).map(Some),
            ([], None) => Ok(None),
        }
    }

    /// Several prompts: every `-p`, or the non-empty lines of `-f FILE`.
    pub fn texts(&self) -> Result<Vec<String>> {
        let texts: Vec<String> = match &self.file {
            Some(f) if self.prompt.is_empty() => read_text(f)?
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_owned)
                .collect(),
            _ => self.prompt.clone(),
        };
        if texts.is_empty() {
            bail!("no prompts: give -p TEXT several times, or -f FILE with one prompt a line");
        }
        Ok(texts)
    }

    /// The prompt, or an error naming both ways to give one.
    pub fn required_text(&self) -> Result<String> {
        match self.text()? {
            Some(t) => Ok(t),
            None => bail!("no prompt: give it with -p TEXT or -f FILE (-f - reads stdin)"),
        }
    }
}

/// The most text read from a source that is not a regular file (standard input, a pipe, a
/// device): far more than any context, while one with no end (`/dev/zero`, a pipe that never
/// closes) is refused instead of growing without bound. A regular file ends; it is read whole.
pub const MAX_STREAMED_PROMPT_BYTES: u64 = 1 << 30;

/// The whole of `path` (`-`: standard input) as UTF-8 text: the prompt.
pub fn read_text(path: &Path) -> Result<String> {
    read_text_as(path, "the prompt")
}

/// The whole of `path` (`-`: standard input) as UTF-8 text; errors call it `what` ("the
/// prompt", or "the text" that perplexity scores: it is not a prompt).
pub fn read_text_as(path: &Path, what: &str) -> Result<String> {
    let (bytes, name) = if path == Path::new("-") {
        let bytes = read_capped(std::io::stdin().lock())
            .with_context(|| format!("reading {what} from standard input"))?;
        (bytes, "standard input".to_owned())
    } else {
        let reading = || format!("reading {what} file {}", path.display());
        let file = std::fs::File::open(path).with_context(reading)?;
        let meta = file.metadata().ok();
        if meta.as_ref().is_some_and(|m| m.is_dir()) {
            bail!("{}: it is a directory", reading());
        }
        let bytes = if meta.is_some_and(|m| m.is_file()) {
            let mut buf = Vec::new();
            (&file).read_to_end(&mut buf).map(|_| buf)
        } else {
            read_capped(&file)
        }
        .with_context(reading)?;
        (bytes, path.display().to_string())
    };
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{what} in {name} is not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

fn read_capped(source: impl Read) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    source
        .take(MAX_STREAMED_PROMPT_BYTES + 1)
        .read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_STREAMED_PROMPT_BYTES {
        return Err(std::io::Error::other(format!(
            "more than {} GiB of text from a stream: save it to a file first",
            MAX_STREAMED_PROMPT_BYTES >> 30
        )));
    }
    Ok(buf)
}
