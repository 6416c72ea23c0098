//! Why a GBNF grammar cannot be read: the line and column at fault, and what is wrong there.

use thiserror::Error;

/// A GBNF grammar that cannot be read.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("GBNF grammar, line {line}, column {column}: {message}")]
pub struct GbnfError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}
