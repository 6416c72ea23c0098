//! The two load shapes. Closed loop: N client threads, each sending its next request as soon
//! as the last one ended, until the run's time or request budget is spent. Open loop: a
//! clock starts requests at a fixed rate on their own threads (bounded in number), so a
//! slow server shows as growing latency rather than as a lower offered load.
//!
//! In both, a refusal of the credentials (401, 403) stops the run: every later request would
//! be refused too. A busy answer (429, 503) is waited out as `Retry-After` says (closed loop:
//! that client retries its prompt; open loop: the clock pauses), other errors with a short
//! backoff; the waits are counted in the report.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::args::Args;
use super::backoff::Backoff;
use super::client::{Config, Outcome, Refusal, send};
use super::report::RunResult;

/// Everything the requests of one run measured.
#[derive(Debug, Default)]
struct Collected {
    tokens: u64,
    ok: u64,
    ttft: Vec<f64>,
    gaps: Vec<f64>,
    e2e: Vec<f64>,
    errors: BTreeMap<String, u64>,
    backoffs: u64,
    backoff_secs: f64,
}

impl Collected {
    fn add(&mut self, o: Outcome) {
        let kind = match o {
            Outcome::Ok(s) => {
                self.ok += 1;
                self.tokens += s.tokens;
                self.ttft.extend(s.ttft);
                self.gaps.extend(s.gaps);
                self.e2e.push(s.e2e);
                return;
            }
            Outcome::Refused(r) => format!("http_{}", r.status),
            Outcome::Busy { status, .. } => format!("http_{status}"),
            Outcome::Err(kind) => kind,
        };
        *self.errors.entry(kind).or_default() += 1;
    }

    fn waited(&mut self, d: Duration) {
        self.backoffs += 1;
        self.backoff_secs += d.as_secs_f64();
    }

    fn result(self, mode: String, level: f64, secs: f64) -> RunResult {
        RunResult::new(
            mode,
            level,
            secs,
            self.ok,
            self.tokens,
            self.ttft,
            self.gaps,
            self.e2e,
            self.errors,
            self.backoffs,
            self.backoff_secs,
        )
    }
}

/// Set by the first refusal of the credentials; clients look at it before each request and
/// while they wait.
#[derive(Debug, Default)]
struct Stop {
    flag: AtomicBool,
    refusal: Mutex<Option<Refusal>>,
}

impl Stop {
    fn set(&self, r: &Refusal) {
        lock(&self.refusal).get_or_insert_with(|| r.clone());
        self.flag.store(true, SeqCst);
    }

    fn is_set(&self) -> bool {
        self.flag.load(SeqCst)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sleeps until `until`, or until the run is stopped; returns the time slept.
fn pause(until: Instant, stop: &Stop) -> Duration {
    // Short enough that a stop is seen at once, long enough to cost nothing.
    const SLICE: Duration = Duration::from_millis(20);
    let t = Instant::now();
    while !stop.is_set() {
        let Some(left) = until.checked_duration_since(Instant::now()) else {
            break;
        };
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(SLICE));
    }
    t.elapsed()
}

/// `now + d`, but not past `end`.
fn until(d: Duration, end: Instant) -> Instant {
    Instant::now().checked_add(d).map_or(end, |t| t.min(end))
}

pub fn closed_loop(
    cfg: &Config,
    prompts: &[String],
    args: &Args,
    clients: usize,
) -> Result<RunResult, Refusal> {
    let collected = Mutex::new(Collected::default());
    let started = AtomicUsize::new(0);
    let stop = Stop::default();
    let t0 = Instant::now();
    let end = t0 + args.duration;
    std::thread::scope(|scope| {
        for c in 0..clients {
            let (collected, started, stop) = (&collected, &started, &stop);
            scope.spawn(move || {
                let conversation = format!("client-{c}");
                let mut backoff = Backoff::new(c as u64);
                // The prompt a busy answer turned away, sent again after the wait.
                let mut retry = None;
                while Instant::now() < end && !stop.is_set() {
                    let i = started.fetch_add(1, SeqCst);
                    if i >= args.max_requests {
                        break;
                    }
                    let p = retry.take().unwrap_or(i);
                    let o = send(cfg, &prompts[p % prompts.len()], &conversation);
                    let wait = match &o {
                        Outcome::Ok(_) => {
                            backoff.reset();
                            None
                        }
                        Outcome::Refused(r) => {
                            stop.set(r);
                            None
                        }
                        Outcome::Busy { retry_after, .. } => {
                            retry = Some(p);
                            Some(backoff.busy(*retry_after))
                        }
                        Outcome::Err(_) => Some(backoff.error()),
                    };
                    // A request that ended after the run's end still counts: its tokens
                    // were produced in the measured time only in part, so the rate is
                    // taken over the real elapsed time below.
                    lock(collected).add(o);
                    if let Some(d) = wait {
                        let slept = pause(until(d, end), stop);
                        lock(collected).waited(slept);
                    }
                }
            });
        }
    });
    if let Some(r) = stop.refusal.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(r);
    }
    let secs = t0.elapsed().as_secs_f64();
    let c = collected.into_inner().unwrap_or_else(|p| p.into_inner());
    Ok(c.result("closed".into(), clients as f64, secs))
}

pub fn open_loop(
    cfg: &Config,
    prompts: &[String],
    args: &Args,
    rps: f64,
) -> Result<RunResult, Refusal> {
    let collected = Mutex::new(Collected::default());
    let in_flight = AtomicUsize::new(0);
    let stop = Stop::default();
    let backoff = Mutex::new(Backoff::new(0));
    // The earliest start the busy answers so far allow.
    let resume: Mutex<Option<Instant>> = Mutex::new(None);
    let interval = Duration::from_secs_f64(1.0 / rps);
    let t0 = Instant::now();
    let end = t0 + args.duration;
    std::thread::scope(|scope| {
        let mut next = t0;
        let mut i = 0;
        while i < args.max_requests {
            if let Some(at) = *lock(&resume)
                && at > next
            {
                // The clock restarts at the server's time; no burst to catch up.
                let slept = pause(at.min(end), &stop);
                lock(&collected).waited(slept);
                next = at;
            }
            if next >= end {
                break;
            }
            pause(next, &stop);
            if stop.is_set() {
                break;
            }
            if lock(&resume).is_some_and(|at| at > next) {
                continue; // a busy answer came while the clock waited
            }
            next += interval;
            if in_flight.load(SeqCst) >= args.max_in_flight {
                lock(&collected).add(Outcome::Err("dropped_client_busy".into()));
                i += 1;
                continue;
            }
            in_flight.fetch_add(1, SeqCst);
            let (collected, in_flight, stop, backoff, resume) =
                (&collected, &in_flight, &stop, &backoff, &resume);
            let prompt = &prompts[i % prompts.len()];
            scope.spawn(move || {
                let o = send(cfg, prompt, &format!("request-{i}"));
                match &o {
                    Outcome::Ok(_) => lock(backoff).reset(),
                    Outcome::Refused(r) => stop.set(r),
                    Outcome::Busy { retry_after, .. } => {
                        let at = until(lock(backoff).busy(*retry_after), end);
                        let mut resume = lock(resume);
                        *resume = Some(resume.map_or(at, |r| r.max(at)));
                    }
                    Outcome::Err(_) => {}
                }
                lock(collected).add(o);
                in_flight.fetch_sub(1, SeqCst);
            });
            i += 1;
        }
    });
    if let Some(r) = stop.refusal.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(r);
    }
    let secs = t0.elapsed().as_secs_f64();
    let c = collected.into_inner().unwrap_or_else(|p| p.into_inner());
    Ok(c.result("open".into(), rps, secs))
}
