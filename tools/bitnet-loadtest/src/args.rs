//! The command line: in a file of its own so that the client and the runs read the
//! arguments without importing the program that drives them.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use super::report;

const AFTER_HELP: &str = "\
Build and run (from the repository; tools/bitnet-loadtest/README.md):
  cargo build --release -p bitnet-loadtest
  target/release/bitnet-loadtest --url http://127.0.0.1:8080 --concurrency 1,8 --duration 30s --stream

When the server says no:
  401, 403   the run stops at once (every client), exit status 1, with the server's message.
  429, 503   the client waits as Retry-After says (seconds or an HTTP date; at least 0.1 s),
             else 0.5 s doubling to 8 s, less up to half at random; closed loop: it then
             sends the same prompt again; open loop: the clock pauses.
  others     (a 500, a refused connection, a timeout) closed loop: the client waits 0.1 s
             doubling to 2 s, less up to half at random; a success resets the waits.
Every such answer counts in `errors` by kind; the waits count in `backoffs` and `backoff_s`.";

#[derive(Debug, Parser)]
#[command(name = "bitnet-loadtest", version, about, after_help = AFTER_HELP)]
pub struct Args {
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Closed loop: clients at once, one run per value (e.g. 1,4,8,16).
    #[arg(long, value_delimiter = ',', conflicts_with = "rps")]
    pub concurrency: Vec<usize>,
    /// Open loop: requests started per second.
    #[arg(long)]
    pub rps: Option<f64>,
    /// How long each run lasts (e.g. 60s, 2m, 500ms).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Requests per run at most.
    #[arg(long, default_value_t = 100_000)]
    pub max_requests: usize,
    /// Prompts, one a line (default: a few built-in ones); used in turn.
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// `max_tokens` of every request: the longest answer asked for.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Stream the answers (needed for time to first token and inter-token latency).
    #[arg(long)]
    pub stream: bool,
    /// Use /v1/chat/completions (the prompt as one user message) instead of /v1/completions.
    #[arg(long)]
    pub chat: bool,
    /// Ask the server to ignore end-of-generation tokens (`ignore_eos`, bitnet and
    /// llama.cpp): every answer is max_tokens long, runs compare.
    #[arg(long)]
    pub ignore_eos: bool,
    /// `temperature` of every request (0: greedy).
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    /// Sent as `Authorization: Bearer KEY` [default: $BITNET_API_KEY]. A 401 or 403 answer
    /// stops the run.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Header naming each client's conversation (for session affinity behind a balancer).
    #[arg(long, default_value = "X-Conversation-Id")]
    pub conversation_header: String,
    /// Seconds one request may take.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Open loop: requests in flight at most (beyond it, starts are counted as dropped).
    #[arg(long, default_value_t = 512)]
    pub max_in_flight: usize,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = report::Format::Text)]
    pub output: report::Format,
}

/// `60s`, `2m`, `500ms`, `1h`, or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 60s, 2m, 500ms)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (ms, s, m, h)")),
    };
    if !(secs > 0.0 && secs < 86_400.0) {
        return Err(format!("{s:?}: give a duration between 1ms and a day"));
    }
    Ok(Duration::from_secs_f64(secs))
}
