//! The engine side of the server: the model is loaded, the engine made and warmed up on the
//! runtime's own thread (`bitnet_core::runtime`), publishing readiness on the way; the
//! runtime's observer keeps the Prometheus figures; and each request's replies travel back
//! over a tokio channel, so the handlers await them without blocking.

use std::sync::Arc;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bitnet_core::chat::ChatTemplate;
use bitnet_core::embed::{Normalize, Pooling};
use bitnet_core::runtime::{Observer, Reply, ReplySink, Runtime, RuntimeOptions};
use bitnet_core::scheduler::{
    EmbedParams, GenStats, Scheduler, SchedulerOptions, StopReason, warm_up, warm_up_embeddings,
};
use tokio::sync::mpsc::UnboundedSender;

use super::args::Args;
use super::state::{Loaded, Shared};
use crate::args::pooling::choose_pooling;
use crate::output::note;
use crate::setup::{Setup, embedding_model};
use crate::template_worker;

/// A request's replies, sent to its handler.
#[derive(Debug)]
pub struct Replies(pub UnboundedSender<Reply>);

impl ReplySink for Replies {
    fn send(&self, reply: Reply) -> bool {
        self.0.send(reply).is_ok()
    }

    /// The handler is gone: the client disconnected, or its timeout passed.
    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

/// Starts the engine thread. `loaded` hears once the model is loaded and everything about
/// it checked (the server then announces its address; only the short warm-up is left); a
/// failure to load or start is sent to `failed` instead (the server then stops). Requests
/// that arrive meanwhile get 503 from `AppState::ready`.
pub fn spawn(
    args: Args,
    shared: Arc<Shared>,
    parallel: usize,
    loaded: tokio::sync::oneshot::Sender<()>,
    failed: tokio::sync::oneshot::Sender<anyhow::Error>,
) -> Result<Runtime<()>> {
    let options = RuntimeOptions {
        step_delay: Duration::from_millis(args.step_delay_ms),
        observer: Box::new(Metrics(shared.clone())),
    };
    Runtime::spawn(options, move || {
        start_engine(&args, parallel, &shared, loaded).map_err(|e| {
            let _ = failed.send(e);
        })
    })
    .context("starting the engine thread")
}

/// Loads the model, makes the engine and warms it up, publishing readiness on the way.
fn start_engine(
    args: &Args,
    parallel: usize,
    shared: &Shared,
    loaded: tokio::sync::oneshot::Sender<()>,
) -> Result<Scheduler> {
    let setup = Setup::load(&args.model, &args.model_args, Some(&args.attn_entropy))?;
    let model = setup.model.clone();
    if model.tokenizer().is_none() {
        bail!("the model file has no tokenizer (tokenizer.ggml.* keys)");
    }
    setup.check_context()?;
    args.speculate.check(setup.engine_opts.batch)?;
    let draft = args.speculate.load(&args.model_args, &setup.engine_opts)?;
    let template = ChatTemplate::for_model(&model, args.chat_template.as_deref())
        .context("choosing the chat template")?;
    let template = template_worker::confine(template)?;
    let engine = setup.engine()?;
    let max_seq_len = engine.max_seq_len();
    // --keep and --kv-window checked against this context before anything is served.
    args.context
        .policy(true, 1)?
        .validate(max_seq_len)
        .context("the context policy")?;
    let mut sched = Scheduler::new(
        engine,
        SchedulerOptions {
            max_running: parallel,
        },
    );
    if let Some(d) = &draft {
        d.attach(&mut sched)?;
        note!("draft model {} for speculative decoding", d.path.display());
    }
    let pooling = args
        .embeddings
        .then(|| choose_pooling(args.pooling.as_deref(), model.config()))
        .transpose()?;
    let embedding_model = embedding_model(model.config());
    match (&pooling, &embedding_model) {
        (Some(p), None) => note!(
            "warning: the file is not an embedding model (it names no pooling_type): its final \
             hidden states are served as embeddings all the same ({} pooling)",
            p.name()
        ),
        (None, Some(why)) => note!(
            "warning: the file is an embedding model ({why}): chat and completion requests \
             are refused; start the server with --embeddings to serve /v1/embeddings"
        ),
        _ => {}
    }
    let n_embd = model.config().n_embd;
    let _ = shared.model.set(Loaded {
        model,
        max_seq_len,
        template,
        pooling,
        embedding_model: embedding_model.clone(),
        n_embd,
    });
    let _ = loaded.send(());
    let delay = Duration::from_millis(args.step_delay_ms);
    if pooling.is_some() || embedding_model.is_some() {
        // Completions are refused: warm the path requests will take (a model without a
        // language-model head may have nothing to generate with).
        let params = EmbedParams {
            pooling: pooling.unwrap_or(Pooling::Last),
            normalize: Normalize(2),
        };
        warm_up_embeddings(&mut sched, params, delay).context("warming up")?;
    } else {
        warm_up(&mut sched, delay).context("warming up")?;
    }
    shared.ready.store(true, SeqCst);
    note!(
        "ready: context {max_seq_len} tokens shared by up to {}, {}",
        crate::output::count(parallel, "sequence"),
        crate::output::count(sched.engine().threads(), "thread")
    );
    Ok(sched)
}

/// The runtime's observer: every figure `/metrics` shows that the engine thread sees.
struct Metrics(Arc<Shared>);

impl Observer for Metrics {
    fn on_request(&mut self) {
        self.0.metrics.requests.fetch_add(1, Relaxed);
    }

    fn on_token(&mut self, first: bool, latency: Duration) {
        let m = &self.0.metrics;
        m.predicted_tokens.fetch_add(1, Relaxed);
        if first {
            m.ttft.observe(latency.as_secs_f64());
        } else {
            m.inter_token.observe(latency.as_secs_f64());
        }
    }

    fn on_done(&mut self, stats: &GenStats, elapsed: Duration) {
        let m = &self.0.metrics;
        // The tokens read, not those asked for: a request cancelled while its prompt was
        // being read stopped part-way.
        m.prompt_tokens.fetch_add(stats.prompt_read as u64, Relaxed);
        m.cached_tokens
            .fetch_add(stats.cached_tokens as u64, Relaxed);
        m.draft_tokens.fetch_add(stats.draft_tokens as u64, Relaxed);
        m.draft_accepted
            .fetch_add(stats.draft_accepted as u64, Relaxed);
        if stats.stop_reason == StopReason::Cancelled {
            m.cancelled.fetch_add(1, Relaxed);
        } else {
            m.add_output(&stats.tokens);
        }
        m.request.observe(elapsed.as_secs_f64());
    }

    fn on_embedding(&mut self, stats: &GenStats, _elapsed: Duration) {
        let m = &self.0.metrics;
        m.prompt_tokens.fetch_add(stats.prompt_read as u64, Relaxed);
        m.cached_tokens
            .fetch_add(stats.cached_tokens as u64, Relaxed);
        if stats.stop_reason == StopReason::Cancelled {
            m.cancelled.fetch_add(1, Relaxed);
        } else {
            m.embeddings.fetch_add(1, Relaxed);
        }
    }

    fn on_step(&mut self, sched: &Scheduler) {
        let m = &self.0.metrics;
        m.set_engine_state(
            sched.n_running(),
            sched.n_waiting(),
            &sched.engine().kv().stats(),
        );
        let e = sched.engine();
        if e.attention_entropy_every() > 0 {
            m.set_attention_entropy(e.attention_entropy());
        }
    }

    fn on_step_error(&mut self, error: &bitnet_core::CoreError) {
        note!("warning: engine step failed: {error}");
    }
}
