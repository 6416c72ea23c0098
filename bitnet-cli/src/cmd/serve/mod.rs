//! `bitnet serve -m MODEL.gguf`: an OpenAI-compatible HTTP server (chat and text
//! completions, streamed or whole, models, health, Prometheus metrics, tokenize) over the
//! multi-sequence engine, with continuous batching. Flags follow llama.cpp's server. With
//! `--embeddings` it serves embeddings instead of completions, as llama-server does
//! (`embeddings/`): each input a prefill-only sequence in the same passes as the rest.
//!
//! The HTTP side runs on tokio; each model runs on an engine thread of its own (the core's
//! `runtime`, started in `engine.rs`), so the async runtime never blocks on model work.
//! Several models may be served (`-m` repeated, `--models-dir`): requests are routed by the
//! `model` they name, each model loaded on first use, the least recently used idle one
//! unloaded past `--models-max` (`models/`). The listener is bound first, so `/health`
//! answers 503 while the default model loads and warms up; the address is announced
//! (`listening on ...`, the line scripts wait for) only once it has loaded, so a default
//! model that cannot load never gets one. Connections are
//! capped and timed (`conn/`). SIGINT or SIGTERM stops accepting, lets requests in flight
//! finish until `--shutdown-timeout`, cancels the rest (their answers end in an error),
//! closes every connection left, and exits 0.

mod answer_record;
mod args;
mod auth;
mod clean_input;
mod completion;
mod config;
mod conn;
mod cors;
mod embeddings;
mod engine;
mod error;
mod loaded;
mod metrics;
mod model_list;
mod models;
mod prefix_store;
mod request;
mod response;
mod routes;
mod slots;
mod sse;
mod state;
mod structured;
mod tools;
mod unsupported;
mod webui;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::output::note;
pub use args::Args;
use config::Config;
use engine::Phase;
use state::AppState;

pub fn run(args: Args) -> Result<()> {
    let api_keys = auth::load_keys(&args.api_key, args.api_key_file.as_deref())?;
    let cors = cors::CorsPolicy::parse(&args.cors_origin)?;
    let catalog = models::Catalog::from_args(&args)?;
    let config = Config {
        api_keys,
        cors,
        timeout: Duration::from_secs(args.timeout),
        parallel: args.parallel as usize,
        queue: args.queue,
        max_body: args.max_body_bytes,
        n_predict: args.n_predict,
        context: args.context.clone(),
        speculate: args.speculate.params(),
        draft_model: args.speculate.model_draft.is_some(),
        shutdown_timeout: Duration::from_secs(args.shutdown_timeout),
        embeddings: args.embeddings,
        clean_input: args.clean.clean_input,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(Arc::new(args), catalog, config))
}

async fn serve(args: Arc<Args>, catalog: models::Catalog, config: Config) -> Result<()> {
    let addr = format!("{}:{}", args.host, args.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr().context("reading the bound address")?;

    let limits = conn::Limits {
        max_connections: conn::connection_cap(args_max_connections(&args)),
        read_timeout: Duration::from_secs(args.read_timeout),
        idle_timeout: Duration::from_secs(args.idle_timeout),
    };
    let webui = !args.no_webui;
    if catalog.routed {
        let names: Vec<&str> = catalog.models.iter().map(|m| m.name.as_str()).collect();
        note!(
            "serving {}: {} (default {})",
            crate::output::count(names.len(), "model"),
            names.join(", "),
            names[0]
        );
    }
    let models = Arc::new(models::Models::new(catalog, args.clone()));
    let (fail_tx, fail_rx) = tokio::sync::oneshot::channel::<anyhow::Error>();
    let default = models.start_default(fail_tx)?;
    tokio::spawn(async move {
        // A failed load never reaches these phases: no address is announced for a server
        // that stops.
        let mut phase = default.phase.clone();
        let loaded = phase
            .wait_for(|p| matches!(p, Phase::WarmingUp | Phase::Ready))
            .await
            .is_ok();
        if loaded {
            announce(local, webui);
        }
    });

    let state = Arc::new(AppState::new(models.clone(), config));
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
            let models = models.clone();
            move || models.cancel_all()
        },
    };
    let connections = state.connections.clone();
    tokio::select! {
        () = conn::serve(listener, app, limits, connections, shutdown) => {},
        Ok(e) = fail_rx => return Err(e),
    }
    drop(state);
    let _ = tokio::task::spawn_blocking(move || models.shutdown()).await;
    note!("stopped");
    Ok(())
}

/// The address line (scripts and tests read it to find the port, and take it to mean the
/// model loaded) and the chat page's.
fn announce(local: std::net::SocketAddr, webui: bool) {
    println!("listening on http://{local}");
    let _ = std::io::stdout().flush();
    if webui {
        note!("chat page at http://{local}/");
    }
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
    // Windows has no SIGTERM: Ctrl-Break, closing the console window and a system shutdown
    // are its other ways to ask a console program to stop (Ctrl-C is `ctrl_c` above).
    #[cfg(windows)]
    let term = async {
        use tokio::signal::windows::{ctrl_break, ctrl_close, ctrl_shutdown};
        match (ctrl_break(), ctrl_close(), ctrl_shutdown()) {
            (Ok(mut brk), Ok(mut close), Ok(mut shutdown)) => {
                tokio::select! {
                    _ = brk.recv() => {},
                    _ = close.recv() => {},
                    _ = shutdown.recv() => {},
                }
            }
            _ => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(any(unix, windows)))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
