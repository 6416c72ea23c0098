//! A `bitnet serve` process on loopback for the server tests: started on port 0 with the
//! shipped model or another (the address read from its first line), a blocking HTTP client, SSE
//! readers, and OpenAI error checks.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::shipped_model;

/// A server's stderr, as far as it has been written.
#[derive(Clone, Default)]
pub struct Log(std::sync::Arc<std::sync::Mutex<String>>);

impl Log {
    pub fn text(&self) -> String {
        self.0.lock().unwrap().clone()
    }

    /// Waits until the log holds `needle`, failing after `secs`.
    pub fn wait_for(&self, secs: u64, needle: &str) {
        let t0 = Instant::now();
        while !self.text().contains(needle) {
            assert!(
                t0.elapsed() < Duration::from_secs(secs),
                "the server never logged {needle:?}; it logged:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A running server; killed when dropped unless it already exited.
pub struct Server {
    pub child: Child,
    pub url: String,
}

impl Server {
    /// Starts a server and waits until `/health` says 200.
    pub fn start(extra: &[&str]) -> Server {
        let s = Server::spawn(extra);
        s.wait_ready();
        s
    }

    /// Starts a server and returns once it listens (it may still be loading).
    pub fn spawn(extra: &[&str]) -> Server {
        Server::spawn_with(&[], &shipped_model(), extra, None)
    }

    /// As [`Server::start_logged`], over the model at `model` instead of the shipped one.
    pub fn start_model(model: &Path, extra: &[&str]) -> (Server, Log) {
        let log = Log::default();
        let s = Server::spawn_with(&[], model, extra, Some(&log));
        s.wait_ready();
        (s, log)
    }

    /// Starts a server whose stderr is collected into the returned log, and waits until
    /// it is ready.
    pub fn start_logged(extra: &[&str]) -> (Server, Log) {
        Server::start_limited(None, extra)
    }

    /// As [`Server::start_logged`], under `ulimit -n FILES` when given.
    pub fn start_limited(open_files: Option<u32>, extra: &[&str]) -> (Server, Log) {
        let log = Log::default();
        let limit = open_files.map(|n| format!("ulimit -n {n} && exec \"$0\" \"$@\""));
        let prefix: Vec<&str> = match &limit {
            Some(script) => vec!["sh", "-c", script],
            None => vec![],
        };
        let s = Server::spawn_with(&prefix, &shipped_model(), extra, Some(&log));
        s.wait_ready();
        (s, log)
    }

    /// `prefix` runs the binary (`sh -c ...`) over `model`, `log` collects stderr when
    /// given.
    fn spawn_with(prefix: &[&str], model: &Path, extra: &[&str], log: Option<&Log>) -> Server {
        let bin = env!("CARGO_BIN_EXE_bitnet");
        let mut cmd = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let mut child = cmd
            .arg("serve")
            .arg("-m")
            .arg(model)
            .args(["--port", "0", "-t", "1", "--no-pin"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(if log.is_some() {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .spawn()
            .expect("spawning bitnet serve");
        if let Some(log) = log {
            let text = std::sync::Arc::clone(&log.0);
            let stderr = child.stderr.take().unwrap();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    eprintln!("{line}");
                    let mut t = text.lock().unwrap();
                    t.push_str(&line);
                    t.push('\n');
                }
            });
        }
        Server::attach(child)
    }

    /// A server spawned elsewhere with its stdout piped: its address read from its first
    /// line.
    pub fn attach(mut child: Child) -> Server {
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Server { child, url }
    }

    pub fn wait_ready(&self) {
        let t0 = Instant::now();
        loop {
            if let Ok(r) = ureq::get(&format!("{}/health", self.url)).call()
                && r.status() == 200
            {
                return;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "server never ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// POSTs JSON; returns the status and the body as JSON.
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(path, body.to_string().as_bytes(), None)
    }

    pub fn post_raw(&self, path: &str, body: &[u8], key: Option<&str>) -> (u16, Value) {
        let mut req = ureq::post(&self.url(path)).set("Content-Type", "application/json");
        if let Some(k) = key {
            req = req.set("Authorization", &format!("Bearer {k}"));
        }
        match req.send_bytes(body) {
            Ok(r) => (r.status(), r.into_json().unwrap()),
            Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap()),
            Err(e) => panic!("POST {path}: {e}"),
        }
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        match ureq::get(&self.url(path)).call() {
            Ok(r) => (r.status(), r.into_string().unwrap()),
            Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap()),
            Err(e) => panic!("GET {path}: {e}"),
        }
    }

    /// One figure of `/metrics`.
    pub fn metric(&self, name: &str) -> f64 {
        let (_, text) = self.get("/metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no metric {name}"))
            .parse()
            .unwrap()
    }

    /// Waits until `cond` holds (polling), failing after `secs`.
    pub fn wait_for(&self, secs: u64, what: &str, mut cond: impl FnMut(&Server) -> bool) {
        let t0 = Instant::now();
        while !cond(self) {
            assert!(
                t0.elapsed() < Duration::from_secs(secs),
                "timed out: {what}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Opens a streaming request; returns the reader of its SSE body.
pub fn open_stream(s: &Server, path: &str, body: &Value) -> BufReader<Box<dyn Read + Send + Sync>> {
    let r = ureq::post(&s.url(path))
        .send_string(&body.to_string())
        .expect("stream request");
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    BufReader::new(r.into_reader())
}

/// Reads SSE `data:` payloads to the end of the stream.
pub fn read_events(mut reader: impl BufRead) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap() > 0 {
        if let Some(d) = line.trim_end().strip_prefix("data: ") {
            out.push(d.to_owned());
        }
        line.clear();
    }
    out
}

/// The next `data:` payload.
pub fn next_event(reader: &mut impl BufRead) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "stream ended");
        if let Some(d) = line.trim_end().strip_prefix("data: ") {
            return d.to_owned();
        }
    }
}

pub fn assert_openai_error(status: u16, body: &Value, want_status: u16, param: Option<&str>) {
    assert_eq!(status, want_status, "{body}");
    let e = &body["error"];
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(e["type"].is_string(), "{body}");
    assert!(
        e.get("param").is_some() && e.get("code").is_some(),
        "{body}"
    );
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{body}");
    }
}
