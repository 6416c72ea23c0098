//! The engine thread's loop: takes commands, steps the scheduler while it has work, and
//! sends each event to the reply channel of the request it belongs to. A request whose
//! receiver is gone (a client disconnected, a handler timed out) is cancelled, and its KV
//! freed at the next step.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Instant;

use super::protocol::{Command, Observer, Reply, ReplySink, RequestId, RuntimeOptions};
use crate::kv::SeqId;
use crate::scheduler::{Event, Scheduler, SubmitOptions};

/// A live sequence's way back to its request, and its timing.
struct Live {
    request: RequestId,
    out: Rc<dyn ReplySink>,
    index: usize,
    t_submit: Instant,
    t_last: Option<Instant>,
    /// An embedding request's input (its end is reported as one).
    embedding: bool,
}

/// The engine loop; returns when told to exit, or when every handle is gone and no work
/// is left.
pub(super) fn run(mut sched: Scheduler, rx: Receiver<Command>, options: RuntimeOptions) {
    let RuntimeOptions {
        step_delay,
        mut observer,
    } = options;
    let mut live: HashMap<SeqId, Live> = HashMap::new();
    let mut to_cancel: Vec<SeqId> = Vec::new();
    let mut exiting = false;
    loop {
        if sched.is_idle() {
            observer.on_step(&sched);
            if exiting {
                return;
            }
            match rx.recv() {
                Ok(cmd) => exiting |= handle(cmd, &mut sched, &mut live, &mut *observer),
                Err(_) => return,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(cmd) => exiting |= handle(cmd, &mut sched, &mut live, &mut *observer),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    // Every handle is gone: nobody can read the answers.
                    for &seq in live.keys() {
                        sched.cancel(seq);
                    }
                    break;
                }
            }
        }
        // Requests whose receivers left while waiting or between tokens.
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
                let Some(l) = live.get_mut(&seq) else { return };
                let now = Instant::now();
                match l.t_last {
                    None => observer.on_token(true, now - l.t_submit),
                    Some(t) => observer.on_token(false, now - t),
                }
                l.t_last = Some(now);
                let sent = l.out.send(Reply::Token {
                    index: l.index,
                    token,
                    logprobs: logprobs.cloned(),
                });
                if !sent {
                    to_cancel.push(seq);
                }
            }
            Event::Text { seq, text } => {
                if let Some(l) = live.get(&seq) {
                    let sent = l.out.send(Reply::Text {
                        index: l.index,
                        text: text.to_owned(),
                    });
                    if !sent {
                        to_cancel.push(seq);
                    }
                }
            }
            Event::Embedding { seq, embedding } => {
                if let Some(l) = live.get(&seq) {
                    // Its `Done` follows in this step: a receiver gone changes nothing.
                    l.out.send(Reply::Embedding {
                        index: l.index,
                        embedding,
                    });
                }
            }
            Event::Done { seq, stats } => {
                if let Some(l) = live.remove(&seq) {
                    if l.embedding {
                        observer.on_embedding(&stats, l.t_submit.elapsed());
                    } else {
                        observer.on_done(&stats, l.t_submit.elapsed());
                    }
                    l.out.send(Reply::Done {
                        index: l.index,
                        stats,
                    });
                }
            }
            Event::Error { seq, error } => {
                if let Some(l) = live.remove(&seq) {
                    l.out.send(Reply::Error {
                        index: l.index,
                        error,
                    });
                }
            }
        });
        if let Err(e) = result {
            // The scheduler already ended the batch's requests with an error event.
            observer.on_step_error(&e);
        }
        for seq in to_cancel.drain(..) {
            sched.cancel(seq);
        }
        observer.on_step(&sched);
        if !step_delay.is_zero() {
            std::thread::sleep(step_delay);
        }
    }
}

/// Acts on a command; true when it asks the loop to end.
fn handle(
    cmd: Command,
    sched: &mut Scheduler,
    live: &mut HashMap<SeqId, Live>,
    observer: &mut dyn Observer,
) -> bool {
    match cmd {
        Command::CancelAll | Command::Exit => {
            for &seq in live.keys() {
                sched.cancel(seq);
            }
            return matches!(cmd, Command::Exit);
        }
        Command::ExportKv { tokens, done } => {
            done(sched.export_cached(&tokens).map_err(Into::into));
        }
        Command::ImportKv { snapshot, done } => done(sched.import_cached(&snapshot)),
        Command::Cancel(id) => {
            for (&seq, l) in live.iter() {
                if l.request == id {
                    sched.cancel(seq);
                }
            }
        }
        Command::Embed { id, request, reply } => {
            observer.on_request();
            let out: Rc<dyn ReplySink> = Rc::from(reply);
            let t_submit = Instant::now();
            for (index, tokens) in request.inputs.iter().enumerate() {
                match sched.submit_embedding(tokens, request.params) {
                    Ok(seq) => {
                        live.insert(
                            seq,
                            Live {
                                request: id,
                                out: out.clone(),
                                index,
                                t_submit,
                                t_last: None,
                                embedding: true,
                            },
                        );
                    }
                    Err(error) => {
                        out.send(Reply::Error { index, error });
                    }
                }
            }
        }
        Command::Submit { id, request, reply } => {
            observer.on_request();
            let out: Rc<dyn ReplySink> = Rc::from(reply);
            let t_submit = Instant::now();
            let mut leader = None;
            for index in 0..request.n {
                let mut params = request.params.clone();
                // Each answer its own randomness, reproducible from the request's seed.
                params.sampler.seed = params.sampler.seed.wrapping_add(index as u64);
                let extra = SubmitOptions {
                    logprobs: request.logprobs,
                    after: leader,
                    heal: request.heal.clone(),
                    strict_context: request.strict_context,
                };
                match sched.submit_with(&request.prompt, params, extra) {
                    Ok(seq) => {
                        leader.get_or_insert(seq);
                        live.insert(
                            seq,
                            Live {
                                request: id,
                                out: out.clone(),
                                index,
                                t_submit,
                                t_last: None,
                                embedding: false,
                            },
                        );
                    }
                    Err(error) => {
                        out.send(Reply::Error { index, error });
                    }
                }
            }
        }
    }
    false
}
