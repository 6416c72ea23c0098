//! A GBNF grammar as read: each rule a list of alternatives, each alternative a sequence of
//! items (literals, classes, rule references, tokens, groups, repetitions). The reader
//! builds it and the Lark writer walks it.

/// `a | b c | ...`: alternatives, each a sequence.
pub(super) type Alternatives = Vec<Vec<Item>>;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Item {
    /// A string literal (repetition applies to all of it).
    Literal(Vec<char>),
    /// A character class; ranges are inclusive and may be empty (`z-a` matches nothing).
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    /// `.`: any character.
    Any,
    Rule(usize),
    /// `<[id]>`, `!<[id]>` or `<text>` (a token named by its text).
    Token {
        negated: bool,
        token: TokenRef,
    },
    Group(Alternatives),
    Repeat {
        item: Box<Item>,
        min: u64,
        max: Option<u64>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum TokenRef {
    Id(u32),
    Text(String),
}
