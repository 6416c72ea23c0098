//! The engine on a thread of its own, for programs that embed it (`bitnet serve` does): the
//! [`Scheduler`] is made and stepped on that thread (the engine pins it), and other threads
//! talk to it through a [`Handle`]. Each [`Request`] carries its own reply channel (any
//! [`ReplySink`]: a standard channel, or an async one in a server), over which it hears its
//! tokens, text and end as [`Reply`] events (an [`EmbedRequest`] hears its vectors);
//! [`Handle::cancel`] stops it, and so does its receiver going away. When nothing is queued
//! or running the thread blocks on its command channel, so an idle runtime uses no CPU.
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

mod protocol;
mod token_text;
mod worker;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::CoreError;
use crate::kv::KvSnapshot;
use crate::scheduler::Scheduler;

use protocol::Command;
pub use protocol::{
    EmbedRequest, NoObserver, Observer, Reply, ReplySink, Request, RequestId, RuntimeOptions,
    Stopped,
};
pub use token_text::{TokenEntry, TokenText};

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

    /// Queues an embedding request; its replies (an [`Reply::Embedding`] then `Done` for
    /// each input, or an `Error`) go to `reply`.
    pub fn submit_embedding(
        &self,
        request: EmbedRequest,
        reply: impl ReplySink + 'static,
    ) -> Result<RequestId, Stopped> {
        let id = RequestId(self.next_id.fetch_add(1, Ordering::Relaxed));
        self.commands
            .send(Command::Embed {
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
        Ok(self.replies(rx, id, answers))
    }

    /// [`Handle::stream`] for an embedding request: its replies as an iterator.
    pub fn embed(&self, request: EmbedRequest) -> Result<ReplyStream, Stopped> {
        let answers = request.inputs.len();
        let (tx, rx) = mpsc::channel();
        let id = self.submit_embedding(request, tx)?;
        Ok(self.replies(rx, id, answers))
    }

    fn replies(&self, replies: Receiver<Reply>, id: RequestId, answers: usize) -> ReplyStream {
        ReplyStream {
            replies,
            id,
            handle: self.clone(),
            answers_left: answers,
        }
    }

    /// Takes, between steps, the rows of the longest prefix of `tokens` the prefix cache
    /// holds (`None`: none) and hands them to `done` on the engine thread (keep `done`
    /// short: send the result on). A server saves a prompt's KV with it.
    pub fn export_cached(
        &self,
        tokens: Vec<u32>,
        done: impl FnOnce(Result<Option<KvSnapshot>, CoreError>) + Send + 'static,
    ) -> Result<(), Stopped> {
        self.commands
            .send(Command::ExportKv {
                tokens,
                done: Box::new(done),
            })
            .map_err(|_| Stopped)
    }

    /// Puts saved rows into the prefix cache between steps (see
    /// [`Scheduler::import_cached`]); `done` hears how many positions went back, or why
    /// none did.
    pub fn import_cached(
        &self,
        snapshot: KvSnapshot,
        done: impl FnOnce(Result<usize, CoreError>) + Send + 'static,
    ) -> Result<(), Stopped> {
        self.commands
            .send(Command::ImportKv {
                snapshot: Box::new(snapshot),
                done: Box::new(done),
            })
            .map_err(|_| Stopped)
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

/// What one bounded wait of [`ReplyStream::next_timeout`] got.
#[derive(Debug)]
pub enum Waited {
    Reply(Reply),
    /// Every answer of the request has ended (before this wait).
    Finished,
    /// Nothing came within the time given; the request goes on.
    TimedOut,
    /// The engine thread is gone: no more replies will come.
    Stopped,
}

impl ReplyStream {
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// The next reply, waiting at most `timeout`: a caller that must look at something else
    /// now and then while it waits (a Python interpreter its signals, a server its client)
    /// polls with this instead of blocking in [`Iterator::next`].
    pub fn next_timeout(&mut self, timeout: Duration) -> Waited {
        if self.answers_left == 0 {
            return Waited::Finished;
        }
        match self.replies.recv_timeout(timeout) {
            Ok(reply) => {
                if reply.is_end() {
                    self.answers_left -= 1;
                }
                Waited::Reply(reply)
            }
            Err(RecvTimeoutError::Timeout) => Waited::TimedOut,
            Err(RecvTimeoutError::Disconnected) => {
                self.answers_left = 0;
                Waited::Stopped
            }
        }
    }

    /// Stops the request on the engine (nothing when every answer has ended already); the
    /// stream then yields nothing more.
    pub fn cancel(&mut self) {
        if self.answers_left > 0 {
            self.handle.cancel(self.id);
            self.answers_left = 0;
        }
    }

    /// Whether every answer has ended (or the request was cancelled, or the engine stopped).
    pub fn is_finished(&self) -> bool {
        self.answers_left == 0
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
        self.cancel();
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
