//! What an answered request leaves behind, seen as its replies pass to the handler: when
//! its first answer ends (not cancelled), its slot records the prompt and the answer's
//! tokens, and with `--prefix-cache-dir` the rows the cache holds of them are saved. The
//! slot stays taken until the request's last reply is sent (the sink is then dropped).

use std::sync::Arc;

use bitnet_core::runtime::{Handle, Reply, ReplySink};
use bitnet_core::scheduler::StopReason;

use super::engine::Replies;
use super::prefix_store::PrefixStore;
use super::slots::SlotUse;

/// A request's reply sink that records its answer; see the module docs.
#[derive(Debug)]
pub struct Recording {
    pub replies: Replies,
    pub prompt: Vec<u32>,
    pub slot: SlotUse,
    pub store: Option<(Arc<PrefixStore>, Handle)>,
}

impl ReplySink for Recording {
    fn send(&self, reply: Reply) -> bool {
        if let Reply::Done { index: 0, stats } = &reply
            && stats.stop_reason != StopReason::Cancelled
        {
            let mut tokens = Vec::with_capacity(self.prompt.len() + stats.tokens.len());
            tokens.extend_from_slice(&self.prompt);
            tokens.extend_from_slice(&stats.tokens);
            if let Some((store, engine)) = &self.store {
                // Only a command queued for the engine thread: its next turn copies the rows.
                store.save_after(engine, tokens.clone());
            }
            self.slot.record(tokens);
        }
        self.replies.send(reply)
    }

    fn is_closed(&self) -> bool {
        self.replies.is_closed()
    }
}
