//! Waiting on the engine thread from Python: a request's replies
//! (`bitnet_core::runtime::ReplyStream`), read with the interpreter lock released and woken
//! every [`SIGNAL_POLL`] to let Python run its signal handlers (Ctrl-C raises
//! `KeyboardInterrupt` here, even while a long prompt is read), and cancelled on the engine
//! the moment the caller stops listening: an exception, the iterator dropped, an explicit
//! cancel (the stream cancels what is left when dropped).

use std::time::Duration;

use bitnet_core::runtime::{EmbedRequest, Handle, Reply, ReplyStream, Request, Waited};
use pyo3::prelude::*;

use crate::error::refused;

/// How long a wait lasts before Python's signal handlers get to run: short enough that
/// Ctrl-C feels immediate, long enough to cost nothing.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// The replies of one submitted request, until each of its answers has ended.
#[derive(Debug)]
pub struct Replies {
    stream: ReplyStream,
}

impl Replies {
    /// Queues a generation request.
    pub fn generate(handle: &Handle, request: Request) -> PyResult<Replies> {
        let stream = handle.stream(request).map_err(|e| refused(e.to_string()))?;
        Ok(Replies { stream })
    }

    /// Queues an embedding request.
    pub fn embed(handle: &Handle, request: EmbedRequest) -> PyResult<Replies> {
        let stream = handle.embed(request).map_err(|e| refused(e.to_string()))?;
        Ok(Replies { stream })
    }

    fn wait(&mut self) -> Waited {
        self.stream.next_timeout(SIGNAL_POLL)
    }

    /// Stops the request on the engine (nothing when it has ended already).
    pub fn cancel(&mut self) {
        self.stream.cancel();
    }

    /// Whether every answer has ended.
    pub fn finished(&self) -> bool {
        self.stream.is_finished()
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
            Waited::TimedOut => {}
        }
    }
}
