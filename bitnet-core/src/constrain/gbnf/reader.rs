//! The GBNF parser, after llama.cpp's (`llama-grammar.cpp`): rules, alternatives,
//! sequences, literals and classes with their escapes, tokens, and repetitions, with
//! llama.cpp's bound on how far repetitions expand and a bound on nesting that hostile input
//! cannot choose.

use std::collections::HashMap;

use super::error::GbnfError;
use super::grammar::{Alternatives, Item, TokenRef};

/// Deepest nesting of groups and stacked repetitions (`((x)*)+`): the reader and the writer
/// recurse on it, so hostile input must not choose it.
pub(super) const MAX_NESTING: usize = 64;
/// llama.cpp's bound on repetition counts, and on repeated rules times their repetition.
const MAX_REPETITION: u64 = 2000;
/// What llama.cpp's repetition bound looks at, carried with each item as it is read.
#[derive(Clone, Copy)]
struct Size {
    /// Nesting of groups and repetitions.
    depth: usize,
    /// Rules llama.cpp would repeat if this item were repeated.
    weight: u64,
    /// Rules llama.cpp generates for this item.
    generated: u64,
}

const LEAF: Size = Size {
    depth: 0,
    weight: 1,
    generated: 0,
};

/// The parser: reads rules into [`Alternatives`], by id in order of first mention.
pub(super) struct Reader<'a> {
    src: &'a str,
    /// Byte offset into `src`.
    pos: usize,
    pub(super) names: Vec<String>,
    pub(super) ids: HashMap<String, usize>,
    /// Where each rule is first named (for "not defined").
    pub(super) first_use: Vec<usize>,
    pub(super) rules: Vec<Option<Alternatives>>,
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-'
}

impl Reader<'_> {
    pub(super) fn new(src: &str) -> Reader<'_> {
        Reader {
            src,
            pos: 0,
            names: Vec::new(),
            ids: HashMap::new(),
            first_use: Vec::new(),
            rules: Vec::new(),
        }
    }

    pub(super) fn error_at(&self, pos: usize, message: String) -> GbnfError {
        let before = &self.src[..pos.min(self.src.len())];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        GbnfError {
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
            message,
        }
    }

    fn error(&self, message: impl Into<String>) -> GbnfError {
        self.error_at(self.pos, message.into())
    }

    fn peek(&self) -> Option<u8> {
        self.src.as_bytes().get(self.pos).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<u8> {
        self.src.as_bytes().get(self.pos + ahead).copied()
    }

    /// What is at the current position, for messages.
    fn found(&self) -> String {
        match self.src[self.pos..].chars().next() {
            None => "the end of the grammar".into(),
            Some('\n') | Some('\r') => "the end of the line".into(),
            Some(c) => format!("{c:?}"),
        }
    }

    fn skip_space(&mut self, newline_ok: bool) {
        while let Some(b) = self.peek() {
            match b {
                b' ' | b'\t' => self.pos += 1,
                b'\r' | b'\n' if newline_ok => self.pos += 1,
                b'#' => {
                    while !matches!(self.peek(), None | Some(b'\r' | b'\n')) {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn name(&mut self) -> Option<&str> {
        let start = self.pos;
        while self.peek().is_some_and(is_word_byte) {
            self.pos += 1;
        }
        (self.pos > start).then(|| &self.src[start..self.pos])
    }

    fn rule_id(&mut self, name: &str, at: usize) -> usize {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len();
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        self.first_use.push(at);
        self.rules.push(None);
        id
    }

    pub(super) fn grammar(&mut self) -> Result<(), GbnfError> {
        self.skip_space(true);
        while self.peek().is_some() {
            self.rule()?;
        }
        Ok(())
    }

    fn rule(&mut self) -> Result<(), GbnfError> {
        let start = self.pos;
        let Some(name) = self.name() else {
            return Err(self.error(format!("expected a rule name, found {}", self.found())));
        };
        let name = name.to_string();
        let id = self.rule_id(&name, start);
        self.skip_space(false);
        if !self.src[self.pos..].starts_with("::=") {
            return Err(self.error(format!(
                "expected '::=' after the rule name '{name}', found {}",
                self.found()
            )));
        }
        self.pos += 3;
        self.skip_space(true);
        let (alternatives, _) = self.alternatives(false, 0)?;
        match self.peek() {
            None => {}
            Some(b'\n') => self.pos += 1,
            Some(b'\r') => self.pos += if self.peek_at(1) == Some(b'\n') { 2 } else { 1 },
            Some(_) => {
                return Err(self.error(format!(
                    "expected the end of the line after rule '{name}', found {}",
                    self.found()
                )));
            }
        }
        self.skip_space(true);
        // As in llama.cpp, a rule defined twice keeps its last definition.
        self.rules[id] = Some(alternatives);
        Ok(())
    }

    fn alternatives(
        &mut self,
        nested: bool,
        depth: usize,
    ) -> Result<(Alternatives, Size), GbnfError> {
        let mut alternatives = Vec::new();
        let mut size = Size {
            depth: 1,
            weight: 1,
            generated: 1,
        };
        loop {
            let (sequence, inner) = self.sequence(nested, depth)?;
            alternatives.push(sequence);
            size.depth = size.depth.max(inner.depth + 1);
            size.generated = size.generated.saturating_add(inner.generated);
            if self.peek() != Some(b'|') {
                break;
            }
            self.pos += 1;
            self.skip_space(true);
        }
        size.weight = size.generated.max(1);
        Ok((alternatives, size))
    }

    /// Reads items until something that cannot start or follow one. `depth` is the group
    /// nesting of this sequence.
    fn sequence(&mut self, nested: bool, depth: usize) -> Result<(Vec<Item>, Size), GbnfError> {
        let mut items: Vec<(Item, Size)> = Vec::new();
        while let Some(b) = self.peek() {
            let start = self.pos;
            let item = match b {
                b'"' => (self.literal()?, LEAF),
                b'[' => (self.class()?, LEAF),
                b'<' | b'!' => (self.token()?, LEAF),
                b'.' => {
                    self.pos += 1;
                    (Item::Any, LEAF)
                }
                b'(' => {
                    if depth + 1 >= MAX_NESTING {
                        return Err(
                            self.error(format!("groups are nested more than {MAX_NESTING} deep"))
                        );
                    }
                    self.pos += 1;
                    self.skip_space(true);
                    let (alternatives, size) = self.alternatives(true, depth + 1)?;
                    if size.depth >= MAX_NESTING {
                        return Err(self.error_at(
                            start,
                            format!(
                                "groups and repetitions are nested more than {MAX_NESTING} deep"
                            ),
                        ));
                    }
                    if self.peek() != Some(b')') {
                        let message = match self.peek() {
                            None => "this '(' is never closed".to_string(),
                            Some(_) => format!("expected ')', found {}", self.found()),
                        };
                        let at = if self.peek().is_none() {
                            start
                        } else {
                            self.pos
                        };
                        return Err(self.error_at(at, message));
                    }
                    self.pos += 1;
                    (Item::Group(alternatives), size)
                }
                b'*' | b'+' | b'?' | b'{' => {
                    let Some(last) = items.pop() else {
                        return Err(
                            self.error(format!("{} has nothing before it to repeat", self.found()))
                        );
                    };
                    self.pos += 1;
                    let (min, max) = match b {
                        b'*' => (0, None),
                        b'+' => (1, None),
                        b'?' => (0, Some(1)),
                        _ => self.counts(nested, start)?,
                    };
                    self.repeat(last, min, max, start)?
                }
                _ if is_word_byte(b) => {
                    let name = self.name().unwrap_or_default().to_string();
                    (Item::Rule(self.rule_id(&name, start)), LEAF)
                }
                _ => break,
            };
            items.push(item);
            self.skip_space(nested);
        }
        let mut size = Size {
            depth: 0,
            weight: 1,
            generated: 0,
        };
        for (_, s) in &items {
            size.depth = size.depth.max(s.depth);
            size.generated = size.generated.saturating_add(s.generated);
        }
        Ok((items.into_iter().map(|(item, _)| item).collect(), size))
    }
}

impl Reader<'_> {
    /// `"..."`, the opening quote at `pos`.
    fn literal(&mut self) -> Result<Item, GbnfError> {
        let start = self.pos;
        self.pos += 1;
        let mut chars = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.error_at(start, "this string is never closed".into())),
                Some(b'"') => break,
                Some(_) => chars.push(self.char()?),
            }
        }
        self.pos += 1;
        Ok(Item::Literal(chars))
    }

    /// `[...]` or `[^...]`, the bracket at `pos`. As in llama.cpp, `-` before `]` is itself,
    /// and `]` closes the class wherever it stands (so `[]` matches nothing).
    fn class(&mut self) -> Result<Item, GbnfError> {
        let start = self.pos;
        self.pos += 1;
        let negated = self.peek() == Some(b'^');
        if negated {
            self.pos += 1;
        }
        let unclosed = |r: &Self| r.error_at(start, "this character class is never closed".into());
        let mut ranges = Vec::new();
        loop {
            match self.peek() {
                None => return Err(unclosed(self)),
                Some(b']') => break,
                Some(_) => {}
            }
            let lo = self.char()?;
            let mut hi = lo;
            if self.peek() == Some(b'-') && self.peek_at(1) != Some(b']') {
                self.pos += 1;
                if self.peek().is_none() {
                    return Err(unclosed(self));
                }
                hi = self.char()?;
            }
            ranges.push((lo, hi));
        }
        self.pos += 1;
        Ok(Item::Class { negated, ranges })
    }

    /// One character of a literal or class, escapes decoded.
    fn char(&mut self) -> Result<char, GbnfError> {
        let rest = &self.src[self.pos..];
        let Some(c) = rest.chars().next() else {
            return Err(self.error("unexpected end of the grammar"));
        };
        if c != '\\' {
            self.pos += c.len_utf8();
            return Ok(c);
        }
        let start = self.pos;
        let escape = rest[1..].chars().next();
        let digits = match escape {
            Some('x') => 2,
            Some('u') => 4,
            Some('U') => 8,
            Some(c @ ('\\' | '"' | '[' | ']' | '-')) => {
                self.pos += 2;
                return Ok(c);
            }
            Some(c @ ('t' | 'r' | 'n')) => {
                self.pos += 2;
                return Ok(match c {
                    't' => '\t',
                    'r' => '\r',
                    _ => '\n',
                });
            }
            Some(c) => return Err(self.error(format!("unknown escape '\\{c}'"))),
            None => return Err(self.error("a '\\' at the end of the grammar")),
        };
        let escape = escape.unwrap_or_default();
        let hex = rest
            .get(2..2 + digits)
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
        let Some(hex) = hex else {
            return Err(self.error(format!("'\\{escape}' needs {digits} hexadecimal digits")));
        };
        let value = u32::from_str_radix(hex, 16).unwrap_or(u32::MAX);
        let Some(c) = char::from_u32(value) else {
            return Err(self.error_at(
                start,
                format!("'\\{escape}{hex}' is not a Unicode character"),
            ));
        };
        self.pos += 2 + digits;
        Ok(c)
    }

    /// `<[id]>`, `!<[id]>` or `<text>`, at `pos`.
    fn token(&mut self) -> Result<Item, GbnfError> {
        let start = self.pos;
        let negated = self.peek() == Some(b'!');
        if negated {
            self.pos += 1;
        }
        if self.peek() != Some(b'<') {
            return Err(self.error(format!("expected '<' after '!', found {}", self.found())));
        }
        let Some(len) = self.src[self.pos..].find('>') else {
            return Err(self.error_at(start, "this token is never closed with '>'".into()));
        };
        let text = &self.src[self.pos..self.pos + len + 1];
        let token = if let Some(id) = text.strip_prefix("<[").and_then(|t| t.strip_suffix("]>")) {
            let id = id
                .parse::<u32>()
                .ok()
                .filter(|_| id.bytes().all(|b| b.is_ascii_digit()));
            match id {
                Some(id) => TokenRef::Id(id),
                None => return Err(self.error_at(start, "expected a token id in '<[...]>'".into())),
            }
        } else if negated {
            return Err(self.error_at(
                start,
                "a negated token is only supported by id, as '!<[id]>'".into(),
            ));
        } else if text[1..text.len() - 1].is_empty()
            || text[1..text.len() - 1].contains(|c: char| c == '<' || c.is_whitespace())
        {
            return Err(self.error_at(
                start,
                "a token named by its text has no spaces and no '<' in it".into(),
            ));
        } else {
            TokenRef::Text(text.to_string())
        };
        self.pos += len + 1;
        Ok(Item::Token { negated, token })
    }

    /// `{m}`, `{m,}`, `{m,n}` or `{,n}`, after the `{`.
    fn counts(&mut self, nested: bool, start: usize) -> Result<(u64, Option<u64>), GbnfError> {
        self.skip_space(nested);
        let min = self.number()?;
        self.skip_space(nested);
        let max = match self.peek() {
            Some(b'}') if min.is_some() => min,
            Some(b',') => {
                self.pos += 1;
                self.skip_space(nested);
                let max = self.number()?;
                self.skip_space(nested);
                max
            }
            _ => {
                return Err(self.error(format!(
                    "expected a number, ',' or '}}', found {}",
                    self.found()
                )));
            }
        };
        if min.is_none() && max.is_none() {
            return Err(self.error_at(start, "a repetition needs a count, as in {2,5}".into()));
        }
        if self.peek() != Some(b'}') {
            return Err(self.error(format!("expected '}}', found {}", self.found())));
        }
        self.pos += 1;
        let min = min.unwrap_or(0);
        for n in [Some(min), max].into_iter().flatten() {
            if n > MAX_REPETITION {
                return Err(self.error_at(
                    start,
                    format!("a repetition count over {MAX_REPETITION} ({n})"),
                ));
            }
        }
        if max.is_some_and(|max| max < min) {
            return Err(self.error_at(
                start,
                "the repetition's maximum is below its minimum".into(),
            ));
        }
        Ok((min, max))
    }

    fn number(&mut self) -> Result<Option<u64>, GbnfError> {
        let start = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        if start == self.pos {
            return Ok(None);
        }
        // Anything too long for u64 is over the bound anyway.
        Ok(Some(self.src[start..self.pos].parse().unwrap_or(u64::MAX)))
    }

    /// `item` repeated; fails as llama.cpp does when the rules it would expand into pass
    /// its bound (nested repetitions multiply).
    fn repeat(
        &self,
        (item, size): (Item, Size),
        min: u64,
        max: Option<u64>,
        at: usize,
    ) -> Result<(Item, Size), GbnfError> {
        let times = match max {
            Some(max) if max > 0 => max,
            _ => min.max(1),
        };
        let weight = size.weight.saturating_mul(times);
        if weight >= MAX_REPETITION {
            return Err(self.error_at(
                at,
                format!(
                    "this repetition expands past {MAX_REPETITION} rules; repeat less or \
                     simplify what is repeated"
                ),
            ));
        }
        if size.depth + 1 >= MAX_NESTING {
            return Err(self.error_at(
                at,
                format!("groups and repetitions are nested more than {MAX_NESTING} deep"),
            ));
        }
        let size = Size {
            depth: size.depth + 1,
            weight,
            generated: size
                .generated
                .saturating_add(max.map_or(1, |max| max - min)),
        };
        let item = Item::Repeat {
            item: Box::new(item),
            min,
            max,
        };
        Ok((item, size))
    }
}
