//! The generation loop behind `bitnet generate`: a thin loop over the [`Scheduler`] with one
//! request. Text reaches the caller only as whole UTF-8 characters and never includes a
//! stop string.

use super::output::{Event, GenStats, StopReason};
use super::{GenParams, Scheduler};
use crate::error::CoreError;
use crate::kv::SeqId;

/// Generates from `prompt` on the scheduler (which should have nothing else to do),
/// calling `on_text` with each piece of text as it becomes final; `on_text` returns false
/// to stop (a closed pipe). As in every request, the last sampled token is not evaluated
/// into the KV cache: a sequence kept with `params.keep` holds the prompt and all
/// generated tokens but the last.
pub fn generate(
    sched: &mut Scheduler,
    prompt: &[u32],
    params: GenParams,
    mut on_text: impl FnMut(&str) -> bool,
) -> Result<(SeqId, GenStats), CoreError> {
    let id = sched.submit(prompt, params)?;
    let mut done: Option<GenStats> = None;
    let mut failed: Option<CoreError> = None;
    let mut stopped = false;
    while done.is_none() && failed.is_none() {
        sched.step(&mut |ev| match ev {
            Event::Text { seq, text } if seq == id && !stopped && !on_text(text) => {
                stopped = true;
            }
            Event::Done { seq, stats } if seq == id => done = Some(stats),
            Event::Error { seq, error } if seq == id => failed = Some(error),
            _ => {}
        })?;
        if stopped && done.is_none() {
            sched.cancel(id);
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let mut stats = done.expect("loop ends with a result");
    if stopped {
        stats.stop_reason = StopReason::Callback;
    }
    Ok((id, stats))
}
