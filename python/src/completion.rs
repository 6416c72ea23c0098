//! One generation request from Python: its settings ([`Sampling`], turned into the
//! scheduler's [`GenParams`]) and [`TokenStream`], the iterator of its text (and, when asked,
//! its tokens' log probabilities) that the Python layer turns into llama-cpp-python's
//! completion dicts and chunks.

use std::sync::{Arc, Mutex};

use bitnet_core::constrain::Constraint;
use bitnet_core::runtime::{Handle, Reply, Request, TokenEntry, TokenText};
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::scheduler::SpecParams;
use bitnet_core::{GenParams, Model, StopReason};
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
    /// Structured output: only tokens that keep the answer valid are sampled.
    pub constraint: Option<Constraint>,
    /// Speculative decoding (the `Llama`'s draft settings).
    pub speculate: Option<SpecParams>,
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
            constraint: self.constraint,
            speculate: self.speculate,
            ..GenParams::default()
        })
    }
}

/// Queues `prompt` with `sampling`; `heal` is text the first token must begin with (a chat
/// prompt's trailing space, see `bitnet_core::chat::HealedPrompt`); `logprobs`: report each
/// token's log probability with this many alternatives.
pub fn start(
    handle: &Handle,
    model: Arc<Model>,
    prompt: Vec<u32>,
    sampling: Sampling,
    heal: String,
    logprobs: Option<usize>,
) -> PyResult<TokenStream> {
    if prompt.is_empty() {
        return Err(refused("the prompt is empty after tokenization"));
    }
    // OpenAI's rule, as llama-cpp-python applies it: a max_tokens that does not fit the
    // context is refused rather than cut short; without one, generate until it is full.
    let strict = sampling.max_tokens.is_some();
    let mut request = Request::new(prompt, sampling.params()?);
    let tokens = TokenText::new(&heal, logprobs.is_some());
    request.heal = heal;
    request.strict_context = strict;
    request.logprobs = logprobs;
    Ok(TokenStream {
        state: Mutex::new(Replies::generate(handle, request)?),
        end: Mutex::new(None),
        tokens: Mutex::new(Tokens {
            model,
            text: tokens,
            settled: Vec::new(),
            flushed: false,
        }),
    })
}

/// The tokens of a generation that asked for log probabilities, matched to its text.
#[derive(Debug)]
struct Tokens {
    /// For the tokenizer: each token is decoded again as the engine decoded the answer.
    model: Arc<Model>,
    text: TokenText,
    /// Tokens whose text has been handed out and whose entries have not been taken.
    settled: Vec<TokenEntry>,
    /// Whether the end's held text has been handed out.
    flushed: bool,
}

impl Tokens {
    fn token(&mut self, id: u32, lp: &bitnet_core::scheduler::TokenLogprobs) {
        if let Some(tok) = self.model.tokenizer() {
            self.text.push(tok, id, lp);
        }
    }

    /// The part of `text` whose tokens are settled (all of it without log probabilities).
    fn pass(&mut self, text: &str) -> String {
        let (out, entries) = self.text.text(text);
        self.settled.extend(entries);
        out
    }

    /// At the end: the text still held back.
    fn flush(&mut self) -> String {
        if std::mem::replace(&mut self.flushed, true) {
            return String::new();
        }
        let (out, entries) = self.text.finish();
        self.settled.extend(entries);
        out
    }
}

/// One token's log probability as Python gets it: its text, its bytes, its log probability,
/// and the most likely tokens there (text, bytes, log probability).
type LogprobEntry = (String, Vec<u8>, f32, Vec<(String, Vec<u8>, f32)>);

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
    tokens: Mutex<Tokens>,
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
        let mut tokens = self
            .tokens
            .lock()
            .map_err(|_| refused("the generation's token list was poisoned by a panic"))?;
        while let Some(reply) = next_reply(py, &self.state)? {
            match reply {
                Reply::Token {
                    token,
                    logprobs: Some(lp),
                    ..
                } => tokens.token(token, &lp),
                Reply::Text { text, .. } => {
                    let out = tokens.pass(&text);
                    if !out.is_empty() {
                        return Ok(Some(out));
                    }
                }
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
                Reply::Token { .. } | Reply::Embedding { .. } => {}
            }
        }
        let rest = tokens.flush();
        Ok((!rest.is_empty()).then_some(rest))
    }

    /// The log probabilities of the tokens whose text has been handed out since the last
    /// call (nothing unless the generation asked for them): each token's text, bytes, log
    /// probability and the alternatives there, most likely first. The texts join up to the
    /// pieces handed out.
    fn take_logprobs(&self) -> Vec<LogprobEntry> {
        let Ok(mut tokens) = self.tokens.lock() else {
            return Vec::new();
        };
        std::mem::take(&mut tokens.settled)
            .into_iter()
            .map(|e| (e.text, e.bytes, e.logprob, e.top))
            .collect()
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
