//! Why a chat template could not be found, read, parsed or rendered: its own file so that
//! the renderer, the template and the conversations can all report it without importing
//! the module that gathers them.

use thiserror::Error;

use super::builtin::builtin_names;
use super::template_limits::MAX_TEMPLATE_BYTES;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ChatError {
    /// The template's source is not valid Jinja.
    #[error("chat template {name:?} does not parse: {detail}")]
    Parse { name: String, detail: String },
    /// The template failed while rendering (including its own `raise_exception`).
    #[error("chat template {name:?} failed to render: {detail}")]
    Render { name: String, detail: String },
    /// A render needed more memory than its [`TemplateRenderer`](super::TemplateRenderer)
    /// allows it (a template that doubles a string in a loop, say).
    #[error(
        "chat template {name:?} ran out of its memory budget ({} MiB) while rendering",
        budget_bytes >> 20
    )]
    OutOfMemory { name: String, budget_bytes: u64 },
    /// A render took longer than its [`TemplateRenderer`](super::TemplateRenderer) allows it.
    #[error("chat template {name:?} took longer than {} s to render", limit.as_secs_f64())]
    TimedOut {
        name: String,
        limit: std::time::Duration,
    },
    /// A [`TemplateRenderer`](super::TemplateRenderer) could not run the render (its process
    /// failed to start or died of something other than its limits).
    #[error("chat template {name:?} could not be rendered: {detail}")]
    Renderer { name: String, detail: String },
    /// No built-in template has this name, and no file has this path.
    #[error(
        "no chat template {name:?}: give a built-in name ({}) or the path of a Jinja file",
        builtin_names()
    )]
    Unknown { name: String },
    /// The path exists but is not a file a template can be read from.
    #[error("the chat template {path} is {what}, not a file")]
    NotAFile {
        path: std::path::PathBuf,
        what: &'static str,
    },
    /// A template file larger than any template (see [`MAX_TEMPLATE_BYTES`]).
    #[error(
        "the chat template file {path} holds {bytes} bytes: more than {MAX_TEMPLATE_BYTES}, too large for a template"
    )]
    TooLarge {
        path: std::path::PathBuf,
        bytes: u64,
    },
    /// A template file could not be read.
    #[error("cannot read the chat template file {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}
