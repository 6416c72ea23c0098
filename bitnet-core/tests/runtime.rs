//! The engine on its own thread (`bitnet_core::runtime`): each request hears its own answers
//! and exactly one end per answer, a cancel ends a request that would not end by itself, and
//! a runtime whose scheduler could not be built says so instead of hanging its callers.

mod common;

use std::sync::Arc;

use bitnet_core::model::Model;
use bitnet_core::runtime::{Reply, Request, Runtime, RuntimeOptions, Stopped};
use bitnet_core::scheduler::{ContextPolicy, GenParams, Scheduler, SchedulerOptions, StopReason};
use bitnet_core::{CoreError, GenStats};
use bitnet_kernels::Isa;
use common::models::{engine, synth_model, tiny};

fn runtime(m: &Arc<Model>) -> Runtime {
    let m = m.clone();
    Runtime::spawn(RuntimeOptions::default(), move || {
        let opts = SchedulerOptions { max_running: 4 };
        Ok(Scheduler::new(engine(&m, 256, 32, 1), opts))
    })
    .unwrap()
}

/// Every reply of a request, and each answer's end.
fn collect(replies: impl Iterator<Item = Reply>, n: usize) -> Vec<Option<GenStats>> {
    let mut ends = vec![None; n];
    for r in replies {
        match r {
            Reply::Done { index, stats } => {
                assert!(ends[index].is_none(), "answer {index} ended twice");
                ends[index] = Some(stats);
            }
            Reply::Error { error, .. } => panic!("{error}"),
            _ => {}
        }
    }
    ends
}

#[test]
fn every_answer_of_a_request_ends_once_and_a_cancel_stops_an_endless_one() {
    let (m, _) = synth_model("runtime", &tiny(1), Some(Isa::Scalar));
    let rt = runtime(&m);
    let h = rt.handle();
    let params = GenParams {
        max_tokens: 6,
        ignore_eos: true,
        ..GenParams::default()
    };
    let two = Request {
        n: 2,
        ..Request::new(vec![5, 6, 7], params.clone())
    };
    let ends = collect(h.stream(two).unwrap(), 2);
    for (i, e) in ends.iter().enumerate() {
        let e = e
            .as_ref()
            .unwrap_or_else(|| panic!("answer {i} never ended"));
        assert_eq!((e.gen_tokens, e.stop_reason), (6, StopReason::MaxTokens));
    }

    // No token limit, no end of generation, a window that keeps making room: only the
    // cancel ends it.
    let endless = GenParams {
        max_tokens: usize::MAX,
        context: ContextPolicy::Window {
            sinks: 4,
            window: 32,
        },
        ..params
    };
    let mut replies = h.stream(Request::new(vec![9, 10], endless)).unwrap();
    let id = replies.id();
    assert!(matches!(replies.next(), Some(Reply::Token { .. })));
    h.cancel(id);
    let ends = collect(replies, 1);
    let e = ends[0].as_ref().expect("the cancelled request ends");
    assert_eq!(e.stop_reason, StopReason::Cancelled);
    rt.shutdown().unwrap();
    // The thread is gone: a late request is refused, not left waiting.
    assert_eq!(
        h.submit(
            Request::new(vec![1], GenParams::default()),
            std::sync::mpsc::channel().0
        ),
        Err(Stopped)
    );
}

#[test]
fn a_scheduler_that_cannot_be_built_is_reported_and_its_requests_are_not_left_waiting() {
    let rt = Runtime::spawn(RuntimeOptions::default(), || {
        Err::<Scheduler, _>(CoreError::EmptyInput)
    })
    .unwrap();
    let h = rt.handle();
    // Submitted while the build runs or after it failed: the stream ends with no reply.
    if let Ok(replies) = h.stream(Request::new(vec![1], GenParams::default())) {
        assert_eq!(replies.count(), 0);
    }
    assert!(matches!(rt.shutdown(), Err(CoreError::EmptyInput)));
    assert!(
        h.stream(Request::new(vec![1], GenParams::default()))
            .is_err()
    );
}

/// `ReplyStream::next_timeout`, the wait a caller that must look elsewhere meanwhile polls
/// with: the same replies the iterator gives, `TimedOut` while nothing came, `Finished` once
/// every answer ended, nothing after a cancel, and `Stopped` when the engine is gone.
#[test]
fn a_stream_polled_with_a_timeout_gives_every_reply_then_says_why_it_ended() {
    use bitnet_core::runtime::Waited;
    use std::time::Duration;

    let (m, _) = synth_model("runtime_poll", &tiny(2), Some(Isa::Scalar));
    let rt = runtime(&m);
    let h = rt.handle();
    let params = GenParams {
        max_tokens: 5,
        ignore_eos: true,
        ..GenParams::default()
    };
    let request = || Request::new(vec![3, 4, 5], params.clone());
    // What a reply says, less its timings and cache figures (the two requests differ there).
    let said = |r: Reply| match r {
        Reply::Done { index, stats } => {
            format!("done {index} {:?} {:?}", stats.tokens, stats.stop_reason)
        }
        other => format!("{other:?}"),
    };
    let want: Vec<String> = h.stream(request()).unwrap().map(said).collect();
    let mut s = h.stream(request()).unwrap();
    let mut got = Vec::new();
    loop {
        match s.next_timeout(Duration::from_micros(50)) {
            Waited::Reply(r) => got.push(said(r)),
            Waited::TimedOut => {}
            Waited::Finished => break,
            Waited::Stopped => panic!("the engine stopped"),
        }
    }
    assert!(s.is_finished());
    assert_eq!(got, want);
    assert!(got.len() > 5, "{got:?}");
    assert!(matches!(s.next_timeout(Duration::ZERO), Waited::Finished));

    // A cancelled stream ends at once and yields nothing more.
    let endless = GenParams {
        max_tokens: usize::MAX,
        context: ContextPolicy::Window {
            sinks: 4,
            window: 32,
        },
        ..params.clone()
    };
    let mut s = h
        .stream(Request::new(vec![9, 10], endless.clone()))
        .unwrap();
    while !matches!(s.next_timeout(Duration::from_millis(100)), Waited::Reply(_)) {}
    s.cancel();
    assert!(s.is_finished());
    assert!(matches!(s.next_timeout(Duration::ZERO), Waited::Finished));

    // The engine gone: a stream still open says so instead of waiting forever.
    let mut s = h.stream(Request::new(vec![9, 10], endless)).unwrap();
    rt.shutdown().unwrap();
    let mut seen = 0;
    let end = loop {
        match s.next_timeout(Duration::from_millis(100)) {
            Waited::Reply(_) => seen += 1,
            other => break other,
        }
        assert!(seen < 100_000, "replies without an end");
    };
    // Shutdown cancels what runs: its end arrives, then the channel closes.
    assert!(matches!(end, Waited::Stopped | Waited::Finished), "{end:?}");
    assert!(s.is_finished());
}
