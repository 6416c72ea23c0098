//! Pre-tokenizers of byte-level BPE: the text is cut into words before merges run, and no
//! merge crosses a word boundary.
//!
//! Each pre-tokenizer is a list of passes, applied in order, as llama.cpp's
//! `unicode_regex_split` applies its list of regexes: a pass splits every piece left by the
//! previous pass, and both its matches and the stretches between them become pieces. The two
//! big regexes (GPT-2's and Llama-3's) are hand-written scanners that follow the regex
//! semantics, including the backtracking of `\s+(?!\S)` and `\s*[\r\n]+`; the small ones are
//! character-class runs.

use super::unicode::{self, IN_TEXT, LETTER, NUMBER, PUNCT, SPACE};

/// One splitting pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
    Gpt2,
    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}|
    /// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+` with D = `max_digits`
    /// (3 for Llama-3, 1 for Qwen2).
    Llama3 { max_digits: usize },
    /// `\p{N}`: every number character alone.
    EachNumber,
    /// `\p{N}+`.
    NumberRuns,
    /// `[\p{P}\$\+<=>\^~\|]+`, with the backtick too when `backtick` (Falcon).
    PunctRuns { backtick: bool },
    /// `[0-9][0-9][0-9]`.
    AsciiDigitTriples,
}

/// A named pre-tokenizer: its passes and the vocabulary flags llama.cpp ties to the name.
#[derive(Clone, Debug)]
pub(crate) struct PreTokenizer {
    pub passes: &'static [Pass],
    /// A word that is itself a token is taken whole, without merges (Llama-3).
    pub ignore_merges: bool,
    /// Default of `add_bos` when the file does not say.
    pub add_bos: bool,
}

const LLAMA3: &[Pass] = &[Pass::Llama3 { max_digits: 3 }];
const QWEN2: &[Pass] = &[Pass::Llama3 { max_digits: 1 }];
const GPT2: &[Pass] = &[Pass::Gpt2];
const STARCODER: &[Pass] = &[Pass::EachNumber, Pass::Gpt2];
const FALCON: &[Pass] = &[
    Pass::PunctRuns { backtick: true },
    Pass::Gpt2,
    Pass::AsciiDigitTriples,
];
const DEFAULT: &[Pass] = &[
    Pass::PunctRuns { backtick: false },
    Pass::Gpt2,
    Pass::NumberRuns,
    Pass::AsciiDigitTriples,
];

impl PreTokenizer {
    /// The pre-tokenizer for a `tokenizer.ggml.pre` value, by llama.cpp's table of names;
    /// `None` for names whose regexes are not implemented here. A missing name means
    /// `default`, as in llama.cpp.
    pub fn from_name(name: &str) -> Option<PreTokenizer> {
        let p = |passes, ignore_merges, add_bos| PreTokenizer {
            passes,
            ignore_merges,
            add_bos,
        };
        Some(match name {
            "default" => p(DEFAULT, false, false),
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" => p(LLAMA3, true, true),
            "dbrx" | "smaug-bpe" | "chatglm-bpe" | "glm4" => p(LLAMA3, false, false),
            "qwen2" | "deepseek-r1-qwen" | "stablelm2" | "hunyuan" | "megrez" => {
                p(QWEN2, false, false)
            }
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert" | "mpt" | "olmo" | "jais"
            | "trillion" | "exaone4" | "granite-docling" => p(GPT2, false, false),
            "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone"
            | "minerva-7b" => p(STARCODER, false, false),
            "falcon" => p(FALCON, false, false),
            _ => return None,
        })
    }

    /// Splits `text` into words, returned as byte ranges that tile `text` in order.
    pub fn split(&self, text: &str, out: &mut Vec<(usize, usize)>) {
        out.clear();
        if text.is_empty() {
            return;
        }
        let cpts = Cpts::new(text);
        let mut pieces = vec![(0usize, cpts.len())];
        let mut next = Vec::with_capacity(pieces.len());
        for &pass in self.passes {
            next.clear();
            for &(s, e) in &pieces {
                run_pass(pass, &cpts, s, e, &mut next);
            }
            std::mem::swap(&mut pieces, &mut next);
        }
        out.extend(pieces.iter().map(|&(s, e)| (cpts.offs[s], cpts.offs[e])));
    }
}

/// The text as code points, with their byte offsets and class flags.
struct Cpts {
    chars: Vec<char>,
    /// Byte offset of each char, plus the text length at the end.
    offs: Vec<usize>,
    flags: Vec<u8>,
}

impl Cpts {
    fn new(text: &str) -> Cpts {
        let n = text.len();
        let mut chars = Vec::with_capacity(n);
        let mut offs = Vec::with_capacity(n + 1);
        let mut flags = Vec::with_capacity(n);
        for (i, c) in text.char_indices() {
            chars.push(c);
            offs.push(i);
            flags.push(unicode::flags(c));
        }
        offs.push(n);
        Cpts { chars, offs, flags }
    }

    fn len(&self) -> usize {
        self.chars.len()
    }
}

/// Emits the pieces of one pass over the code points `[s, e)`.
fn run_pass(pass: Pass, c: &Cpts, s: usize, e: usize, out: &mut Vec<(usize, usize)>) {
    match pass {
        Pass::Gpt2 => scan(c, s, e, out, gpt2_match),
        Pass::Llama3 { max_digits } => scan(c, s, e, out, |c, s, e, pos, out| {
            llama3_match(c, s, e, pos, max_digits, out)
        }),
        Pass::EachNumber => class_split(c, s, e, out, |f, _| f & NUMBER != 0, false),
        Pass::NumberRuns => class_split(c, s, e, out, |f, _| f & NUMBER != 0, true),
        Pass::PunctRuns { backtick } => class_split(
            c,
            s,
            e,
            out,
            move |f, ch| {
                f & PUNCT != 0
                    || matches!(ch, '$' | '+' | '<' | '=' | '>' | '^' | '~' | '|')
                    || (backtick && ch == '`')
            },
            true,
        ),
        Pass::AsciiDigitTriples => {
            let mut prev = s;
            let mut i = s;
            while i + 3 <= e {
                if c.chars[i..i + 3].iter().all(char::is_ascii_digit) {
                    if i > prev {
                        out.push((prev, i));
                    }
                    out.push((i, i + 3));
                    i += 3;
                    prev = i;
                } else {
                    i += 1;
                }
            }
            if e > prev {
                out.push((prev, e));
            }
        }
    }
}

/// Matches of a one-character class (`runs`: greedy runs of it) and the gaps between them.
fn class_split(
    c: &Cpts,
    s: usize,
    e: usize,
    out: &mut Vec<(usize, usize)>,
    is_in: impl Fn(u8, char) -> bool,
    runs: bool,
) {
    let mut prev = s;
    let mut i = s;
    while i < e {
        if is_in(c.flags[i], c.chars[i]) {
            if i > prev {
                out.push((prev, i));
            }
            let start = i;
            i += 1;
            while runs && i < e && is_in(c.flags[i], c.chars[i]) {
                i += 1;
            }
            out.push((start, i));
            prev = i;
        } else {
            i += 1;
        }
    }
    if e > prev {
        out.push((prev, e));
    }
}

/// Drives a scanner that, at each position, returns the piece starting there as
/// `(start, end)`; a scanner may push earlier pieces itself first (number groups), in which
/// case `start` is past `pos`.
fn scan(
    c: &Cpts,
    s: usize,
    e: usize,
    out: &mut Vec<(usize, usize)>,
    mut step: impl FnMut(&Cpts, usize, usize, usize, &mut Vec<(usize, usize)>) -> (usize, usize),
) {
    let mut pos = s;
    while pos < e {
        let (start, end) = step(c, s, e, pos, out);
        // Every branch consumes at least one character; the clamp only guards the loop.
        let end = end.clamp(pos + 1, e);
        out.push((start, end));
        pos = end;
    }
}

/// Flags at `i`, or none outside `[s, e)`.
#[inline]
fn fl(c: &Cpts, s: usize, e: usize, i: usize) -> u8 {
    if i >= s && i < e { c.flags[i] } else { 0 }
}

#[inline]
fn ch(c: &Cpts, s: usize, e: usize, i: usize) -> Option<char> {
    if i >= s && i < e {
        Some(c.chars[i])
    } else {
        None
    }
}

/// Length of the contraction (`'s`, `'re`, ...) at `pos`, or 0.
fn contraction(c: &Cpts, s: usize, e: usize, pos: usize, any_case: bool) -> usize {
    if ch(c, s, e, pos) != Some('\'') {
        return 0;
    }
    let low = |x: Option<char>| x.map(|x| if any_case { x.to_ascii_lowercase() } else { x });
    let n1 = low(ch(c, s, e, pos + 1));
    let n2 = low(ch(c, s, e, pos + 2));
    match (n1, n2) {
        (Some('s' | 't' | 'm' | 'd'), _) => 2,
        (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l')) => 3,
        _ => 0,
    }
}

/// `(count, end of the last \r or \n)` of the whitespace run starting at `pos`.
fn whitespace_run(c: &Cpts, s: usize, e: usize, pos: usize) -> (usize, Option<usize>) {
    let mut n = 0;
    let mut last_nl = None;
    while fl(c, s, e, pos + n) & SPACE != 0 {
        if matches!(c.chars[pos + n], '\r' | '\n') {
            last_nl = Some(pos + n + 1);
        }
        n += 1;
    }
    (n, last_nl)
}

/// `\s+(?!\S)|\s+` for a run of `n` whitespace characters at `pos`: keep the last one for
/// the next word unless the run ends the fragment.
fn trailing_space_end(e: usize, pos: usize, n: usize) -> usize {
    if n > 1 && pos + n < e {
        pos + n - 1
    } else {
        pos + n.max(1)
    }
}

fn gpt2_match(
    c: &Cpts,
    s: usize,
    e: usize,
    pos: usize,
    _: &mut Vec<(usize, usize)>,
) -> (usize, usize) {
    (pos, gpt2_end(c, s, e, pos))
}

fn gpt2_end(c: &Cpts, s: usize, e: usize, pos: usize) -> usize {
    let k = contraction(c, s, e, pos, false);
    if k > 0 {
        return pos + k;
    }
    let is_space = c.chars[pos] == ' ';
    let f2 = if is_space {
        fl(c, s, e, pos + 1)
    } else {
        c.flags[pos]
    };
    let start = pos + usize::from(is_space);
    let run = |want: &dyn Fn(u8) -> bool| {
        let mut i = start;
        while want(fl(c, s, e, i)) {
            i += 1;
        }
        i
    };
    if f2 & LETTER != 0 {
        return run(&|f| f & LETTER != 0);
    }
    if f2 & NUMBER != 0 {
        return run(&|f| f & NUMBER != 0);
    }
    let other = |f: u8| f & (SPACE | LETTER | NUMBER) == 0 && f & IN_TEXT != 0;
    if other(f2) {
        return run(&other);
    }
    let (n, _) = whitespace_run(c, s, e, pos);
    trailing_space_end(e, pos, n)
}

fn llama3_match(
    c: &Cpts,
    s: usize,
    e: usize,
    pos: usize,
    max_digits: usize,
    out: &mut Vec<(usize, usize)>,
) -> (usize, usize) {
    // \p{N}{1,D}: full groups are pushed as they complete; the last one is returned.
    if c.flags[pos] & NUMBER != 0 && contraction(c, s, e, pos, true) == 0 {
        let mut ini = pos;
        let mut i = pos;
        while fl(c, s, e, i) & NUMBER != 0 {
            i += 1;
            if i - ini >= max_digits {
                out.push((ini, i));
                ini = i;
            }
        }
        if ini == i
            && let Some(last) = out.pop()
        {
            return last;
        }
        return (ini, i);
    }
    (pos, llama3_end(c, s, e, pos))
}

fn llama3_end(c: &Cpts, s: usize, e: usize, pos: usize) -> usize {
    let k = contraction(c, s, e, pos, true);
    if k > 0 {
        return pos + k;
    }
    let cp = c.chars[pos];
    let f = c.flags[pos];
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if !(cp == '\r' || cp == '\n' || f & NUMBER != 0)
        && (f & LETTER != 0 || fl(c, s, e, pos + 1) & LETTER != 0)
    {
        let mut i = pos + 1;
        while fl(c, s, e, i) & LETTER != 0 {
            i += 1;
        }
        return i;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    let is_space = cp == ' ';
    let f2 = if is_space { fl(c, s, e, pos + 1) } else { f };
    if f2 & (SPACE | LETTER | NUMBER) == 0 {
        let mut i = pos + usize::from(is_space);
        while fl(c, s, e, i) & (SPACE | LETTER | NUMBER) == 0 && fl(c, s, e, i) & IN_TEXT != 0 {
            i += 1;
        }
        while matches!(ch(c, s, e, i), Some('\r' | '\n')) {
            i += 1;
        }
        return i;
    }
    let (n, last_nl) = whitespace_run(c, s, e, pos);
    // \s*[\r\n]+
    if let Some(end) = last_nl {
        return end;
    }
    trailing_space_end(e, pos, n)
}

#[cfg(test)]
mod tests {
    //! The hand-written passes against the regexes themselves (llama.cpp's lists, run with
    //! `fancy-regex`, which has the lookahead and the Unicode classes), on random text.

    use super::*;

    const GPT2_RE: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
    const LLAMA3_RE: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const QWEN2_RE: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

    fn regexes(name: &str) -> Vec<&'static str> {
        match name {
            "gpt-2" => vec![GPT2_RE],
            "llama-bpe" => vec![LLAMA3_RE],
            "qwen2" => vec![QWEN2_RE],
            "starcoder" => vec![r"\p{N}", GPT2_RE],
            "falcon" => vec![r"[\p{P}\$\+<=>\^~\|`]+", GPT2_RE, "[0-9][0-9][0-9]"],
            "default" => vec![
                r"[\p{P}\$\+<=>\^~\|]+",
                GPT2_RE,
                r"\p{N}+",
                "[0-9][0-9][0-9]",
            ],
            _ => unreachable!(),
        }
    }

    /// llama.cpp's `unicode_regex_split`: each regex splits every piece; matches and the
    /// stretches between them are both pieces.
    fn reference(text: &str, res: &[fancy_regex::Regex]) -> Vec<(usize, usize)> {
        let mut pieces = vec![(0, text.len())];
        for re in res {
            let mut next = Vec::new();
            for &(a, b) in &pieces {
                let mut prev = a;
                for m in re.find_iter(&text[a..b]) {
                    let m = m.unwrap();
                    if a + m.start() > prev {
                        next.push((prev, a + m.start()));
                    }
                    next.push((a + m.start(), a + m.end()));
                    prev = a + m.end();
                }
                if b > prev {
                    next.push((prev, b));
                }
            }
            pieces = next;
        }
        pieces
    }

    const ALPHABET: &[char] = &[
        'a', 'Z', 'é', 'ж', '中', '1', '٣', '½', ' ', ' ', ' ', '\t', '\n', '\r', '\u{3000}',
        '\u{a0}', '\'', 's', 't', 'l', 'e', 'r', 'v', 'm', 'd', 'S', 'L', 'D', '.', ',', '!', '$',
        '+', '<', '`', '~', '|', '_', '-', '🦙', '\u{301}', '\u{17b6}', '7', '0', '\u{85}',
    ];

    #[test]
    fn passes_match_the_regexes() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        for name in [
            "gpt-2",
            "llama-bpe",
            "qwen2",
            "starcoder",
            "falcon",
            "default",
        ] {
            let pre = PreTokenizer::from_name(name).unwrap();
            let res: Vec<_> = regexes(name)
                .into_iter()
                .map(|r| fancy_regex::Regex::new(r).unwrap())
                .collect();
            let mut got = Vec::new();
            for _ in 0..3000 {
                let len = rnd(24);
                let text: String = (0..len).map(|_| ALPHABET[rnd(ALPHABET.len())]).collect();
                pre.split(&text, &mut got);
                let want = reference(&text, &res);
                assert_eq!(got, want, "{name}: {text:?}");
            }
        }
    }

    #[test]
    fn llama3_examples() {
        let pre = PreTokenizer::from_name("llama-bpe").unwrap();
        let mut out = Vec::new();
        let text = "Hello, y'all! 12345  \n\n  x";
        pre.split(text, &mut out);
        let words: Vec<&str> = out.iter().map(|&(a, b)| &text[a..b]).collect();
        assert_eq!(
            words,
            [
                "Hello", ",", " y", "'all", "!", " ", "123", "45", "  \n\n", " ", " x"
            ]
        );
    }
}
