//! Why a request is refused before it runs ([`RequestError`]): checked once, when it is
//! submitted, so a caller hears it before any token and can answer it in its own terms (a
//! server's HTTP 400, a chat's message). The texts are the ones users have always seen.

use thiserror::Error;

use crate::kv::SeqId;
use crate::sampling::SamplingError;

/// A request the scheduler refuses at submit; nothing of it was queued or evaluated.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RequestError {
    /// No tokens to evaluate (an empty prompt, or a continuation of an empty sequence).
    #[error("no tokens to evaluate")]
    EmptyPrompt,
    #[error(
        "token id {token} at input position {index} is out of range (vocabulary has {n_vocab} tokens)"
    )]
    TokenOutOfRange {
        token: u32,
        index: usize,
        n_vocab: usize,
    },
    /// Under the `Stop` context policy the prompt does not fit the sequence (`n_past`
    /// positions held before it).
    #[error(
        "context overflow: {n_past} tokens in the context + {n_new} new exceed n_ctx = {n_ctx} by {}",
        n_past + n_new - n_ctx
    )]
    PromptPastContext {
        n_past: usize,
        n_new: usize,
        n_ctx: usize,
    },
    /// The prompt fills the context: nothing could be generated (only when the request
    /// asks for a strict context, `SubmitOptions::strict_context`).
    #[error("the prompt is {prompt} tokens, the context holds {n_ctx}: no room to generate")]
    NoRoomToGenerate { prompt: usize, n_ctx: usize },
    /// `max_tokens` past what the context leaves (only under a strict context).
    #[error(
        "this model's context is {n_ctx} tokens; you asked for {} ({prompt} in the prompt, \
         {max_tokens} to generate)",
        prompt + max_tokens
    )]
    MaxTokensPastContext {
        prompt: usize,
        max_tokens: usize,
        n_ctx: usize,
    },
    #[error(
        "invalid option context policy: keeping {keep} positions leaves too little of a \
         {max_len}-token context to shift (keep less than half)"
    )]
    ShiftKeepsTooMuch { keep: usize, max_len: usize },
    #[error("invalid option context policy: a window of {window} tokens is too small (at least 4)")]
    WindowTooSmall { window: usize },
    #[error(
        "invalid option context policy: {sinks} sinks and a {window}-token window do not fit a \
         sequence of at most {max_len} tokens (raise -c or shrink the window)"
    )]
    WindowPastContext {
        sinks: usize,
        window: usize,
        max_len: usize,
    },
    #[error(
        "invalid option context policy: a budget of {budget} positions does not fit a sequence \
         of at most {max_len} tokens (raise -c or lower the budget)"
    )]
    BudgetPastContext { budget: usize, max_len: usize },
    #[error(
        "invalid option context policy: a heavy-hitter policy keeps at least 1 recent position"
    )]
    NoRecentPositions,
    #[error(
        "invalid option context policy: a budget of {budget} positions leaves fewer than \
         {min_heavy} for heavy hitters after {sinks} sinks and {recent} recent ones"
    )]
    BudgetTooSmall {
        budget: usize,
        sinks: usize,
        recent: usize,
        min_heavy: usize,
    },
    /// A continuation on a sequence already longer than its policy lets it be.
    #[error(
        "invalid option context policy: the sequence holds {held} positions, more than the \
         policy's {limit}"
    )]
    PastPolicyLimit { held: usize, limit: usize },
    /// Speculation settings out of range (`option` names the setting).
    #[error("invalid option {option}: {reason}")]
    Speculation {
        option: &'static str,
        reason: String,
    },
    #[error(
        "invalid option model_draft: the request speculates with a draft model and none is loaded"
    )]
    NoDraftModel,
    #[error("invalid option heal: token healing needs the model's tokenizer")]
    HealWithoutTokenizer,
    #[error("invalid option heal: no token of the vocabulary begins with {0:?}")]
    NothingToHeal(String),
    #[error("invalid option after: a continuation of a kept sequence cannot share another prompt")]
    SharedContinuation,
    #[error("invalid option sequence: sequence {0} already has a request")]
    SequenceBusy(SeqId),
    /// The sampler's settings were refused.
    #[error(transparent)]
    Sampler(#[from] SamplingError),
}

impl RequestError {
    /// Whether the request asks more of the context than it has (a server's
    /// `context_length_exceeded`).
    pub fn is_context(&self) -> bool {
        matches!(
            self,
            RequestError::PromptPastContext { .. }
                | RequestError::NoRoomToGenerate { .. }
                | RequestError::MaxTokensPastContext { .. }
                | RequestError::ShiftKeepsTooMuch { .. }
                | RequestError::WindowTooSmall { .. }
                | RequestError::WindowPastContext { .. }
                | RequestError::BudgetPastContext { .. }
                | RequestError::NoRecentPositions
                | RequestError::BudgetTooSmall { .. }
                | RequestError::PastPolicyLimit { .. }
        )
    }
}
