//! `bitnet serve`'s connection layer, from a client's socket: half-sent requests do not
//! hold a shutdown past its deadline, silent and slow clients are closed (and logged), the
//! connection cap keeps `/health` answering under a flood of silent sockets, and answers cut
//! off at shutdown say so instead of reporting a finish.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use common::server::{Server, next_event, open_stream, read_events};
use serde_json::{Value, json};

fn connect(s: &Server) -> TcpStream {
    let addr = s.url.strip_prefix("http://").unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    tcp
}

/// A socket that sent `bytes` and then nothing more.
fn half_sent(s: &Server, bytes: &str) -> TcpStream {
    let mut tcp = connect(s);
    tcp.write_all(bytes.as_bytes()).unwrap();
    tcp
}

/// Reads until the server closes the socket; returns what came and when it closed.
fn read_to_close(tcp: &mut TcpStream) -> (String, Instant) {
    let mut got = Vec::new();
    let _ = tcp.read_to_end(&mut got);
    (String::from_utf8_lossy(&got).into_owned(), Instant::now())
}

/// Waits for the server to exit, up to `secs`; its status, or `None` if it is still running.
fn wait_exit(s: &mut Server, secs: u64) -> Option<std::process::ExitStatus> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        if let Some(status) = s.child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn sigterm_exits_at_the_deadline_while_clients_hold_half_sent_requests() {
    // A read timeout longer than the test: only the shutdown may close these sockets.
    let (mut s, log) = Server::start_logged(&["--shutdown-timeout", "1", "--read-timeout", "600"]);
    let mut head = half_sent(&s, "GET /health HTTP/1.1\r\nHost: x\r\n");
    let mut body = half_sent(
        &s,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{",
    );
    // Both taken by the server before the signal.
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    s.signal("-TERM");
    let status = wait_exit(&mut s, 10).unwrap_or_else(|| {
        panic!(
            "still running 10 s after SIGTERM with --shutdown-timeout 1; log:\n{}",
            log.text()
        )
    });
    assert!(status.success(), "{status:?}");
    // Deadline (1 s), the grace for cancelled answers (2 s), then every socket closed.
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
    let (_, closed) = read_to_close(&mut head);
    assert!(closed.duration_since(t0) < Duration::from_secs(8));
    let (_, closed) = read_to_close(&mut body);
    assert!(closed.duration_since(t0) < Duration::from_secs(8));
    let text = log.text();
    assert!(text.contains("shutdown deadline passed"), "{text}");
    assert!(text.contains("stopped"), "{text}");
}

#[test]
fn silent_slow_and_idle_clients_are_closed_and_logged() {
    let (s, log) = Server::start_logged(&["--read-timeout", "1", "--idle-timeout", "2"]);
    let t0 = Instant::now();
    let mut silent = connect(&s);
    let mut slow = half_sent(&s, "GET /health HTTP/1.1\r\nHost: x\r\n");
    // A body that stops after its first byte: 408 in OpenAI's error shape.
    let mut stalled = half_sent(
        &s,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{",
    );
    // A keep-alive client serves two requests in a row, then idles.
    let mut idle = connect(&s);
    let mut idle_reader = BufReader::new(idle.try_clone().unwrap());
    for _ in 0..2 {
        idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut status = String::new();
        idle_reader.read_line(&mut status).unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{status:?}");
        let mut len = 0;
        loop {
            let mut line = String::new();
            idle_reader.read_line(&mut line).unwrap();
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; len];
        idle_reader.read_exact(&mut body).unwrap();
    }
    let idle_since = Instant::now();

    let (got, closed) = read_to_close(&mut silent);
    assert_eq!(got, "", "a silent socket gets nothing");
    assert!(closed.duration_since(t0) < Duration::from_secs(5));
    let (_, closed) = read_to_close(&mut slow);
    assert!(closed.duration_since(t0) < Duration::from_secs(5));
    let (got, _) = read_to_close(&mut stalled);
    assert!(got.starts_with("HTTP/1.1 408"), "{got:?}");
    let body: Value = serde_json::from_str(got.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "request_timeout", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stopped arriving"),
        "{body}"
    );
    let mut rest = Vec::new();
    let _ = idle_reader.read_to_end(&mut rest);
    let idled = idle_since.elapsed();
    assert!(
        idled >= Duration::from_millis(1500) && idled < Duration::from_secs(6),
        "closed after {idled:?} idle with --idle-timeout 2"
    );
    log.wait_for(5, "no complete request header in 1 s (--read-timeout)");
    assert!(s.metric("bitnet_connections_header_timeouts_total") >= 2.0);
    assert!(s.metric("bitnet_connections_idle_timeouts_total") >= 1.0);
    // The server still serves.
    assert_eq!(s.get("/health").0, 200);
}

#[test]
fn a_flood_of_silent_sockets_under_a_low_open_file_limit_leaves_health_answering() {
    // 128 descriptors: the cap comes down to what they leave room for.
    let (s, log) = Server::start_limited(Some(128), &["--read-timeout", "600"]);
    let flood: Vec<TcpStream> = (0..200).map(|_| connect(&s)).collect();
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(5))
        .build();
    let t0 = Instant::now();
    let r = agent
        .get(&s.url("/health"))
        .call()
        .expect("/health answers while 200 silent sockets are open");
    assert_eq!(r.status(), 200);
    assert!(t0.elapsed() < Duration::from_secs(5));
    log.wait_for(5, "--max-connections 1024 lowered to 96");
    log.wait_for(5, "connection limit reached");
    assert!(s.metric("bitnet_connections_evicted_total") >= 100.0);
    assert!(s.metric("bitnet_connections_open") <= 96.0);
    drop(flood);
}

#[test]
fn at_the_cap_with_every_connection_serving_a_new_one_gets_503() {
    let (s, log) = Server::start_logged(&["--max-connections", "2", "--step-delay-ms", "30"]);
    let body = json!({"prompt": "ROMEO:", "max_tokens": 100, "ignore_eos": true, "stream": true});
    let mut a = open_stream(&s, "/v1/completions", &body);
    next_event(&mut a);
    let mut b = open_stream(&s, "/v1/completions", &body);
    next_event(&mut b);
    let mut third = half_sent(&s, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    let (got, _) = read_to_close(&mut third);
    assert!(got.starts_with("HTTP/1.1 503"), "{got:?}");
    assert!(got.contains("too_many_connections"), "{got:?}");
    log.wait_for(5, "all serving requests");
    assert_eq!(read_events(a).last().unwrap(), "[DONE]");
    assert_eq!(read_events(b).last().unwrap(), "[DONE]");
    third.shutdown(Shutdown::Both).ok();
}

#[test]
fn answers_cut_off_at_shutdown_end_in_an_error_not_a_finish() {
    let (mut s, _log) = Server::start_logged(&["--step-delay-ms", "30", "--shutdown-timeout", "1"]);
    // Text completions (a chat reply may meet its template's stop string first); two
    // answers of 100 tokens share the 256-position context.
    let req = json!({"prompt": "ROMEO:", "max_tokens": 100, "ignore_eos": true, "stream": true,
                     "stream_options": {"include_usage": true}});
    let mut streamed = open_stream(&s, "/v1/completions", &req);
    next_event(&mut streamed);
    let url = s.url("/v1/completions");
    let whole = std::thread::spawn(move || {
        let body = json!({"prompt": "ROMEO:", "max_tokens": 100, "ignore_eos": true});
        match ureq::post(&url).send_json(body) {
            Ok(r) => (r.status(), r.into_json::<Value>().unwrap()),
            Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap()),
            Err(e) => panic!("{e}"),
        }
    });
    s.wait_for(5, "both requests running", |s| {
        s.metric("bitnet_requests_processing") >= 2.0
    });
    s.signal("-TERM");
    let events = read_events(streamed);
    assert_eq!(events.last().unwrap(), "[DONE]");
    for e in &events[..events.len() - 1] {
        let v: Value = serde_json::from_str(e).unwrap();
        if let Some(choices) = v["choices"].as_array() {
            for c in choices {
                assert!(
                    c["finish_reason"].is_null(),
                    "a cut-off answer finished: {e}"
                );
            }
        }
    }
    let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(last["error"]["code"], "cancelled", "{last}");
    let (status, body) = whole.join().unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "cancelled", "{body}");
    assert!(wait_exit(&mut s, 10).is_some_and(|st| st.success()));
}
