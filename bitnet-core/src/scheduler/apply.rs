//! What a pass's results do to its requests: each takes its rows (prompt read, tokens
//! accepted, a draft's rejected positions cut from its sequence), and those that ended are
//! retired: their text flushed (an embedding's vectors pooled and reported), `Done` (or the
//! error) reported, their sequences freed or kept.

use super::draft::Drafter;
use super::output::{Event, StopReason};
use super::plan::Plan;
use super::request::{Request, Taken};
use crate::engine::Engine;

/// Advances every request of the pass `plan` laid out; those that end go to `finished`
/// (their index in `running`, and why).
pub(crate) fn take_pass(
    plan: &Plan,
    running: &mut [Request],
    engine: &mut Engine,
    finished: &mut Vec<(usize, StopReason)>,
    on_event: &mut dyn FnMut(Event<'_>),
) {
    let model = engine.model().clone();
    let tokenizer = model.tokenizer();
    let max_len = engine.max_seq_len();
    for (&(_, n, _), &i) in plan.spans.iter().zip(&plan.item_req) {
        let r = &mut running[i];
        let cut = match r.take_pass(n, tokenizer, max_len, on_event) {
            Taken::Nothing => continue,
            Taken::Ended(reason) => {
                finished.push((i, reason));
                continue;
            }
            Taken::Tokens { end, cut } => {
                if let Some(reason) = end {
                    finished.push((i, reason));
                }
                cut
            }
        };
        let Some(cut) = cut else { continue };
        let held = engine.sequence_len(r.seq).unwrap_or(0);
        if let Err(e) = engine.truncate(r.seq, held - cut) {
            r.error = Some(e.into());
            r.next = None;
            finished.push((i, StopReason::Cancelled));
        }
    }
}

/// Ends the requests listed in `finished` (emptied): flushes their text (or an embedding's
/// vectors), reports `Done` (or the error that ended them), and frees (or keeps) their
/// sequences.
pub(crate) fn retire(
    finished: &mut Vec<(usize, StopReason)>,
    running: &mut Vec<Request>,
    engine: &mut Engine,
    mut drafter: Option<&mut Drafter>,
    on_event: &mut dyn FnMut(Event<'_>),
) {
    let n_embd = engine.model().config.n_embd;
    // From the back, so the indices of those still to go stay valid.
    finished.sort_unstable_by_key(|&(i, _)| std::cmp::Reverse(i));
    finished.dedup_by_key(|&mut (i, _)| i);
    for (i, reason) in finished.drain(..) {
        let mut r = running.remove(i);
        if let Some(error) = r.error.take() {
            on_event(Event::Error { seq: r.seq, error });
        } else {
            let reason = r.finish(reason, on_event);
            // An embedding whose prompt is all in (not one cancelled part-way) reports its
            // vectors before its end.
            if reason != StopReason::Cancelled
                && r.fed == r.prompt.len()
                && let Some(e) = r.embed.take()
            {
                let embedding = e.finish(n_embd);
                on_event(Event::Embedding {
                    seq: r.seq,
                    embedding,
                });
            }
            on_event(Event::Done {
                seq: r.seq,
                stats: r.stats(reason),
            });
        }
        r.release(engine, drafter.as_deref_mut());
    }
}
