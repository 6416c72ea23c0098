//! What travels between the threads of a runtime: a [`Request`] (or an [`EmbedRequest`])
//! and its [`Reply`] events, where replies go ([`ReplySink`]), what the engine thread
//! reports besides them ([`Observer`]), and the commands a `Handle` sends.

use std::sync::mpsc::Sender;
use std::time::Duration;

use thiserror::Error;

use crate::error::CoreError;
use crate::kv::KvSnapshot;
use crate::scheduler::{EmbedParams, GenParams, GenStats, Scheduler, TokenLogprobs};

/// One request: `n` answers to one prompt.
#[derive(Clone, Debug)]
pub struct Request {
    pub prompt: Vec<u32>,
    pub params: GenParams,
    /// Answers to generate (OpenAI's `n`): the prompt is evaluated once and shared, and
    /// answer `i` samples with seed `params.sampler.seed + i`. 0 asks for nothing (the
    /// request hears nothing back).
    pub n: usize,
    /// Report each token's log probability with this many alternatives.
    pub logprobs: Option<usize>,
    /// Text the first generated token must begin with (token healing, see
    /// [`crate::scheduler::SubmitOptions::heal`]).
    pub heal: String,
    /// Refuse a prompt that leaves no room to generate, or a `max_tokens` past the
    /// context, instead of cutting the answer short (see
    /// [`crate::scheduler::SubmitOptions::strict_context`]).
    pub strict_context: bool,
}

impl Request {
    /// One answer to `prompt`, no log probabilities, no healing.
    pub fn new(prompt: Vec<u32>, params: GenParams) -> Request {
        Request {
            prompt,
            params,
            n: 1,
            logprobs: None,
            heal: String::new(),
            strict_context: false,
        }
    }
}

/// One embedding request: a vector set (an answer) for each input, each input evaluated as
/// a sequence of its own, in the passes of whatever else runs (see
/// [`Scheduler::submit_embedding`]).
#[derive(Clone, Debug)]
pub struct EmbedRequest {
    /// The inputs' tokens, specials and all (as the tokenizer made them, or as a client
    /// gave them); answer `i` is input `i`'s.
    pub inputs: Vec<Vec<u32>>,
    pub params: EmbedParams,
}

/// What a request hears back; `index` is the answer (OpenAI's choice index, or the input of
/// an embedding request). Every answer
/// ends with exactly one `Done` or `Error`, unless the engine thread stops first (its
/// scheduler could not be built, or the runtime was dropped): the channel then closes.
#[derive(Debug)]
pub enum Reply {
    Token {
        index: usize,
        token: u32,
        logprobs: Option<TokenLogprobs>,
    },
    Text {
        index: usize,
        text: String,
    },
    /// An embedding request's vectors for input `index` (then its `Done`).
    Embedding {
        index: usize,
        embedding: Vec<Vec<f32>>,
    },
    Done {
        index: usize,
        stats: GenStats,
    },
    Error {
        index: usize,
        error: CoreError,
    },
}

impl Reply {
    /// The answer this reply belongs to.
    pub fn index(&self) -> usize {
        match self {
            Reply::Token { index, .. }
            | Reply::Text { index, .. }
            | Reply::Embedding { index, .. }
            | Reply::Done { index, .. }
            | Reply::Error { index, .. } => *index,
        }
    }

    /// Whether this reply ends its answer.
    pub fn is_end(&self) -> bool {
        matches!(self, Reply::Done { .. } | Reply::Error { .. })
    }
}

/// Where a request's replies go: any channel whose sending side can live on the engine
/// thread.
pub trait ReplySink: Send {
    /// Delivers one reply; false when nobody listens any more (the request is then
    /// cancelled).
    fn send(&self, reply: Reply) -> bool;

    /// Whether the receiving side is gone. Asked between steps, so a request whose
    /// receiver went away is cancelled even while it sends nothing (a long prompt).
    fn is_closed(&self) -> bool {
        false
    }
}

impl ReplySink for Sender<Reply> {
    fn send(&self, reply: Reply) -> bool {
        Sender::send(self, reply).is_ok()
    }
}

/// What the engine thread reports besides replies (a server's metrics). Every method has
/// an empty default.
pub trait Observer: Send {
    /// A request was taken (once per request, whatever its `n`).
    fn on_request(&mut self) {}
    /// An answer sampled a token; `latency` is the time since its request was submitted
    /// (the first token, `first`) or since the answer's previous token.
    fn on_token(&mut self, _first: bool, _latency: Duration) {}
    /// An answer ended; `elapsed` is the time since its request was submitted.
    fn on_done(&mut self, _stats: &GenStats, _elapsed: Duration) {}
    /// An input of an embedding request ended (its vectors sent, or cancelled: see
    /// `stats.stop_reason`); `elapsed` is the time since its request was submitted.
    fn on_embedding(&mut self, _stats: &GenStats, _elapsed: Duration) {}
    /// After each step, and before the thread waits for work.
    fn on_step(&mut self, _sched: &Scheduler) {}
    /// A step failed (its requests already heard an error each).
    fn on_step_error(&mut self, _error: &CoreError) {}
}

/// An observer that observes nothing.
#[derive(Debug, Default)]
pub struct NoObserver;

impl Observer for NoObserver {}

/// How the engine thread runs.
pub struct RuntimeOptions {
    /// Sleep this long after every step (tests make a tiny model as slow as a big one).
    pub step_delay: Duration,
    pub observer: Box<dyn Observer>,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            step_delay: Duration::ZERO,
            observer: Box::new(NoObserver),
        }
    }
}

impl std::fmt::Debug for RuntimeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeOptions")
            .field("step_delay", &self.step_delay)
            .finish_non_exhaustive()
    }
}

/// Names a submitted request, to cancel it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct RequestId(pub(super) u64);

/// The engine thread is gone (it failed to start, or was shut down).
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
#[error("the engine thread has stopped")]
pub struct Stopped;

pub(super) enum Command {
    Submit {
        id: RequestId,
        request: Box<Request>,
        reply: Box<dyn ReplySink>,
    },
    Embed {
        id: RequestId,
        request: Box<EmbedRequest>,
        reply: Box<dyn ReplySink>,
    },
    Cancel(RequestId),
    /// Take the rows of the longest cached prefix of `tokens` (see
    /// [`Scheduler::export_cached`]).
    ExportKv {
        tokens: Vec<u32>,
        done: Box<dyn FnOnce(Result<Option<KvSnapshot>, CoreError>) + Send>,
    },
    /// Put saved rows into the prefix cache (see [`Scheduler::import_cached`]).
    ImportKv {
        snapshot: Box<KvSnapshot>,
        done: Box<dyn FnOnce(Result<usize, CoreError>) + Send>,
    },
    /// End every request now (a server's shutdown deadline).
    CancelAll,
    /// Cancel what is left and end the thread.
    Exit,
}
