//! The exception the package raises for what the engine refuses or fails at (a missing or
//! malformed file, a prompt past the context, a bad parameter), with the engine's own
//! message. A subclass of `ValueError`, as llama-cpp-python raises `ValueError` for the same
//! cases, so code written for it catches ours unchanged.

use std::error::Error;
use std::fmt::Write;

use pyo3::PyErr;
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;

create_exception!(
    _bitnet,
    BitnetError,
    PyValueError,
    "What the bitnet engine refused or failed at, with its message."
);

/// `error` and each of its causes, joined as anyhow's `{:#}` joins them: the message a
/// user of the CLI would read.
pub fn message_chain(error: &dyn Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // A transparent wrapper repeats its cause's text: say it once.
        if !text.ends_with(&cause_text) {
            let _ = write!(text, ": {cause_text}");
        }
        source = cause.source();
    }
    text
}

/// A [`BitnetError`] for `error`, its message prefixed with what was being done.
pub fn engine_error(doing: &str, error: &dyn Error) -> PyErr {
    BitnetError::new_err(format!("{doing}: {}", message_chain(error)))
}

/// A [`BitnetError`] with `message` as it is.
pub fn refused(message: impl Into<String>) -> PyErr {
    BitnetError::new_err(message.into())
}
