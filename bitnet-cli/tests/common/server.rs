//! A `bitnet serve` process on loopback for the server tests: started on port 0 with the
//! shipped model (the address read from its first line), a blocking HTTP client, SSE
//! readers, and OpenAI error checks.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::shipped_model;

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
        let mut child = Command::new(env!("CARGO_BIN_EXE_bitnet"))
            .arg("serve")
            .arg("-m")
            .arg(shipped_model())
            .args(["--port", "0", "-t", "1", "--no-pin"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning bitnet serve");
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
