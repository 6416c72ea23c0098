//! `--clean-input[=all|prose]`: the input cleaned before tokenization
//! (`bitnet_core::tokenizer::clean`: invisible characters, stray joiners, variation
//! selectors and unusual whitespace), off by default; `prose` leaves fenced code blocks and
//! inline code untouched. `generate` cleans its prompts, `chat` each message typed, `serve`
//! the requests that do not say otherwise (their `clean_input` field).

use bitnet_core::tokenizer::Tokenizer;
use bitnet_core::tokenizer::clean::{CleanMode, CleanReport, clean_input};

#[derive(Clone, Debug, Default, clap::Args)]
pub struct CleanInputArgs {
    /// Clean the input before tokenization: drop invisible characters (soft hyphens,
    /// zero-width spaces, stray joiners, variation selectors, bidi controls) and collapse
    /// unusual whitespace. `--clean-input` or `=all` cleans everything, `=prose` keeps fenced
    /// code blocks and inline code as they are. Off by default.
    #[arg(
        long,
        value_name = "MODE",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "all",
        value_parser = parse_mode
    )]
    pub clean_input: Option<CleanMode>,
}

fn parse_mode(s: &str) -> Result<CleanMode, String> {
    CleanMode::parse(s).ok_or_else(|| format!("{s:?} is not a clean-up mode: all or prose"))
}

impl CleanInputArgs {
    /// `text` cleaned as asked (unchanged without the flag), and what changed.
    pub fn apply(&self, text: &str) -> (String, CleanReport) {
        match self.clean_input {
            Some(mode) => clean_input(text, mode),
            None => (text.to_owned(), CleanReport::default()),
        }
    }
}

/// The line `generate` and `chat` print about a clean-up: what went, and the tokens it
/// saved (`before` and `after` the token counts of the original and the cleaned text).
pub fn describe(mode: CleanMode, r: &CleanReport, before: usize, after: usize) -> String {
    format!(
        "clean-input ({}): {} invisible and {} whitespace characters removed or replaced, {before} -> {after} tokens ({} saved)",
        mode.name(),
        r.removed,
        r.whitespace,
        before as i64 - after as i64
    )
}

/// Token counts of `original` and `cleaned` as a prompt (with BOS), for [`describe`].
pub fn token_counts(tok: &Tokenizer, original: &str, cleaned: &str) -> (usize, usize) {
    (
        tok.encode(original, true, false).len(),
        tok.encode(cleaned, true, false).len(),
    )
}
