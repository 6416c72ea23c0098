//! One generation request from Python: its settings ([`Sampling`], turned into the
//! scheduler's [`GenParams`]) and [`TokenStream`], the iterator of its text that the Python
//! layer turns into llama-cpp-python's completion dicts and chunks.

use std::sync::Mutex;

use bitnet_core::runtime::{Handle, Reply, Request};
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::{GenParams, StopReason};
use pyo3::prelude::*;

use crate::error::{engine_error, refused};
use crate::replies::{Replies, next_reply};

/// The sampling settings of one call, as llama-cpp-python names them.
#[derive(Debug, Clone)]
pub struct Sampling {
    /// `None` (or a value <= 0 in Python): until the context is full.
    pub max_tokens: Option<usize>,
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: usize,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    pub seed: u64,
    pub stop: Vec<String>,
    pub logit_bias: Vec<(u32, f32)>,
}

impl Sampling {
    fn params(self) -> PyResult<GenParams> {
        for (name, v) in [
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("repeat_penalty", self.repeat_penalty),
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
        ] {
            if !v.is_finite() {
                return Err(refused(format!("{name} must be a finite number, not {v}")));
            }
        }
        if self.temperature < 0.0 {
            return Err(refused("temperature must be >= 0"));
        }
        Ok(GenParams {
            max_tokens: self.max_tokens.unwrap_or(usize::MAX),
            sampler: SamplerConfig {
                temperature: self.temperature,
                top_k: self.top_k,
                top_p: self.top_p,
                min_p: self.min_p,
                repeat_penalty: self.repeat_penalty,
                frequency_penalty: self.frequency_penalty,
                presence_penalty: self.presence_penalty,
                seed: self.seed,
                logit_bias: self.logit_bias,
                ..SamplerConfig::default()
            },
            stop: self.stop.into_iter().filter(|s| !s.is_empty()).collect(),
            ..GenParams::default()
        })
    }
}

/// Queues `prompt` with `sampling`; `heal` is text the first token must begin with (a chat
/// prompt's trailing space, see `bitnet_core::chat::HealedPrompt`).
pub fn start(
    handle: &Handle,
    prompt: Vec<u32>,
    sampling: Sampling,
    heal: String,
) -> PyResult<TokenStream> {
    if prompt.is_empty() {
        return Err(refused("the prompt is empty after tokenization"));
    }
    // OpenAI's rule, as llama-cpp-python applies it: a max_tokens that does not fit the
    // context is refused rather than cut short; without one, generate until it is full.
    let strict = sampling.max_tokens.is_some();
    let mut request = Request::new(prompt, sampling.params()?);
    request.heal = heal;
    request.strict_context = strict;
    Ok(TokenStream {
        state: Mutex::new(Replies::generate(handle, request)?),
        end: Mutex::new(None),
    })
}

/// How a generation ended: llama-cpp-python's `finish_reason` and the token counts of its
/// `usage`.
#[derive(Debug, Clone)]
struct End {
    finish_reason: &'static str,
    prompt_tokens: usize,
    completion_tokens: usize,
}

fn finish_reason(reason: StopReason) -> &'static str {
    match reason {
        StopReason::Eog | StopReason::StopString => "stop",
        StopReason::MaxTokens | StopReason::ContextFull => "length",
        StopReason::Callback | StopReason::Cancelled => "cancelled",
    }
}

/// The text of one generation as it is produced: iterate for its pieces (whole UTF-8, stop
/// strings held back and left out); once it is exhausted, `finish_reason`, `prompt_tokens`
/// and `completion_tokens` say how it ended. The interpreter lock is released while the
/// engine works; Ctrl-C, or dropping the iterator, cancels the request.
#[pyclass(module = "bitnet._bitnet", frozen)]
#[derive(Debug)]
pub struct TokenStream {
    state: Mutex<Replies>,
    end: Mutex<Option<End>>,
}

impl TokenStream {
    fn ended(&self) -> Option<End> {
        self.end.lock().ok().and_then(|e| e.clone())
    }
}

#[pymethods]
impl TokenStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<String>> {
        while let Some(reply) = next_reply(py, &self.state)? {
            match reply {
                Reply::Text { text, .. } if !text.is_empty() => return Ok(Some(text)),
                Reply::Done { stats, .. } => {
                    let end = End {
                        finish_reason: finish_reason(stats.stop_reason),
                        prompt_tokens: stats.prompt_tokens,
                        completion_tokens: stats.gen_tokens,
                    };
                    if let Ok(mut slot) = self.end.lock() {
                        *slot = Some(end);
                    }
                }
                Reply::Error { error, .. } => return Err(engine_error("generating", &error)),
                Reply::Text { .. } | Reply::Token { .. } | Reply::Embedding { .. } => {}
            }
        }
        Ok(None)
    }

    /// Stops the generation now (what Ctrl-C and dropping the iterator do).
    fn cancel(&self) {
        if let Ok(mut replies) = self.state.lock() {
            replies.cancel();
        }
    }

    /// Whether the generation has ended (its last piece read, or cancelled).
    #[getter]
    fn finished(&self) -> bool {
        self.state.lock().map(|r| r.finished()).unwrap_or(true)
    }

    /// `"stop"` (end of generation or a stop string), `"length"` (`max_tokens` or the
    /// context), `"cancelled"`; `None` until the last piece has been read.
    #[getter]
    fn finish_reason(&self) -> Option<&'static str> {
        self.ended().map(|e| e.finish_reason)
    }

    /// Prompt tokens of the request (`None` until the end).
    #[getter]
    fn prompt_tokens(&self) -> Option<usize> {
        self.ended().map(|e| e.prompt_tokens)
    }

    /// Tokens generated (`None` until the end).
    #[getter]
    fn completion_tokens(&self) -> Option<usize> {
        self.ended().map(|e| e.completion_tokens)
    }
}
