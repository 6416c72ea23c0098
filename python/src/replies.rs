//! Waiting on the engine thread from Python: a request's reply channel, read with the
//! interpreter lock released, woken every [`SIGNAL_POLL`] to let Python run its signal
//! handlers (Ctrl-C raises `KeyboardInterrupt` here, even while a long prompt is read), and
//! cancelled on the engine the moment the caller stops listening: an exception, the
//! iterator dropped, an explicit cancel.
//!
//! `bitnet_core::runtime::ReplyStream` does the same bookkeeping but blocks without a
//! timeout, so it cannot give Python a chance to see a signal: hence this copy of it.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

use bitnet_core::runtime::{EmbedRequest, Handle, Reply, Request, RequestId};
use pyo3::prelude::*;

use crate::error::refused;

/// How long a wait lasts before Python's signal handlers get to run: short enough that
/// Ctrl-C feels immediate, long enough to cost nothing.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// The replies of one submitted request, until each of its answers has ended.
#[derive(Debug)]
pub struct Replies {
    replies: Receiver<Reply>,
    id: RequestId,
    handle: Handle,
    answers_left: usize,
}

/// What one wait produced.
enum Waited {
    Reply(Reply),
    /// Every answer has ended.
    Finished,
    Timeout,
    /// The engine thread is gone.
    Stopped,
}

impl Replies {
    /// Queues a generation request.
    pub fn generate(handle: &Handle, request: Request) -> PyResult<Replies> {
        let answers = request.n;
        let (tx, rx) = mpsc::channel();
        let id = handle
            .submit(request, tx)
            .map_err(|e| refused(e.to_string()))?;
        Ok(Replies::new(handle, rx, id, answers))
    }

    /// Queues an embedding request.
    pub fn embed(handle: &Handle, request: EmbedRequest) -> PyResult<Replies> {
        let answers = request.inputs.len();
        let (tx, rx) = mpsc::channel();
        let id = handle
            .submit_embedding(request, tx)
            .map_err(|e| refused(e.to_string()))?;
        Ok(Replies::new(handle, rx, id, answers))
    }

    fn new(handle: &Handle, replies: Receiver<Reply>, id: RequestId, answers: usize) -> Replies {
        Replies {
            replies,
            id,
            handle: handle.clone(),
            answers_left: answers,
        }
    }

    fn wait(&mut self) -> Waited {
        if self.answers_left == 0 {
            return Waited::Finished;
        }
        match self.replies.recv_timeout(SIGNAL_POLL) {
            Ok(reply) => {
                if reply.is_end() {
                    self.answers_left -= 1;
                }
                Waited::Reply(reply)
            }
            Err(RecvTimeoutError::Timeout) => Waited::Timeout,
            Err(RecvTimeoutError::Disconnected) => {
                self.answers_left = 0;
                Waited::Stopped
            }
        }
    }

    /// Stops the request on the engine (nothing when it has ended already).
    pub fn cancel(&mut self) {
        if self.answers_left > 0 {
            self.handle.cancel(self.id);
            self.answers_left = 0;
        }
    }

    /// Whether every answer has ended.
    pub fn finished(&self) -> bool {
        self.answers_left == 0
    }
}

impl Drop for Replies {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// The next reply of the request `lock` guards, `None` once every answer has ended. The
/// lock is taken only inside the released-lock wait, so a second Python thread reading the
/// same request can never hold the interpreter lock while waiting for this one. A pending
/// signal whose handler raises (Ctrl-C) cancels the request and raises here (a reply that
/// came with it is dropped: the request is over).
pub fn next_reply(py: Python<'_>, lock: &std::sync::Mutex<Replies>) -> PyResult<Option<Reply>> {
    loop {
        let waited = py.detach(|| match lock.lock() {
            Ok(mut replies) => replies.wait(),
            // A panic while the lock was held left the request in an unknown state: treat
            // it as ended.
            Err(_) => Waited::Stopped,
        });
        // Signals are looked at after every wait, not only an idle one: a fast stream of
        // replies never lets a wait time out.
        if let Err(interrupt) = py.check_signals() {
            if let Ok(mut replies) = lock.lock() {
                replies.cancel();
            }
            return Err(interrupt);
        }
        match waited {
            Waited::Reply(reply) => return Ok(Some(reply)),
            Waited::Finished => return Ok(None),
            Waited::Stopped => return Err(refused("the engine thread has stopped")),
            Waited::Timeout => {}
        }
    }
}
