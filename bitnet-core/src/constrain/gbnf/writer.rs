//! The Lark writer: one Lark rule per GBNF rule, every terminal one character long (see the
//! module docs of `gbnf.rs`), and groups nested too deep for llguidance's Lark reader moved
//! into rules of their own.

use std::collections::HashSet;

use super::grammar::{Alternatives, Item, TokenRef};

/// Groups nested deeper than this in one Lark rule become rules of their own: llguidance's
/// Lark reader refuses more than 30 levels.
const LARK_GROUP_DEPTH: usize = 12;

/// Writes the Lark text: one rule per GBNF rule, plus rules for groups nested too deep.
pub(super) struct Writer {
    /// Lark name of each GBNF rule, by id.
    names: Vec<String>,
    used: HashSet<String>,
    /// Rules made from deep groups, written after the rule they came from.
    extra: Vec<String>,
}

impl Writer {
    pub(super) fn new(gbnf_names: &[String]) -> Writer {
        let mut writer = Writer {
            names: Vec::new(),
            used: HashSet::from(["start".to_string()]),
            extra: Vec::new(),
        };
        for name in gbnf_names {
            let name = writer.unique(&lark_name(name));
            writer.names.push(name);
        }
        writer
    }

    /// `base`, or `base-2`, `base-3`... if taken.
    fn unique(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut n = 1;
        while self.used.contains(&name) {
            n += 1;
            name = format!("{base}-{n}");
        }
        self.used.insert(name.clone());
        name
    }

    pub(super) fn grammar(mut self, root: usize, rules: &[Alternatives]) -> String {
        let mut out = format!("start: {}\n", self.names[root]);
        for (id, alternatives) in rules.iter().enumerate() {
            let name = self.names[id].clone();
            let body = self.alternatives(alternatives, &name, 1);
            out.push_str(&format!("{name}: {body}\n"));
            for rule in std::mem::take(&mut self.extra) {
                out.push_str(&rule);
            }
        }
        out
    }

    /// `depth`: Lark group nesting of the text written.
    fn alternatives(&mut self, alternatives: &Alternatives, rule: &str, depth: usize) -> String {
        let written: Vec<String> = alternatives
            .iter()
            .map(|sequence| {
                let items: Vec<String> = sequence
                    .iter()
                    .map(|item| self.item(item, false, rule, depth))
                    .filter(|s| !s.is_empty())
                    .collect();
                if items.is_empty() {
                    "\"\"".to_string()
                } else {
                    items.join(" ")
                }
            })
            .collect();
        written.join(" | ")
    }

    /// `atom`: the text must be one Lark atom, as the operand of a repetition.
    fn item(&mut self, item: &Item, atom: bool, rule: &str, depth: usize) -> String {
        match item {
            Item::Literal(chars) => {
                let strings: Vec<String> = chars.iter().map(|&c| lark_string(c)).collect();
                match strings.len() {
                    0 => "\"\"".to_string(),
                    1 => strings.concat(),
                    _ if atom => self.wrapped(item, rule, depth),
                    _ => strings.join(" "),
                }
            }
            Item::Class { negated, ranges } => class_regex(*negated, ranges),
            Item::Any => ANY_CHAR.to_string(),
            Item::Rule(id) => self.names[*id].clone(),
            Item::Token { negated, token } => match token {
                TokenRef::Id(id) if *negated => format!("<[^{id}]>"),
                TokenRef::Id(id) => format!("<[{id}]>"),
                TokenRef::Text(text) => text.clone(),
            },
            Item::Group(alternatives) => {
                if depth + 1 > LARK_GROUP_DEPTH {
                    let name = self.unique(rule);
                    let body = self.alternatives(alternatives, &name, 1);
                    self.extra.push(format!("{name}: {body}\n"));
                    return name;
                }
                let body = self.alternatives(alternatives, rule, depth + 1);
                format!("({body})")
            }
            Item::Repeat { .. } if atom => self.wrapped(item, rule, depth),
            Item::Repeat { item, min, max } => {
                let suffix = match (*min, *max) {
                    (_, Some(0)) => return "\"\"".to_string(),
                    (0, None) => "*".to_string(),
                    (1, None) => "+".to_string(),
                    (0, Some(1)) => "?".to_string(),
                    (min, None) => format!("{{{min},}}"),
                    (min, Some(max)) if min == max => format!("{{{min}}}"),
                    (min, Some(max)) => format!("{{{min},{max}}}"),
                };
                let inner = self.item(item, true, rule, depth);
                format!("{inner}{suffix}")
            }
        }
    }

    /// `item` made one atom: in parentheses, or a rule of its own when nested too deep.
    fn wrapped(&mut self, item: &Item, rule: &str, depth: usize) -> String {
        if depth + 1 > LARK_GROUP_DEPTH {
            let name = self.unique(rule);
            let body = self.item(item, false, &name, 1);
            self.extra.push(format!("{name}: {body}\n"));
            name
        } else {
            format!("({})", self.item(item, false, rule, depth + 1))
        }
    }
}

/// Any one character, newline included.
const ANY_CHAR: &str = "/(?s:.)/";

/// A GBNF name as a Lark rule name: lower case, starting with a letter.
fn lark_name(gbnf: &str) -> String {
    let lower = gbnf.to_ascii_lowercase();
    if lower.starts_with(|c: char| c.is_ascii_lowercase()) {
        lower
    } else {
        format!("r{lower}")
    }
}

/// One character as a Lark string (JSON syntax; Lark's lexer also wants DEL escaped).
fn lark_string(c: char) -> String {
    match c {
        '"' => "\"\\\"\"".to_string(),
        '\\' => "\"\\\\\"".to_string(),
        c if (c as u32) < 0x20 || c == '\u{7f}' => format!("\"\\u{:04x}\"", c as u32),
        c => format!("\"{c}\""),
    }
}

/// A character class as a Lark regex. Ranges that match nothing (`z-a`) are dropped, as
/// they match nothing in llama.cpp either.
fn class_regex(negated: bool, ranges: &[(char, char)]) -> String {
    let ranges: Vec<&(char, char)> = ranges.iter().filter(|(lo, hi)| lo <= hi).collect();
    if ranges.is_empty() {
        return if negated {
            ANY_CHAR.to_string()
        } else {
            // Matches nothing: the complement of every character.
            "/[^\\x{0}-\\x{10FFFF}]/".to_string()
        };
    }
    let mut out = String::from(if negated { "/[^" } else { "/[" });
    for &&(lo, hi) in &ranges {
        push_class_char(&mut out, lo);
        if hi != lo {
            out.push('-');
            push_class_char(&mut out, hi);
        }
    }
    out.push_str("]/");
    out
}

/// A character inside a regex class: letters and digits as they are, everything else as
/// `\x{..}`, which regex-syntax always reads as that character (and which has no `/` to end
/// the Lark regex early).
fn push_class_char(out: &mut String, c: char) {
    if c.is_alphanumeric() {
        out.push(c);
    } else {
        out.push_str(&format!("\\x{{{:X}}}", c as u32));
    }
}
