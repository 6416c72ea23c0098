//! The kernel crate's error type: only set-up can fail (a bad forced ISA, a shape that does
//! not fit a layout); the hot loops themselves never return errors.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KernelError {
    #[error("unknown kernel set {name:?} (expected one of: scalar, avx2, avx512)")]
    UnknownIsa { name: String },
    #[error("kernel set {isa} was requested but this CPU lacks {missing}")]
    IsaUnavailable {
        isa: &'static str,
        missing: &'static str,
    },
}
