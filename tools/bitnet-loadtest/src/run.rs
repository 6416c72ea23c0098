//! The two load shapes. Closed loop: N client threads, each sending its next request as soon
//! as the last one ended, until the run's time or request budget is spent. Open loop: a
//! clock starts requests at a fixed rate on their own threads (bounded in number), so a
//! slow server shows as growing latency rather than as a lower offered load.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Args;
use super::client::{Config, Outcome, send};
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
}

impl Collected {
    fn add(&mut self, o: Outcome) {
        match o {
            Outcome::Ok(s) => {
                self.ok += 1;
                self.tokens += s.tokens;
                self.ttft.extend(s.ttft);
                self.gaps.extend(s.gaps);
                self.e2e.push(s.e2e);
            }
            Outcome::Err(kind) => *self.errors.entry(kind).or_default() += 1,
        }
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
        )
    }
}

pub fn closed_loop(cfg: &Config, prompts: &[String], args: &Args, clients: usize) -> RunResult {
    let collected = Arc::new(Mutex::new(Collected::default()));
    let started = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let end = t0 + args.duration;
    std::thread::scope(|scope| {
        for c in 0..clients {
            let collected = collected.clone();
            let started = started.clone();
            scope.spawn(move || {
                let conversation = format!("client-{c}");
                while Instant::now() < end {
                    let i = started.fetch_add(1, SeqCst);
                    if i >= args.max_requests {
                        break;
                    }
                    let o = send(cfg, &prompts[i % prompts.len()], &conversation);
                    // A request that ended after the run's end still counts: its tokens
                    // were produced in the measured time only in part, so the rate is
                    // taken over the real elapsed time below.
                    collected.lock().unwrap_or_else(|p| p.into_inner()).add(o);
                }
            });
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    let c = std::mem::take(&mut *collected.lock().unwrap_or_else(|p| p.into_inner()));
    c.result("closed".into(), clients as f64, secs)
}

pub fn open_loop(cfg: &Config, prompts: &[String], args: &Args, rps: f64) -> RunResult {
    let collected = Arc::new(Mutex::new(Collected::default()));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let interval = Duration::from_secs_f64(1.0 / rps);
    let t0 = Instant::now();
    let end = t0 + args.duration;
    std::thread::scope(|scope| {
        let mut next = t0;
        for i in 0..args.max_requests {
            if next >= end {
                break;
            }
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            next += interval;
            if in_flight.load(SeqCst) >= args.max_in_flight {
                collected
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .add(Outcome::Err("dropped_client_busy".into()));
                continue;
            }
            in_flight.fetch_add(1, SeqCst);
            let collected = collected.clone();
            let in_flight = in_flight.clone();
            let prompt = &prompts[i % prompts.len()];
            scope.spawn(move || {
                let o = send(cfg, prompt, &format!("request-{i}"));
                collected.lock().unwrap_or_else(|p| p.into_inner()).add(o);
                in_flight.fetch_sub(1, SeqCst);
            });
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    let c = std::mem::take(&mut *collected.lock().unwrap_or_else(|p| p.into_inner()));
    c.result("open".into(), rps, secs)
}
