//! Input clean-up before tokenization (`--clean-input`, off by default): characters that
//! carry no meaning for the model but cost tokens, or push a small vocabulary to `<unk>`.
//!
//! - **Removed**: the soft hyphen, zero-width space, word joiner, zero-width no-break space
//!   (a BOM inside text), invisible math operators, the Mongolian vowel separator, variation
//!   selectors (they choose a glyph's presentation, not the character), and the bidirectional
//!   marks, embeddings and isolates (they reorder display, not the logical text, and are
//!   the "Trojan Source" way to hide text from a reader).
//! - **Zero-width joiner and non-joiner** are removed, except where they carry meaning: the
//!   joiner between two pictographs (an emoji sequence: 👩‍💻 is one emoji, not two), and
//!   either between two letters of a script that uses them (Arabic, Persian, Syriac, the
//!   Brahmic scripts of India: a Persian word's non-joiner is part of its spelling).
//! - **Whitespace**: unusual spaces (no-break, en, em, thin, ideographic, ...) and tabs inside
//!   a line become one space with the run they are in; a line's leading indentation keeps
//!   its width (unusual spaces there become plain ones); spaces at a line's end go; `\r\n`
//!   and lone `\r` become `\n`; more than one blank line becomes one.
//! - **Kept**: everything else, combining marks included (they are letters' accents), and,
//!   in [`CleanMode::Prose`], every fenced code block (```` ``` ```` or `~~~`) and inline
//!   code span, byte for byte.

/// What [`clean_input`] touches.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CleanMode {
    /// The whole text.
    All,
    /// The text outside fenced code blocks and inline code spans.
    Prose,
}

impl CleanMode {
    /// `all` or `prose`.
    pub fn parse(s: &str) -> Option<CleanMode> {
        match s {
            "all" => Some(CleanMode::All),
            "prose" => Some(CleanMode::Prose),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CleanMode::All => "all",
            CleanMode::Prose => "prose",
        }
    }
}

/// What [`clean_input`] changed.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// Invisible characters removed (joiners included).
    pub removed: usize,
    /// Characters of whitespace removed or replaced (runs collapsed, unusual spaces made
    /// plain, line ends normalized).
    pub whitespace: usize,
}

impl CleanReport {
    /// Whether the text changed.
    pub fn changed(&self) -> bool {
        self.removed + self.whitespace > 0
    }

    fn add(&mut self, o: CleanReport) {
        self.removed += o.removed;
        self.whitespace += o.whitespace;
    }
}

/// `text` cleaned as the module docs say, and what changed.
pub fn clean_input(text: &str, mode: CleanMode) -> (String, CleanReport) {
    let mut out = String::with_capacity(text.len());
    let mut report = CleanReport::default();
    let pieces = match mode {
        CleanMode::All => vec![(false, 0, text)],
        CleanMode::Prose => split_code(text),
    };
    for (code, at, piece) in pieces {
        if code {
            out.push_str(piece);
            continue;
        }
        let edges = Edges {
            text_start: at == 0,
            line_start: at == 0 || text.as_bytes()[at - 1] == b'\n',
            text_end: at + piece.len() == text.len(),
        };
        report.add(clean_prose(piece, edges, &mut out));
    }
    (out, report)
}

/// Characters removed wherever they are.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' // soft hyphen
        | '\u{180E}' // Mongolian vowel separator
        | '\u{200B}' // zero-width space
        | '\u{200E}' | '\u{200F}' | '\u{061C}' // LRM, RLM, ALM
        | '\u{202A}'..='\u{202E}' // bidi embeddings and overrides
        | '\u{2060}'..='\u{2064}' // word joiner, invisible operators
        | '\u{2066}'..='\u{2069}' // bidi isolates
        | '\u{FEFF}' // zero-width no-break space (BOM)
        | '\u{FE00}'..='\u{FE0F}' // variation selectors
        | '\u{E0100}'..='\u{E01EF}' // variation selectors supplement
    )
}

const ZWNJ: char = '\u{200C}';
const ZWJ: char = '\u{200D}';

/// Pictographs an emoji joiner sequence is made of (the blocks of `Extended_Pictographic`,
/// skin-tone modifiers and the regional indicators included).
fn is_pictograph(c: char) -> bool {
    matches!(c,
        '\u{00A9}' | '\u{00AE}' | '\u{203C}' | '\u{2049}' | '\u{2122}' | '\u{2139}'
        | '\u{2194}'..='\u{21FF}'
        | '\u{2300}'..='\u{23FF}'
        | '\u{2460}'..='\u{27BF}'
        | '\u{2900}'..='\u{297F}'
        | '\u{2B00}'..='\u{2BFF}'
        | '\u{3030}' | '\u{303D}' | '\u{3297}' | '\u{3299}'
        | '\u{1F000}'..='\u{1FAFF}'
    )
}

/// Letters of the scripts whose spelling uses the joiners: Arabic (with Persian and Urdu),
/// Syriac, N'Ko, and the Brahmic scripts from Devanagari to Sinhala.
fn is_joining_letter(c: char) -> bool {
    matches!(c,
        '\u{0600}'..='\u{06FF}'
        | '\u{0700}'..='\u{074F}'
        | '\u{0750}'..='\u{077F}'
        | '\u{07C0}'..='\u{07FF}'
        | '\u{08A0}'..='\u{08FF}'
        | '\u{0900}'..='\u{0DFF}'
        | '\u{FB50}'..='\u{FDFF}'
        | '\u{FE70}'..='\u{FEFC}'
    )
}

/// Horizontal whitespace folded by the clean-up (line breaks are handled apart).
fn is_space(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t' | '\u{000B}' | '\u{000C}' | '\u{00A0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}'
    )
}

/// Where a stretch of prose lies in the whole text (in [`CleanMode::Prose`] a stretch may
/// begin or end beside a code span, mid-line).
#[derive(Copy, Clone)]
struct Edges {
    /// The stretch begins the text.
    text_start: bool,
    /// The stretch begins a line (the text's start, or after a `\n`).
    line_start: bool,
    /// The stretch ends the text.
    text_end: bool,
}

/// Cleans a stretch of prose into `out`.
fn clean_prose(text: &str, edges: Edges, out: &mut String) -> CleanReport {
    let mut report = CleanReport::default();
    // Pass 1: the invisible characters go; the joiners stay where their neighbours (among
    // the characters kept) give them meaning.
    let chars: Vec<char> = text.chars().collect();
    let mut kept: Vec<char> = Vec::with_capacity(chars.len());
    for (i, &c) in chars.iter().enumerate() {
        if is_invisible(c) {
            report.removed += 1;
            continue;
        }
        if c == ZWJ || c == ZWNJ {
            let prev = kept.last().copied();
            let next = chars[i + 1..].iter().copied().find(|&n| !is_invisible(n));
            let meaningful = match (prev, next) {
                (Some(p), Some(n)) => {
                    (c == ZWJ && is_pictograph(p) && is_pictograph(n))
                        || (is_joining_letter(p) && is_joining_letter(n))
                }
                _ => false,
            };
            if !meaningful {
                report.removed += 1;
                continue;
            }
        }
        kept.push(c);
    }
    // Pass 2: whitespace, line by line.
    let mut blank_run = 0usize;
    let mut first = true;
    let mut i = 0;
    loop {
        // One line: kept[i..end], then its break (`\n`, `\r\n` or `\r`), if any.
        let end = kept[i..]
            .iter()
            .position(|&c| c == '\n' || c == '\r')
            .map_or(kept.len(), |p| i + p);
        let line = &kept[i..end];
        let brk = match kept.get(end) {
            Some('\r') if kept.get(end + 1) == Some(&'\n') => 2,
            Some(_) => 1,
            None => 0,
        };
        if kept.get(end) == Some(&'\r') {
            // `\r\n` -> `\n` drops one character; a lone `\r` is replaced by `\n`.
            report.whitespace += 1;
        }
        let starts = !first || edges.line_start;
        let ends = brk > 0 || edges.text_end;
        if starts && ends && line.iter().all(|&c| is_space(c)) {
            // A blank line: its spaces go, and the line itself when it opens the text or
            // follows another blank line.
            report.whitespace += line.len();
            if brk > 0 {
                blank_run += 1;
                if blank_run > 1 || (first && edges.text_start) {
                    report.whitespace += 1;
                } else {
                    out.push('\n');
                }
            }
        } else {
            if !line.is_empty() {
                blank_run = 0;
            }
            write_line(line, starts, ends, out, &mut report);
            if brk > 0 {
                out.push('\n');
            }
        }
        if brk == 0 {
            break;
        }
        first = false;
        i = end + brk;
    }
    report
}

/// One line (or, beside a code span, part of one): at a line's start the indentation keeps
/// its width, inner runs become one space, and at a line's end the spaces go.
fn write_line(line: &[char], starts: bool, ends: bool, out: &mut String, report: &mut CleanReport) {
    let indent = if starts {
        line.iter().take_while(|&&c| is_space(c)).count()
    } else {
        0
    };
    for &c in &line[..indent] {
        if c == ' ' || c == '\t' {
            out.push(c);
        } else {
            out.push(' ');
            report.whitespace += 1;
        }
    }
    let body = &line[indent..];
    let last = if ends {
        body.iter()
            .rposition(|&c| !is_space(c))
            .map_or(0, |p| p + 1)
    } else {
        body.len()
    };
    report.whitespace += body.len() - last;
    let mut k = 0;
    while k < last {
        let c = body[k];
        if is_space(c) {
            let run = body[k..last].iter().take_while(|&&c| is_space(c)).count();
            out.push(' ');
            report.whitespace += if c == ' ' { run - 1 } else { run };
            k += run;
        } else {
            out.push(c);
            k += 1;
        }
    }
}

/// The text cut into pieces: `(true, offset, code)` for a fenced block (its fences included)
/// or an inline code span (its backticks included), `(false, offset, prose)` for the rest,
/// in order.
fn split_code(text: &str) -> Vec<(bool, usize, &str)> {
    let mut pieces = Vec::new();
    let mut prose_start = 0;
    let mut pos = 0;
    let bytes = text.as_bytes();
    while pos < text.len() {
        let line_start = pos == 0 || bytes[pos - 1] == b'\n';
        if line_start && let Some(end) = fenced_block(text, pos) {
            if prose_start < pos {
                pieces.push((false, prose_start, &text[prose_start..pos]));
            }
            pieces.push((true, pos, &text[pos..end]));
            pos = end;
            prose_start = end;
            continue;
        }
        if bytes[pos] == b'`' {
            let run = bytes[pos..].iter().take_while(|&&b| b == b'`').count();
            // The span ends at the next run of exactly as many backticks.
            let mut k = pos + run;
            let mut close = None;
            while k < text.len() {
                if bytes[k] == b'`' {
                    let r = bytes[k..].iter().take_while(|&&b| b == b'`').count();
                    if r == run {
                        close = Some(k + r);
                        break;
                    }
                    k += r;
                } else {
                    k += 1;
                }
            }
            if let Some(end) = close {
                if prose_start < pos {
                    pieces.push((false, prose_start, &text[prose_start..pos]));
                }
                pieces.push((true, pos, &text[pos..end]));
                pos = end;
                prose_start = end;
                continue;
            }
            pos += run;
            continue;
        }
        pos += 1;
    }
    if prose_start < text.len() {
        pieces.push((false, prose_start, &text[prose_start..]));
    }
    pieces
}

/// If a fenced code block opens at `pos` (the start of a line: up to three spaces, then three
/// or more backticks or tildes), the byte where it ends: after its closing fence's line (a
/// line of at least as many of the same character), or the end of the text when it is
/// never closed (as Markdown reads it).
fn fenced_block(text: &str, pos: usize) -> Option<usize> {
    let line_end = |from: usize| text[from..].find('\n').map_or(text.len(), |p| from + p + 1);
    let fence = |line: &str| -> Option<(u8, usize)> {
        let trimmed = line.trim_start_matches(' ');
        if line.len() - trimmed.len() > 3 {
            return None;
        }
        let b = *trimmed.as_bytes().first()?;
        if b != b'`' && b != b'~' {
            return None;
        }
        let n = trimmed.bytes().take_while(|&c| c == b).count();
        (n >= 3).then_some((b, n))
    };
    let first_end = line_end(pos);
    let (ch, n) = fence(&text[pos..first_end])?;
    let mut at = first_end;
    while at < text.len() {
        let end = line_end(at);
        let line = text[at..end].trim_end_matches(['\n', '\r']);
        if let Some((c, m)) = fence(line)
            && c == ch
            && m >= n
            && line.trim_start_matches(' ')[m..].trim().is_empty()
        {
            return Some(end);
        }
        at = end;
    }
    Some(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(s: &str) -> String {
        clean_input(s, CleanMode::All).0
    }

    #[test]
    fn invisible_characters_go() {
        assert_eq!(all("co\u{00AD}operate"), "cooperate");
        assert_eq!(
            all("zero\u{200B}width\u{2060}joiner\u{FEFF}"),
            "zerowidthjoiner"
        );
        assert_eq!(all("a\u{202E}evil\u{202C}b\u{2066}x\u{2069}"), "aevilbx");
        assert_eq!(all("\u{200E}left\u{200F}"), "left");
        let (t, r) = clean_input("\u{00AD}\u{200B}x", CleanMode::All);
        assert_eq!((t.as_str(), r.removed, r.whitespace), ("x", 2, 0));
    }

    #[test]
    fn variation_selectors_go_and_emoji_sequences_keep_their_joiners() {
        // ❤️ (heart + VS16) -> the heart.
        assert_eq!(all("\u{2764}\u{FE0F}"), "\u{2764}");
        // 👩‍💻: woman, ZWJ, laptop: one emoji; the joiner stays.
        assert_eq!(
            all("\u{1F469}\u{200D}\u{1F4BB}"),
            "\u{1F469}\u{200D}\u{1F4BB}"
        );
        // ❤️‍🔥: the selector goes, the joiner between the two pictographs stays.
        assert_eq!(
            all("\u{2764}\u{FE0F}\u{200D}\u{1F525}"),
            "\u{2764}\u{200D}\u{1F525}"
        );
        // Between letters of a script without joiners, or at an edge, it goes.
        assert_eq!(all("a\u{200D}b\u{200C}c\u{200D}"), "abc");
        assert_eq!(all("\u{1F469}\u{200D}x"), "\u{1F469}x");
    }

    #[test]
    fn joiners_in_the_scripts_that_spell_with_them_stay() {
        // Persian "می‌خواهم": the non-joiner after the prefix is part of the spelling.
        let fa = "\u{0645}\u{06CC}\u{200C}\u{062E}\u{0648}\u{0627}\u{0647}\u{0645}";
        assert_eq!(all(fa), fa);
        // Devanagari: क्‍ष (half form through ZWJ).
        let hi = "\u{0915}\u{094D}\u{200D}\u{0937}";
        assert_eq!(all(hi), hi);
    }

    #[test]
    fn combining_marks_and_other_text_are_kept() {
        let s = "Cafe\u{0301} na\u{0308}ive \u{4F60}\u{597D} \u{1F600} x\u{0332}";
        assert_eq!(all(s), s);
        let (_, r) = clean_input(s, CleanMode::All);
        assert!(!r.changed());
    }

    #[test]
    fn whitespace_runs_collapse_and_line_ends_normalize() {
        assert_eq!(all("a  b\t\tc\u{00A0}d\u{3000}\u{2003}e"), "a b c d e");
        assert_eq!(all("end   \nnext\t\n"), "end\nnext\n");
        assert_eq!(all("a\r\nb\rc"), "a\nb\nc");
        assert_eq!(all("one\n\n\n\n two"), "one\n\n two");
        assert_eq!(all("\n\n\nstart"), "start");
        // Indentation keeps its width (markdown nesting); unusual spaces there become plain.
        assert_eq!(
            all("- a\n    - b\n\u{00A0}\u{00A0}- c"),
            "- a\n    - b\n  - c"
        );
        let (_, r) = clean_input("a \u{00A0} b", CleanMode::All);
        assert_eq!(r.whitespace, 2);
    }

    #[test]
    fn prose_mode_keeps_code_blocks_and_spans_byte_for_byte() {
        let code = "```rust\nlet  x\u{00A0}=\u{200B} 1;   \n\n\n\tdone\u{00AD}\n```\n";
        let text = format!("Look\u{00A0}\u{00A0}here:\n{code}and  `a\u{200B}  b` then ~~~\n");
        let (out, r) = clean_input(&text, CleanMode::Prose);
        assert_eq!(
            out,
            format!("Look here:\n{code}and `a\u{200B}  b` then ~~~\n")
        );
        assert_eq!(
            r.whitespace, 3,
            "two no-break spaces made one, one space of two gone"
        );
        // A fence of tildes, longer than three, closed only by as long a fence.
        let tilde = "~~~~\n  keep  \u{00AD}\n~~~\nstill\u{00A0}\u{00A0}code\n~~~~\n";
        let (out, _) = clean_input(&format!("{tilde}after  x"), CleanMode::Prose);
        assert_eq!(out, format!("{tilde}after x"));
        // An unclosed fence runs to the end; an unclosed backtick is prose.
        let open = "x\n```\nraw  \u{00AD}";
        assert_eq!(clean_input(open, CleanMode::Prose).0, open);
        assert_eq!(clean_input("a ` b  c", CleanMode::Prose).0, "a ` b c");
        // In `all` mode the code is cleaned too.
        assert_eq!(all("`a  b`"), "`a b`");
    }

    #[test]
    fn any_text_comes_back_valid_and_clean_input_is_idempotent() {
        let samples = [
            "",
            "\n",
            "\r",
            " ",
            "\u{200D}",
            "```",
            "``a``b`",
            "\u{FEFF}\u{FEFF}",
            "a\u{00A0}\n\u{00A0}b",
            "~~~\n\r\n~~~",
        ];
        for s in samples {
            for mode in [CleanMode::All, CleanMode::Prose] {
                let (once, _) = clean_input(s, mode);
                let (twice, r) = clean_input(&once, mode);
                assert_eq!(once, twice, "{s:?} {mode:?}");
                assert!(!r.changed(), "{s:?} {mode:?} changed again");
            }
        }
    }
}
