//! Which of OpenAI's APIs a request came through. The request reader, the check for
//! unsupported fields (which the reader calls) and the answer's shape all depend on it,
//! so it sits apart from each of them.

/// Which API a request came through (the `logprobs` fields differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Chat,
    Completion,
}
