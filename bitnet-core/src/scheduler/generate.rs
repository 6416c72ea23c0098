//! Driving the scheduler to the end of its work: [`generate`], the loop behind `bitnet
//! generate` (one request; text reaches the caller only as whole UTF-8 characters and never
//! includes a stop string), and [`warm_up`] (and [`warm_up_embeddings`]), a throw-away
//! request a server runs before its first client.

use super::embed::EmbedParams;
use super::output::{Event, GenStats, StopReason};
use super::request::GenParams;
use super::sched::Scheduler;
use std::time::Duration;

use crate::error::CoreError;
use crate::kv::SeqId;
use crate::sampling::SamplerConfig;

/// Generates from `prompt` on the scheduler (which should have nothing else to do),
/// calling `on_text` with each piece of text as it becomes final; `on_text` returns false
/// to stop (a closed pipe). As in every request, the last sampled token is not evaluated
/// into the KV cache: a sequence kept with `params.keep` holds the prompt and all
/// generated tokens but the last.
pub fn generate(
    sched: &mut Scheduler,
    prompt: &[u32],
    params: GenParams,
    on_text: impl FnMut(&str) -> bool,
) -> Result<(SeqId, GenStats), CoreError> {
    generate_until(sched, prompt, params, on_text, &|| false)
}

/// As [`generate`], and `interrupted` is polled before every step (prompt chunks included):
/// true cancels the request, whose figures then say [`StopReason::Cancelled`] and count
/// the prompt tokens read so far (a Ctrl-C).
pub fn generate_until(
    sched: &mut Scheduler,
    prompt: &[u32],
    params: GenParams,
    mut on_text: impl FnMut(&str) -> bool,
    interrupted: &dyn Fn() -> bool,
) -> Result<(SeqId, GenStats), CoreError> {
    let id = sched.submit(prompt, params)?;
    let mut done: Option<GenStats> = None;
    let mut failed: Option<CoreError> = None;
    let mut stopped = false;
    let mut cancelled = false;
    while done.is_none() && failed.is_none() {
        if !cancelled && interrupted() {
            sched.cancel(id);
            cancelled = true;
        }
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

/// Runs a short generation through the prefill and batched decode paths on a scheduler with
/// nothing else to do, so the first real request does not pay for page faults and lazy
/// set-up; then forgets its cache. `step_delay` sleeps after every step (a test server's
/// slowness).
pub fn warm_up(sched: &mut Scheduler, step_delay: Duration) -> Result<(), CoreError> {
    let n_vocab = sched.engine().n_vocab() as u32;
    let prompt: Vec<u32> = (0..8u32).map(|i| (i * 37 + 11) % n_vocab).collect();
    for i in 0..2u64 {
        let params = GenParams {
            max_tokens: 4,
            sampler: SamplerConfig {
                seed: i,
                ..SamplerConfig::default()
            },
            ignore_eos: true,
            ..GenParams::default()
        };
        sched.submit(&prompt[i as usize..], params)?;
    }
    while !sched.is_idle() {
        sched.step(&mut |_| {})?;
        std::thread::sleep(step_delay);
    }
    sched.clear_prefix_cache();
    Ok(())
}

/// [`warm_up`] for a server that embeds: two throw-away embedding requests through the
/// hidden-row path with `params` (a model without a language-model head may have nothing
/// to generate with); then forgets its cache.
pub fn warm_up_embeddings(
    sched: &mut Scheduler,
    params: EmbedParams,
    step_delay: Duration,
) -> Result<(), CoreError> {
    let n_vocab = sched.engine().n_vocab() as u32;
    let prompt: Vec<u32> = (0..8u32).map(|i| (i * 37 + 11) % n_vocab).collect();
    for i in 0..2 {
        sched.submit_embedding(&prompt[i..], params)?;
    }
    while !sched.is_idle() {
        sched.step(&mut |_| {})?;
        std::thread::sleep(step_delay);
    }
    sched.clear_prefix_cache();
    Ok(())
}
