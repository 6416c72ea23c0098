//! Tab completion in the chat's line editor: a slash command's name, `/set`'s setting
//! names, `/show`'s words, and file names after `/save` and `/load`. A message (a line not
//! starting with one `/`) completes nothing: Tab there is text the user may mean.

use rustyline::completion::{Completer, FilenameCompleter, Pair};
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Context, Helper};

use super::commands::{COMMAND_NAMES, SETTING_NAMES, SHOW_WORDS};

/// The line editor's helper: completion only (no hints, colours or validation).
pub struct SlashCompleter {
    files: FilenameCompleter,
}

impl SlashCompleter {
    pub fn new() -> SlashCompleter {
        SlashCompleter {
            files: FilenameCompleter::new(),
        }
    }
}

/// What Tab offers at byte `pos` of `line`: the byte where the completed word starts and
/// the words it may become; `None` where file names are completed instead.
fn words_at(line: &str, pos: usize) -> Option<(usize, Vec<&'static str>)> {
    let before = &line[..pos];
    let Some(rest) = before.strip_prefix('/').filter(|r| !r.starts_with('/')) else {
        return Some((pos, Vec::new()));
    };
    let starting = |words: &[&'static str], start: usize| {
        let typed = &before[start..];
        let found = words.iter().copied().filter(|w| w.starts_with(typed));
        (start, found.collect())
    };
    let Some((name, arg)) = rest.split_once(' ') else {
        return Some(starting(COMMAND_NAMES, 1));
    };
    let arg_start = pos - arg.len();
    match name {
        // One word after these: a second gets nothing.
        "set" if !arg.contains(' ') => Some(starting(SETTING_NAMES, arg_start)),
        "show" if !arg.contains(' ') => Some(starting(SHOW_WORDS, arg_start)),
        "save" | "load" => None,
        _ => Some((pos, Vec::new())),
    }
}

impl Completer for SlashCompleter {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let Some((start, words)) = words_at(line, pos) else {
            return self.files.complete_path(line, pos);
        };
        let pairs = words
            .into_iter()
            .map(|w| Pair {
                display: w.to_owned(),
                replacement: w.to_owned(),
            })
            .collect();
        Ok((start, pairs))
    }
}

impl Hinter for SlashCompleter {
    type Hint = String;
}
impl Highlighter for SlashCompleter {}
impl Validator for SlashCompleter {}
impl Helper for SlashCompleter {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completes_commands_settings_and_show_words_only() {
        let at_end = |l: &str| words_at(l, l.len());
        assert_eq!(at_end("/he"), Some((1, vec!["help"])));
        assert_eq!(
            at_end("/s").unwrap().1,
            vec!["system", "set", "show", "save", "stats"]
        );
        assert_eq!(at_end("/set top"), Some((5, vec!["top-k", "top-p"])));
        assert_eq!(at_end("/show in"), Some((6, vec!["info"])));
        assert_eq!(at_end("/save ~/c"), None);
        for nothing in ["hello /he", "//he", "/set temp 0", "/bye x"] {
            assert_eq!(at_end(nothing).unwrap().1, Vec::<&str>::new(), "{nothing}");
        }
    }
}
