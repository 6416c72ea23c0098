//! The load tester against a scripted OpenAI-style server on loopback: a stream of three
//! text chunks, a usage chunk and `[DONE]`, and every third request refused with 503 (with
//! `Retry-After: 0`, so the client's shortest wait). The report must count the tokens from
//! `usage`, the errors by kind and the waits, and give latencies.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use serde_json::Value;

/// Reads one HTTP request (headers and the Content-Length body).
fn read_request(stream: &mut TcpStream) -> Option<String> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut len = 0;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    String::from_utf8(body).ok()
}

fn serve(listener: TcpListener, count: Arc<AtomicUsize>) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let count = count.clone();
        std::thread::spawn(move || {
            while let Some(body) = read_request(&mut stream) {
                let req: Value = serde_json::from_str(&body).unwrap();
                assert_eq!(req["stream"], true);
                assert_eq!(req["stream_options"]["include_usage"], true);
                let n = count.fetch_add(1, SeqCst);
                if n % 3 == 2 {
                    let msg = "{\"error\":{\"message\":\"busy\"}}";
                    let _ = write!(
                        stream,
                        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 0\r\nContent-Length: {}\r\n\r\n{msg}",
                        msg.len()
                    );
                    continue;
                }
                let mut sse = String::new();
                for t in ["a", "b", "c"] {
                    sse.push_str(&format!(
                        "data: {{\"choices\":[{{\"index\":0,\"text\":\"{t}\"}}]}}\n\n"
                    ));
                }
                sse.push_str("data: {\"choices\":[],\"usage\":{\"completion_tokens\":5}}\n\n");
                sse.push_str("data: [DONE]\n\n");
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\n\r\n{sse}",
                    sse.len()
                );
            }
        });
    }
}

#[test]
fn counts_tokens_from_usage_and_errors_by_kind() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    std::thread::spawn(move || serve(listener, c));
    let out = Command::new(env!("CARGO_BIN_EXE_bitnet-loadtest"))
        .args(["--url", &format!("http://{addr}")])
        .args([
            "--concurrency",
            "2",
            "--duration",
            "10s",
            "--max-requests",
            "30",
        ])
        .args(["--stream", "-o", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &report[0];
    assert_eq!(r["mode"], "closed");
    assert_eq!(r["level"], 2.0);
    assert_eq!(count.load(SeqCst), 30, "bounded by --max-requests");
    assert_eq!(r["requests_ok"], 20);
    assert_eq!(r["requests_failed"], 10);
    assert_eq!(r["errors"]["http_503"], 10);
    assert_eq!(r["backoffs"], 10, "one wait per 503");
    assert!(
        r["backoff_s"].as_f64().unwrap() >= 0.99,
        "at least 0.1 s each: {r}"
    );
    assert_eq!(r["generated_tokens"], 100, "5 per answer, from usage");
    for k in ["ttft_ms", "inter_token_ms", "e2e_ms"] {
        let p50 = r[k]["p50"].as_f64().unwrap();
        let p99 = r[k]["p99"].as_f64().unwrap();
        assert!(p50 >= 0.0 && p99 >= p50, "{k}: {r}");
    }
}

#[test]
fn refuses_bad_arguments() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_bitnet-loadtest"))
            .args(args)
            .output()
            .unwrap()
    };
    assert!(!run(&["--duration", "5x"]).status.success());
    assert!(
        !run(&["--concurrency", "0", "--duration", "1s"])
            .status
            .success()
    );
    assert!(
        !run(&["--url", "https://example.invalid", "--duration", "1s"])
            .status
            .success()
    );
    assert!(!run(&["--rps", "2", "--concurrency", "1"]).status.success());
}

#[test]
fn help_describes_the_tool_every_flag_and_how_to_build_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_bitnet-loadtest"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let first = help.lines().next().unwrap_or_default();
    assert!(
        first.contains("OpenAI-compatible"),
        "no description: {first:?}"
    );
    assert!(
        help.contains("cargo build --release -p bitnet-loadtest"),
        "{help}"
    );
    // In --help's long form each flag's line is followed by its description.
    let lines: Vec<&str> = help.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if line.starts_with("  ") && trimmed.starts_with('-') {
            let next = lines.get(i + 1).map_or("", |l| l.trim());
            assert!(
                !next.is_empty() && !next.starts_with('-'),
                "{trimmed} has no description"
            );
        }
    }
}
