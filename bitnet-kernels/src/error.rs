//! The kernel crate's error type: only set-up can fail (a bad forced ISA, a shape that does
//! not fit a layout); the hot loops themselves never return errors.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KernelError {
    #[error(
        "unknown kernel set {name:?} (expected one of: scalar, avx2, avxvnni, avx512, neon, dotprod, i8mm)"
    )]
    UnknownIsa { name: String },
    #[error(
        "unknown prefetch policy {name:?} in BITNET_PREFETCH (expected one of: auto, tuned, off, l1, l2)"
    )]
    UnknownPrefetch { name: String },
    #[error("kernel set {isa} was requested but this CPU lacks {missing}")]
    IsaUnavailable {
        isa: &'static str,
        missing: &'static str,
    },
    #[error("{format} weights for a {rows}x{cols} matrix need {expected} bytes, got {got}")]
    SourceLength {
        format: &'static str,
        rows: usize,
        cols: usize,
        expected: usize,
        got: usize,
    },
    #[error("{format} cannot hold a {rows}x{cols} matrix: {reason}")]
    BadShape {
        format: &'static str,
        rows: usize,
        cols: usize,
        reason: &'static str,
    },
    #[error("weight {index} is {value}, expected {expected}")]
    BadWeight {
        index: usize,
        value: i8,
        expected: &'static str,
    },
    #[error("{what} is not a finite number ({value})")]
    NonFinite { what: &'static str, value: String },
}
