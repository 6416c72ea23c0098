//! The engine on a thread of its own, for programs that embed it (`bitnet serve` does): the
//! [`Scheduler`] is made and stepped on that thread (the engine pins it), and other threads
//! talk to it through a [`Handle`]. Each [`Request`] carries its own reply channel (any
//! [`ReplySink`]: a standard channel, or an async one in a server), over which it hears its
//! tokens, text and end as [`Reply`] events; [`Handle::cancel`] stops it, and so does its
//! receiver going away. When nothing is queued or running the thread blocks on its command
//! channel, so an idle runtime uses no CPU.
//!
//! ```
//! use bitnet_core::runtime::{Reply, Request, Runtime, RuntimeOptions};
//! use bitnet_core::{Engine, EngineOptions, GenParams, LoadOptions, Model, Scheduler};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/shakespeare.gguf");
//! let model = std::sync::Arc::new(Model::load(path, &LoadOptions::default())?);
//! let prompt = model.tokenizer().unwrap().encode("Hello", true, false);
//! let runtime = Runtime::spawn(RuntimeOptions::default(), move || {
//!     let engine = Engine::new(model, &EngineOptions::default())?;
//!     Ok::<_, bitnet_core::CoreError>(Scheduler::new(engine, Default::default()))
//! })?;
//! let mut text = String::new();
//! for reply in runtime.handle().stream(Request::new(prompt, GenParams::default()))? {
//!     match reply {
//!         Reply::Text { text: piece, .. } => text.push_str(&piece),
//!         Reply::Done { stats, .. } => assert!(stats.gen_tokens > 0),
//!         _ => {}
//!     }
//! }
//! runtime.shutdown()?;
//! # Ok(())
//! # }
//! ```

mod worker;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use thiserror::Error;

use crate::error::CoreError;
use crate::scheduler::{GenParams, GenStats, Scheduler, TokenLogprobs};

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

/// What a request hears back; `index` is the answer (OpenAI's choice index). Every answer
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
pub struct RequestId(u64);

/// The engine thread is gone (it failed to start, or was shut down).
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
#[error("the engine thread has stopped")]
pub struct Stopped;

enum Command {
    Submit {
        id: RequestId,
        request: Box<Request>,
        reply: Box<dyn ReplySink>,
    },
    Cancel(RequestId),
    /// End every request now (a server's shutdown deadline).
    CancelAll,
    /// Cancel what is left and end the thread.
    Exit,
}

/// A cheap, cloneable way to the engine thread.
#[derive(Clone, Debug)]
pub struct Handle {
    commands: Sender<Command>,
    next_id: Arc<AtomicU64>,
}

impl Handle {
    /// Queues `request`; its replies go to `reply`.
    pub fn submit(
        &self,
        request: Request,
        reply: impl ReplySink + 'static,
    ) -> Result<RequestId, Stopped> {
        let id = RequestId(self.next_id.fetch_add(1, Ordering::Relaxed));
        self.commands
            .send(Command::Submit {
                id,
                request: Box::new(request),
                reply: Box::new(reply),
            })
            .map_err(|_| Stopped)?;
        Ok(id)
    }

    /// Queues `request` and returns its replies as an iterator (blocking on each); dropping
    /// the stream before its end cancels the request.
    pub fn stream(&self, request: Request) -> Result<ReplyStream, Stopped> {
        let answers = request.n;
        let (tx, rx) = mpsc::channel();
        let id = self.submit(request, tx)?;
        Ok(ReplyStream {
            replies: rx,
            id,
            handle: self.clone(),
            answers_left: answers,
        })
    }

    /// Stops request `id` at the next step (a waiting one never starts); each of its
    /// answers ends with [`crate::scheduler::StopReason::Cancelled`].
    pub fn cancel(&self, id: RequestId) {
        let _ = self.commands.send(Command::Cancel(id));
    }

    /// Stops every request now.
    pub fn cancel_all(&self) {
        let _ = self.commands.send(Command::CancelAll);
    }

    /// Asks the thread to cancel what is left and end (see [`Runtime::shutdown`]).
    pub fn exit(&self) {
        let _ = self.commands.send(Command::Exit);
    }
}

/// A request's replies, in order, until every answer has ended.
#[derive(Debug)]
pub struct ReplyStream {
    replies: Receiver<Reply>,
    id: RequestId,
    handle: Handle,
    answers_left: usize,
}

impl ReplyStream {
    pub fn id(&self) -> RequestId {
        self.id
    }
}

impl Iterator for ReplyStream {
    type Item = Reply;

    fn next(&mut self) -> Option<Reply> {
        if self.answers_left == 0 {
            return None;
        }
        let reply = self.replies.recv().ok();
        match &reply {
            Some(r) if r.is_end() => self.answers_left -= 1,
            Some(_) => {}
            None => self.answers_left = 0,
        }
        reply
    }
}

impl Drop for ReplyStream {
    fn drop(&mut self) {
        if self.answers_left > 0 {
            self.handle.cancel(self.id);
        }
    }
}

/// The engine thread; see the module docs.
#[derive(Debug)]
pub struct Runtime<E = CoreError> {
    handle: Handle,
    thread: Option<JoinHandle<Result<(), E>>>,
}

impl<E: Send + 'static> Runtime<E> {
    /// Starts the engine thread: it runs `build` (load a model, make the engine and the
    /// scheduler: the engine must be made on the thread that runs it), then serves
    /// requests until [`Runtime::shutdown`]. Requests submitted meanwhile wait. If `build`
    /// fails the thread ends: requests already submitted see their reply channels close
    /// without a reply, later submissions get [`Stopped`], and [`Runtime::shutdown`]
    /// returns the error.
    pub fn spawn(
        options: RuntimeOptions,
        build: impl FnOnce() -> Result<Scheduler, E> + Send + 'static,
    ) -> std::io::Result<Runtime<E>> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("bitnet-engine".into())
            .spawn(move || {
                let sched = build()?;
                worker::run(sched, rx, options);
                Ok(())
            })?;
        Ok(Runtime {
            handle: Handle {
                commands: tx,
                next_id: Arc::new(AtomicU64::new(0)),
            },
            thread: Some(thread),
        })
    }

    /// A handle to submit and cancel requests from any thread.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// Cancels what is left, ends the engine thread and waits for it; the error of a
    /// failed `build`, if that is how it ended.
    pub fn shutdown(mut self) -> Result<(), E> {
        self.handle.exit();
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => Ok(()),
        }
    }
}

/// Dropped without [`Runtime::shutdown`], the runtime tells the engine thread to cancel what
/// is left and end, and does not wait for it (a thread still loading a model would hold up
/// the caller for the whole load).
impl<E> Drop for Runtime<E> {
    fn drop(&mut self) {
        if self.thread.take().is_some() {
            self.handle.exit();
        }
    }
}
