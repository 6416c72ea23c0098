//! Why a constraint could not be compiled or followed, and the trimming of llguidance's
//! messages into its details: their own file so that the vocabulary and the per-sequence
//! state can report errors without importing the module that uses them.

use thiserror::Error;

/// Why a constraint could not be compiled or followed.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConstraintError {
    /// A JSON Schema keyword that cannot be enforced token by token.
    #[error("the JSON schema uses {keyword:?}, which structured output does not support")]
    UnsupportedKeyword { keyword: String },
    /// The spec is not valid (a schema that is not a schema, a grammar that does not parse).
    #[error("invalid {kind}: {detail}")]
    Invalid { kind: &'static str, detail: String },
    /// The model has no tokenizer, or no end-of-generation token to end a constrained output.
    #[error("structured output needs {0}")]
    Vocabulary(String),
    /// The constraint failed while generating (no token can continue, or the parser gave up
    /// on a grammar too ambiguous for its limits).
    #[error("the {kind} constraint failed while generating: {detail}")]
    Failed { kind: &'static str, detail: String },
}

/// llguidance's messages can carry the whole grammar: keep the start.
pub(super) fn first_lines(msg: &str) -> String {
    const MAX: usize = 600;
    let mut s: String = msg.lines().take(8).collect::<Vec<_>>().join("\n");
    if s.len() > MAX {
        let mut cut = MAX;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str(" ...");
    }
    s
}
