//! `bitnet serve -m MODEL.gguf`: an OpenAI-compatible HTTP server (chat and text
//! completions, streamed or whole, models, health, Prometheus metrics, tokenize) over the
//! multi-sequence engine, with continuous batching. Flags follow llama.cpp's server.
//!
//! The HTTP side runs on tokio; the model runs on one engine thread of its own (the core's
//! `runtime`, started in `engine.rs`), so the async runtime never blocks on model work. The listener is bound
//! first, so `/health` answers 503 while the model loads and warms up. Connections are
//! capped and timed (`conn/`). SIGINT or SIGTERM stops accepting, lets requests in flight
//! finish until `--shutdown-timeout`, cancels the rest (their answers end in an error),
//! closes every connection left, and exits 0.

mod auth;
mod completion;
mod conn;
mod cors;
mod engine;
mod error;
mod metrics;
mod request;
mod response;
mod routes;
mod sse;
mod state;
mod structured;
mod token_text;
mod tools;
mod unsupported;
mod webui;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::args::attn_entropy::AttnEntropyArgs;
use crate::args::context::ContextArgs;
use crate::args::model::ModelArgs;
use crate::args::speculate::SpeculateArgs;
use crate::output::note;
use state::{AppState, Config, Shared};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The GGUF model file (models/shakespeare.gguf ships with the repository).
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// Address to listen on; loopback unless you mean to serve other machines.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port; the address is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Requests decoded together (llama.cpp's -np); -c is shared by all of them.
    #[arg(long = "parallel", visible_alias = "np", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub parallel: u32,
    /// Requests that may wait for a place beyond --parallel; more get 503 with Retry-After.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Require this key (`Authorization: Bearer KEY` or `X-Api-Key: KEY`) on every route
    /// but the health checks; repeat it or give a comma-separated list for several.
    #[arg(long, value_name = "KEY")]
    pub api_key: Vec<String>,
    /// Read API keys from this file: one a line, blank lines and `#` comments skipped.
    #[arg(long)]
    pub api_key_file: Option<PathBuf>,
    /// Let pages from this origin call the server from a browser (CORS): scheme://host[:port],
    /// scheme://host:* for any port, or * for any origin; repeatable or comma-separated.
    /// Default: none.
    #[arg(long, visible_alias = "cors-origins", value_name = "ORIGIN")]
    pub cors_origin: Vec<String>,
    /// Seconds a request may take before it is cancelled (504, or an error event when
    /// streaming): 1 to 31536000 (a year).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_S))]
    pub timeout: u64,
    /// Request bodies larger than this many bytes get 413.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// Tokens to generate when a request gives no max_tokens (cut to the context).
    #[arg(short = 'n', long = "n-predict", default_value_t = 256)]
    pub n_predict: usize,
    /// Model name in /v1/models and answers (default: the file name).
    #[arg(long)]
    pub alias: Option<String>,
    /// Chat template: a built-in name or a Jinja file (default: the file's own, else plain).
    #[arg(long)]
    pub chat_template: Option<String>,
    /// Seconds in-flight requests get to finish after SIGINT/SIGTERM before they are
    /// cancelled (their answers then end with an error) and every connection is closed.
    #[arg(long, default_value_t = 10)]
    pub shutdown_timeout: u64,
    /// Connections open at once (kept below the open-file limit). At the cap a new one
    /// replaces the longest-waiting connection without a request; when all are serving,
    /// it gets 503.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,
    /// Seconds a client may take to send a request's header (from connecting, or from its
    /// first byte after an idle spell), and may pause while sending its body (then 408).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_S))]
    pub read_timeout: u64,
    /// Seconds a keep-alive connection may stay idle between requests before it is closed:
    /// longer than a proxy's own (nginx and AWS ALB keep 60 s), or the proxy may send on a
    /// connection as it closes.
    #[arg(long, default_value_t = 75, value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_S))]
    pub idle_timeout: u64,
    /// Serve no chat page at `/` (the API only; `/` is then a 404).
    #[arg(long)]
    pub no_webui: bool,
    /// Sleep this many milliseconds after every engine step: makes a tiny test model as
    /// slow as a big one (tests of queueing and disconnects).
    #[arg(long, default_value_t = 0, hide = true)]
    pub step_delay_ms: u64,
    #[command(flatten)]
    pub context: ContextArgs,
    #[command(flatten)]
    pub attn_entropy: AttnEntropyArgs,
    #[command(flatten)]
    pub speculate: SpeculateArgs,
    #[command(flatten)]
    pub model_args: ModelArgs,
}

/// The longest `--timeout`: a request's deadline is `now + timeout`, which must stay a
/// representable instant (a larger value used to panic the request's task).
const MAX_TIMEOUT_S: u64 = 365 * 24 * 3600;

pub fn run(args: Args) -> Result<()> {
    let api_keys = auth::load_keys(&args.api_key, args.api_key_file.as_deref())?;
    let cors = cors::CorsPolicy::parse(&args.cors_origin)?;
    let model_name = args.alias.clone().unwrap_or_else(|| {
        args.model
            .file_stem()
            .map_or_else(|| "model".to_owned(), |s| s.to_string_lossy().into_owned())
    });
    let config = Config {
        api_keys,
        cors,
        model_name,
        timeout: Duration::from_secs(args.timeout),
        parallel: args.parallel as usize,
        queue: args.queue,
        max_body: args.max_body_bytes,
        n_predict: args.n_predict,
        context: args.context.clone(),
        speculate: args.speculate.params(),
        shutdown_timeout: Duration::from_secs(args.shutdown_timeout),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(args, config))
}

async fn serve(args: Args, config: Config) -> Result<()> {
    let addr = format!("{}:{}", args.host, args.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr().context("reading the bound address")?;
    // Scripts and tests read this line to find the port.
    println!("listening on http://{local}");
    let _ = std::io::stdout().flush();

    let limits = conn::Limits {
        max_connections: conn::connection_cap(args_max_connections(&args)),
        read_timeout: Duration::from_secs(args.read_timeout),
        idle_timeout: Duration::from_secs(args.idle_timeout),
    };
    let webui = !args.no_webui;
    if webui {
        note!("chat page at http://{local}/");
    }
    let shared = Arc::new(Shared::default());
    let (fail_tx, fail_rx) = tokio::sync::oneshot::channel::<anyhow::Error>();
    let parallel = config.parallel;
    let runtime = engine::spawn(args, shared.clone(), parallel, fail_tx)?;

    let state = Arc::new(AppState::new(shared.clone(), runtime.handle(), config));
    let app = routes::router(state.clone(), webui);
    let shutdown = conn::Shutdown {
        signal: {
            let state = state.clone();
            async move {
                shutdown_signal().await;
                state.shutting_down.store(true, SeqCst);
            }
        },
        deadline: state.config.shutdown_timeout,
        cancel: {
            let engine = state.engine.clone();
            move || engine.cancel_all()
        },
    };
    tokio::select! {
        () = conn::serve(listener, app, limits, shared, shutdown) => {},
        Ok(e) = fail_rx => return Err(e),
    }
    state.engine.exit();
    drop(state);
    let _ = tokio::task::spawn_blocking(move || runtime.shutdown()).await;
    note!("stopped");
    Ok(())
}

fn args_max_connections(args: &Args) -> usize {
    usize::try_from(args.max_connections).unwrap_or(usize::MAX)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
