//! GBNF (llama.cpp's grammar format) translated to llguidance's Lark dialect.
//!
//! The reader (`gbnf/reader.rs`) follows llama.cpp's parser (`llama-grammar.cpp`) into
//! the grammar of `gbnf/grammar.rs`, which `gbnf/writer.rs` writes as Lark. A rule ends at
//! a newline outside parentheses; newlines may follow `::=` and `|` and may appear
//! anywhere inside a group; `#` starts a comment.
//!
//! GBNF is matched character by character, while llguidance splits text into lexemes and
//! lexes greedily (a lexeme that can go on does, with no backtracking). A lexeme longer than
//! one character would change the language: `[a-z]+ "x"` as the two lexemes `/[a-z]+/` and
//! `"x"` rejects `abx`. So every terminal here is one character long (a literal becomes one
//! string per character): lexemes that each match exactly one code point cannot swallow
//! one another, and the Earley parser sees exactly GBNF's character sequence.
//!
//! This file checks what llguidance could not compile (undefined rules, reference chains
//! too deep) between reading and writing.

mod error;
mod grammar;
mod reader;
mod writer;

pub use error::GbnfError;
use grammar::{Alternatives, Item};
use reader::Reader;
use writer::Writer;

/// Deepest chain of rule references (groups counting as references) allowed: llguidance
/// compiles a rule where it is first referenced, recursing, a few kilobytes of stack a
/// level, and a thread's stack may be 2 MiB.
const MAX_REFERENCE_DEPTH: usize = 256;

/// Translates a GBNF grammar (start rule `root`) into Lark (start rule `start`).
pub fn gbnf_to_lark(src: &str) -> Result<String, GbnfError> {
    let mut reader = Reader::new(src);
    reader.grammar()?;
    for (id, rule) in reader.rules.iter().enumerate() {
        if rule.is_none() {
            let at = reader.first_use[id];
            return Err(reader.error_at(at, format!("rule '{}' is not defined", reader.names[id])));
        }
    }
    let Some(&root) = reader.ids.get("root") else {
        return Err(reader.error_at(0, "the grammar has no 'root' rule".into()));
    };
    let rules: Vec<Alternatives> = std::mem::take(&mut reader.rules)
        .into_iter()
        .flatten()
        .collect();
    if let Some(id) = too_deep(&rules, root) {
        return Err(reader.error_at(
            reader.first_use[id],
            format!(
                "rule '{}' is reached through rules nested too deep to compile (over \
                 {MAX_REFERENCE_DEPTH} rules and groups)",
                reader.names[id]
            ),
        ));
    }
    Ok(Writer::new(&reader.names).grammar(root, &rules))
}

/// The first rule that llguidance would reach more than [`MAX_REFERENCE_DEPTH`] deep,
/// following references from `root` depth first in the order written, as it compiles.
fn too_deep(rules: &[Alternatives], root: usize) -> Option<usize> {
    fn refs(alternatives: &Alternatives, groups: usize, out: &mut Vec<(usize, usize)>) {
        for item in alternatives.iter().flatten() {
            item_refs(item, groups, out);
        }
    }
    fn item_refs(item: &Item, groups: usize, out: &mut Vec<(usize, usize)>) {
        match item {
            Item::Rule(id) => out.push((*id, groups + 1)),
            Item::Group(alternatives) => refs(alternatives, groups + 1, out),
            Item::Repeat { item, .. } => item_refs(item, groups + 1, out),
            _ => {}
        }
    }
    let references: Vec<Vec<(usize, usize)>> = rules
        .iter()
        .map(|alternatives| {
            let mut out = Vec::new();
            refs(alternatives, 0, &mut out);
            out
        })
        .collect();
    let mut seen = vec![false; rules.len()];
    seen[root] = true;
    // (rule, next reference to follow, depth)
    let mut stack = vec![(root, 0, 1)];
    while let Some(frame) = stack.last_mut() {
        let (rule, next, depth) = *frame;
        let Some(&(id, cost)) = references[rule].get(next) else {
            stack.pop();
            continue;
        };
        frame.1 += 1;
        if !seen[id] {
            seen[id] = true;
            if depth + cost > MAX_REFERENCE_DEPTH {
                return Some(id);
            }
            stack.push((id, 0, depth + cost));
        }
    }
    None
}

#[cfg(test)]
mod tests;
