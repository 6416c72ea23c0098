//! How the load tester treats a server that says no: a 401 stops every client at once with the
//! server's message and a hint about the key; a 503 with `Retry-After` is waited out per
//! client before the next try; a server that is not there is retried slowly. Each runs the
//! binary against a scripted server on loopback that records when each conversation's
//! requests arrived.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// What the scripted server answers to the `n`th request (from 0) of a conversation.
type Script = fn(usize) -> String;

/// Arrival times of the requests, by the `X-Conversation-Id` the tester sends.
type Arrivals = Arc<Mutex<BTreeMap<String, Vec<Instant>>>>;

/// Reads one HTTP request; returns its conversation id (empty if none).
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<String> {
    let mut len = 0;
    let mut conversation = String::new();
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        let (name, value) = line.split_once(':').unwrap_or((&line, ""));
        match name.to_ascii_lowercase().as_str() {
            "content-length" => len = value.trim().parse().ok()?,
            "x-conversation-id" => value.trim().clone_into(&mut conversation),
            _ => {}
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(conversation)
}

/// Starts the server; returns its address and the arrivals it records.
fn start(script: Script) -> (String, Arrivals) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let arrivals = Arrivals::default();
    let seen = arrivals.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                while let Some(conversation) = read_request(&mut reader) {
                    let n = {
                        let mut seen = seen.lock().unwrap();
                        let times = seen.entry(conversation).or_default();
                        times.push(Instant::now());
                        times.len() - 1
                    };
                    if stream.write_all(script(n).as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, arrivals)
}

fn answer(status: &str, headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn completion() -> String {
    answer(
        "200 OK",
        "",
        r#"{"choices":[{"index":0,"text":"ab","finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#,
    )
}

fn loadtest(addr: &str, args: &[&str]) -> (Output, Duration) {
    let t0 = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_bitnet-loadtest"))
        .args(["--url", &format!("http://{addr}"), "-o", "json"])
        .args(args)
        .env_remove("BITNET_API_KEY")
        .output()
        .unwrap();
    (out, t0.elapsed())
}

fn total(arrivals: &Arrivals) -> usize {
    arrivals.lock().unwrap().values().map(Vec::len).sum()
}

#[test]
fn a_401_stops_every_client_with_the_servers_message() {
    let (addr, arrivals) = start(|_| {
        answer(
            "401 Unauthorized",
            "",
            r#"{"error":{"message":"Invalid API key.","type":"invalid_request_error","code":"invalid_api_key"}}"#,
        )
    });
    let (out, took) = loadtest(&addr, &["--concurrency", "4", "--duration", "5s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit status 0; stderr: {stderr}");
    assert!(
        took < Duration::from_secs(2),
        "took {took:?}; stderr: {stderr}"
    );
    assert!(
        total(&arrivals) <= 4,
        "{} requests from 4 clients",
        total(&arrivals)
    );
    for part in ["401", "Invalid API key.", "--api-key", "BITNET_API_KEY"] {
        assert!(stderr.contains(part), "{part:?} missing from: {stderr}");
    }

    // The open loop stops as well: its clock starts nothing after the answer.
    let (addr, arrivals) = start(|_| answer("403 Forbidden", "", r#"{"error":{"message":"no"}}"#));
    let (out, took) = loadtest(&addr, &["--rps", "50", "--duration", "5s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit status 0; stderr: {stderr}");
    assert!(
        took < Duration::from_secs(2),
        "took {took:?}; stderr: {stderr}"
    );
    assert!(total(&arrivals) <= 3, "{} requests", total(&arrivals));
    assert!(stderr.contains("403"), "{stderr}");
}

#[test]
fn a_503_is_retried_after_the_servers_retry_after() {
    // Each conversation's first request is refused for a second, the next one served.
    let (addr, arrivals) = start(|n| {
        if n == 0 {
            answer(
                "503 Service Unavailable",
                "Retry-After: 1\r\n",
                r#"{"error":{"message":"busy"}}"#,
            )
        } else {
            completion()
        }
    });
    let (out, took) = loadtest(
        &addr,
        &[
            "--concurrency",
            "2",
            "--duration",
            "10s",
            "--max-requests",
            "4",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let arrivals = arrivals.lock().unwrap();
    assert_eq!(arrivals.len(), 2, "two conversations: {arrivals:?}");
    // Both clients were refused at once; nothing more may come for a second. The four
    // requests are shared between the clients, so either may send the last two.
    let first = arrivals.values().map(|t| t[0]).min().unwrap();
    let early = arrivals
        .values()
        .flatten()
        .filter(|t| **t - first < Duration::from_millis(950))
        .count();
    assert_eq!(early, 2, "{arrivals:?}");
    for (conversation, times) in arrivals.iter() {
        if let [refused, retried, ..] = times[..] {
            let gap = retried - refused;
            assert!(
                gap >= Duration::from_millis(950),
                "{conversation} came back after {gap:?}"
            );
        }
    }
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &report[0];
    assert_eq!(r["requests_ok"], 2, "{r}");
    assert_eq!(r["errors"]["http_503"], 2, "{r}");
    assert_eq!(r["backoffs"], 2, "{r}");
    let waited = r["backoff_s"].as_f64().unwrap();
    assert!((1.9..4.0).contains(&waited), "{r}");
    assert_eq!(r["generated_tokens"], 4, "{r}");
}

#[test]
fn a_server_that_is_not_there_is_retried_slowly() {
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let (out, _) = loadtest(&addr, &["--concurrency", "2", "--duration", "1s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &report[0];
    let refused = r["errors"]["connect"].as_u64().unwrap();
    // 0.1 s doubling, less jitter, over one second: a handful of tries per client.
    assert!((2..=20).contains(&refused), "{refused} tries: {r}");
    assert!(r["backoffs"].as_u64().unwrap() >= 2, "{r}");
}
