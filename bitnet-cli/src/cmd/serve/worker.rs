//! The engine thread: owns the [`Scheduler`] (the engine is not shared), takes requests
//! from the handlers over a channel and sends each one's tokens, text and end back over the
//! request's own channel. When nothing is queued or running it blocks on the command
//! channel, so an idle server uses no CPU. A request whose receiver is gone (the client
//! disconnected, the handler timed out) is cancelled, and its KV freed at the next step.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use bitnet_core::model::{GenStats, SeqId, StopReason};
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::scheduler::{Event, GenParams, Scheduler, SubmitOptions, TokenLogprobs};
use tokio::sync::mpsc::UnboundedSender;

use super::state::Shared;
use crate::output::note;

/// One request: `n` answers to one prompt.
#[derive(Debug)]
pub struct Job {
    pub prompt: Vec<u32>,
    /// Text the first generated token must begin with (token healing).
    pub heal: String,
    pub params: GenParams,
    pub n: usize,
    /// Log probabilities with this many alternatives per token.
    pub logprobs: Option<usize>,
    pub out: UnboundedSender<Out>,
}

/// What a request hears back; `index` is the answer (OpenAI's choice index).
#[derive(Debug)]
pub enum Out {
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
        message: String,
    },
}

#[derive(Debug)]
pub enum Command {
    Submit(Box<Job>),
    /// Shutdown deadline passed: end every request now.
    CancelAll,
    /// The server has stopped: cancel what is left and end the loop.
    Exit,
}

/// A live sequence's way back to its request, and its timing.
#[derive(Debug)]
struct Live {
    out: UnboundedSender<Out>,
    index: usize,
    t_submit: Instant,
    t_last: Option<Instant>,
}

/// Runs a short generation through the prefill and batched decode paths, so the first
/// client does not pay for page faults and lazy set-up; then forgets its cache.
/// `step_delay` slows it as it slows serving (tests see `/health` say 503 meanwhile).
pub fn warm_up(sched: &mut Scheduler, step_delay: Duration) -> anyhow::Result<()> {
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
    sched.engine_mut().clear_prefix_cache();
    Ok(())
}

/// The engine loop; returns when every command sender is gone and no work is left.
pub fn run(mut sched: Scheduler, rx: Receiver<Command>, shared: Arc<Shared>, step_delay: Duration) {
    let mut live: HashMap<SeqId, Live> = HashMap::new();
    let mut to_cancel: Vec<SeqId> = Vec::new();
    let metrics = &shared.metrics;
    let mut exiting = false;
    loop {
        if sched.is_idle() {
            publish(&sched, &shared);
            if exiting {
                return;
            }
            match rx.recv() {
                Ok(cmd) => exiting |= handle(cmd, &mut sched, &mut live, &shared),
                Err(_) => return,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(cmd) => exiting |= handle(cmd, &mut sched, &mut live, &shared),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    // The server is gone: nobody can read the answers.
                    for &seq in live.keys() {
                        sched.cancel(seq);
                    }
                    break;
                }
            }
        }
        // Requests whose clients left while waiting or between tokens.
        for (&seq, l) in &live {
            if l.out.is_closed() {
                sched.cancel(seq);
            }
        }
        let result = sched.step(&mut |ev| match ev {
            Event::Token {
                seq,
                token,
                logprobs,
            } => {
                metrics.predicted_tokens.fetch_add(1, Relaxed);
                let Some(l) = live.get_mut(&seq) else { return };
                let now = Instant::now();
                match l.t_last {
                    None => metrics.ttft.observe((now - l.t_submit).as_secs_f64()),
                    Some(t) => metrics.inter_token.observe((now - t).as_secs_f64()),
                }
                l.t_last = Some(now);
                let sent = l.out.send(Out::Token {
                    index: l.index,
                    token,
                    logprobs: logprobs.cloned(),
                });
                if sent.is_err() {
                    to_cancel.push(seq);
                }
            }
            Event::Text { seq, text } => {
                if let Some(l) = live.get(&seq) {
                    let sent = l.out.send(Out::Text {
                        index: l.index,
                        text: text.to_owned(),
                    });
                    if sent.is_err() {
                        to_cancel.push(seq);
                    }
                }
            }
            Event::Done { seq, stats } => {
                metrics
                    .prompt_tokens
                    .fetch_add((stats.prompt_tokens - stats.cached_tokens) as u64, Relaxed);
                metrics
                    .cached_tokens
                    .fetch_add(stats.cached_tokens as u64, Relaxed);
                if stats.stop_reason == StopReason::Cancelled {
                    metrics.cancelled.fetch_add(1, Relaxed);
                } else {
                    metrics.add_output(&stats.tokens);
                }
                if let Some(l) = live.remove(&seq) {
                    metrics.request.observe(l.t_submit.elapsed().as_secs_f64());
                    let _ = l.out.send(Out::Done {
                        index: l.index,
                        stats,
                    });
                }
            }
            Event::Error { seq, error } => {
                if let Some(l) = live.remove(&seq) {
                    let _ = l.out.send(Out::Error {
                        index: l.index,
                        message: error.to_string(),
                    });
                }
            }
        });
        if let Err(e) = result {
            // The scheduler already ended the batch's requests with an error event.
            note!("warning: engine step failed: {e}");
        }
        for seq in to_cancel.drain(..) {
            sched.cancel(seq);
        }
        publish(&sched, &shared);
        if !step_delay.is_zero() {
            std::thread::sleep(step_delay);
        }
    }
}

fn publish(sched: &Scheduler, shared: &Shared) {
    shared.metrics.set_engine_state(
        sched.n_running(),
        sched.n_waiting(),
        &sched.engine().kv_stats(),
    );
    let e = sched.engine();
    if e.attention_entropy_every() > 0 {
        shared.metrics.set_attention_entropy(e.attention_entropy());
    }
}

/// Acts on a command; true when it asks the loop to end.
fn handle(
    cmd: Command,
    sched: &mut Scheduler,
    live: &mut HashMap<SeqId, Live>,
    shared: &Shared,
) -> bool {
    match cmd {
        Command::CancelAll | Command::Exit => {
            for &seq in live.keys() {
                sched.cancel(seq);
            }
            return matches!(cmd, Command::Exit);
        }
        Command::Submit(job) => {
            shared.metrics.requests.fetch_add(1, Relaxed);
            let t_submit = Instant::now();
            let mut leader = None;
            for index in 0..job.n {
                let mut params = job.params.clone();
                // Each answer its own randomness, reproducible from the request's seed.
                params.sampler.seed = params.sampler.seed.wrapping_add(index as u64);
                let extra = SubmitOptions {
                    logprobs: job.logprobs,
                    after: leader,
                    heal: job.heal.clone(),
                };
                match sched.submit_with(&job.prompt, params, extra) {
                    Ok(seq) => {
                        leader.get_or_insert(seq);
                        live.insert(
                            seq,
                            Live {
                                out: job.out.clone(),
                                index,
                                t_submit,
                                t_last: None,
                            },
                        );
                    }
                    Err(e) => {
                        let _ = job.out.send(Out::Error {
                            index,
                            message: e.to_string(),
                        });
                    }
                }
            }
        }
    }
    false
}
