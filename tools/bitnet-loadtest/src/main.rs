//! `bitnet-loadtest`: drives an OpenAI-compatible server (`bitnet serve`, llama.cpp's
//! server, ...) and reports what a user of it feels: requests/s, generated tokens/s, time to
//! first token, inter-token latency and end-to-end latency percentiles, and errors by kind.
//!
//! Closed loop (`--concurrency 1,4,8`: N clients, each sending its next request when the
//! last one ended, one run per N) or open loop (`--rps R`: requests start on a clock,
//! whatever the server's speed). Bounded in time (`--duration`) and count
//! (`--max-requests`); it talks only to the URL it is given. A 401 or 403 stops the run with
//! the server's message; 429 and 503 are waited out as `Retry-After` says.
#![forbid(unsafe_code)]

mod args;
mod backoff;
mod client;
mod report;
mod run;

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;

use args::Args;
use client::Refusal;

const DEFAULT_PROMPTS: &[&str] = &[
    "Once upon a time, in a land far away,",
    "The three most important things about running a small shop are",
    "Write a short letter to a friend about the weather:",
    "ROMEO:",
    "Explain in simple words how a bicycle stays upright.",
    "The history of the printing press begins",
];

fn prompts(args: &Args) -> Result<Vec<String>> {
    let Some(path) = &args.prompts else {
        return Ok(DEFAULT_PROMPTS.iter().map(|s| (*s).to_owned()).collect());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading prompts from {}", path.display()))?;
    let list: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    if list.is_empty() {
        bail!("{} holds no prompt", path.display());
    }
    Ok(list)
}

fn main() -> std::process::ExitCode {
    match real_main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The run's end when the server refuses the credentials, with what to do about it.
fn refused(r: &Refusal, key_given: bool) -> anyhow::Error {
    let hint = match (r.status, key_given) {
        (401, false) => {
            "the server wants an API key: pass it with --api-key KEY or in BITNET_API_KEY"
        }
        (401, _) => "the server refused the key: check --api-key or BITNET_API_KEY",
        _ => "the key may not use this route: check --api-key or BITNET_API_KEY, and --url",
    };
    anyhow!(
        "stopped: the server answered HTTP {} ({:?}); {hint}",
        r.status,
        r.message
    )
}

fn real_main() -> Result<()> {
    let mut args = Args::parse();
    if args.api_key.is_none() {
        // Only our own variable: OPENAI_API_KEY is often a real key, not one to send to
        // whatever server --url names.
        args.api_key = std::env::var("BITNET_API_KEY")
            .ok()
            .filter(|k| !k.is_empty());
    }
    let prompts = prompts(&args)?;
    let base = args.url.trim_end_matches('/').to_owned();
    if !base.starts_with("http://") {
        bail!("--url must be an http:// URL (got {:?})", args.url);
    }
    let cfg = client::Config::new(&args, &base);
    let mut results = Vec::new();
    if let Some(rps) = args.rps {
        if !(rps > 0.0 && rps.is_finite()) {
            bail!("--rps must be a positive number");
        }
        let r = run::open_loop(&cfg, &prompts, &args, rps);
        results.push(r.map_err(|r| refused(&r, args.api_key.is_some()))?);
    } else {
        let levels = if args.concurrency.is_empty() {
            vec![1]
        } else {
            args.concurrency.clone()
        };
        if levels.contains(&0) {
            bail!("--concurrency values must be at least 1");
        }
        for c in levels {
            eprintln!("running: {c} concurrent clients for {:?}", args.duration);
            let r = run::closed_loop(&cfg, &prompts, &args, c);
            results.push(r.map_err(|r| refused(&r, args.api_key.is_some()))?);
        }
    }
    report::print(&results, args.output);
    Ok(())
}
