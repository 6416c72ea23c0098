//! One request against the server, timed: sent, first text (streaming), each later piece of
//! text, end. The token count comes from the answer's `usage` (asked for with
//! `stream_options.include_usage` when streaming), not from counting chunks. An answer that
//! refuses the credentials or says the server is busy is told apart from other errors, since
//! the run stops on the first and waits on the second.

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use super::args::Args;
use super::backoff::parse_retry_after;

#[derive(Clone, Debug)]
pub struct Config {
    pub url: String,
    pub chat: bool,
    pub stream: bool,
    pub max_tokens: usize,
    pub ignore_eos: bool,
    pub temperature: f32,
    pub api_key: Option<String>,
    pub conversation_header: String,
    pub agent: ureq::Agent,
}

impl Config {
    pub fn new(args: &Args, base: &str) -> Config {
        let path = if args.chat {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        };
        Config {
            url: format!("{base}{path}"),
            chat: args.chat,
            stream: args.stream,
            max_tokens: args.max_tokens,
            ignore_eos: args.ignore_eos,
            temperature: args.temperature,
            api_key: args.api_key.clone(),
            conversation_header: args.conversation_header.clone(),
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(args.timeout))
                .build(),
        }
    }
}

/// What one request measured.
#[derive(Clone, Debug)]
pub enum Outcome {
    Ok(Sample),
    /// 401 or 403: every later request would be refused the same way.
    Refused(Refusal),
    /// 429 or 503, with the wait the server asked for (`Retry-After`), if it said.
    Busy {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// The kind of error (`http_500`, `connect`, `timeout`, ...).
    Err(String),
}

/// A refusal of the credentials, with the server's own words.
#[derive(Clone, Debug)]
pub struct Refusal {
    pub status: u16,
    /// The OpenAI error body's `error.message`, else the start of the body.
    pub message: String,
}

#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub tokens: u64,
    pub ttft: Option<f64>,
    /// Gaps between pieces of text, seconds.
    pub gaps: Vec<f64>,
    pub e2e: f64,
}

pub fn send(cfg: &Config, prompt: &str, conversation: &str) -> Outcome {
    let mut body = json!({
        "max_tokens": cfg.max_tokens,
        "temperature": cfg.temperature,
        "stream": cfg.stream,
    });
    if cfg.chat {
        body["messages"] = json!([{"role": "user", "content": prompt}]);
    } else {
        body["prompt"] = json!(prompt);
    }
    if cfg.ignore_eos {
        body["ignore_eos"] = json!(true);
    }
    if cfg.stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    let mut req = cfg
        .agent
        .post(&cfg.url)
        .set("Content-Type", "application/json")
        .set(&cfg.conversation_header, conversation);
    if let Some(k) = &cfg.api_key {
        req = req.set("Authorization", &format!("Bearer {k}"));
    }
    let t0 = Instant::now();
    let resp = match req.send_string(&body.to_string()) {
        Ok(r) => r,
        Err(ureq::Error::Status(code @ (401 | 403), r)) => {
            return Outcome::Refused(Refusal {
                status: code,
                message: error_message(r),
            });
        }
        Err(ureq::Error::Status(code @ (429 | 503), r)) => {
            return Outcome::Busy {
                status: code,
                retry_after: r
                    .header("Retry-After")
                    .and_then(|v| parse_retry_after(v, SystemTime::now())),
            };
        }
        Err(ureq::Error::Status(code, _)) => return Outcome::Err(format!("http_{code}")),
        Err(ureq::Error::Transport(t)) => return Outcome::Err(transport_kind(&t)),
    };
    if !cfg.stream {
        let v: Value = match resp.into_json() {
            Ok(v) => v,
            Err(e) => return Outcome::Err(io_kind(&e)),
        };
        let Some(tokens) = v["usage"]["completion_tokens"].as_u64() else {
            return Outcome::Err("bad_response".into());
        };
        return Outcome::Ok(Sample {
            tokens,
            ttft: None,
            gaps: Vec::new(),
            e2e: t0.elapsed().as_secs_f64(),
        });
    }
    let mut s = Sample::default();
    let mut last: Option<Instant> = None;
    let mut done = false;
    let mut reader = BufReader::new(resp.into_reader());
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return Outcome::Err(io_kind(&e)),
        }
        let Some(data) = line.trim_end().strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            done = true;
            break;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return Outcome::Err("bad_response".into());
        };
        if v.get("error").is_some() {
            return Outcome::Err("stream_error".into());
        }
        if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
            s.tokens = n;
        }
        let c = &v["choices"][0];
        let text = c["delta"]["content"].as_str().or(c["text"].as_str());
        if text.is_some_and(|t| !t.is_empty()) {
            let now = Instant::now();
            match last {
                None => s.ttft = Some((now - t0).as_secs_f64()),
                Some(l) => s.gaps.push((now - l).as_secs_f64()),
            }
            last = Some(now);
        }
    }
    if !done {
        return Outcome::Err("truncated_stream".into());
    }
    s.e2e = t0.elapsed().as_secs_f64();
    Outcome::Ok(s)
}

/// What the server said, for the user: `error.message` of an OpenAI error body, else the
/// body's first line (a proxy's page), cut short.
fn error_message(r: ureq::Response) -> String {
    let mut body = String::new();
    // A refusal's body is small; a misbehaving server's need not be.
    let _ = r.into_reader().take(64 << 10).read_to_string(&mut body);
    let text = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.lines().next().unwrap_or("").trim().to_owned());
    if text.is_empty() {
        return "no message".to_owned();
    }
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

fn transport_kind(t: &ureq::Transport) -> String {
    match t.kind() {
        ureq::ErrorKind::ConnectionFailed | ureq::ErrorKind::Dns => "connect".into(),
        ureq::ErrorKind::Io => {
            if t.to_string().contains("timed out") {
                "timeout".into()
            } else {
                "io".into()
            }
        }
        k => format!("{k:?}").to_lowercase(),
    }
}

fn io_kind(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => "timeout".into(),
        _ => "io".into(),
    }
}
