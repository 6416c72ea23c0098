//! The engine side of the server: one model's runtime (`bitnet_core::runtime`) on a
//! thread of its own, where the model is loaded, the engine made and warmed up, publishing
//! each phase on the way ([`Phase`]); the runtime's observer keeps the model's Prometheus
//! figures; and each request's replies travel back over a tokio channel, so the handlers
//! await them without blocking. Several models are several of these (`models/`).

use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bitnet_core::chat::ChatTemplate;
use bitnet_core::embed::{Normalize, Pooling};
use bitnet_core::runtime::{Handle, Observer, Reply, ReplySink, Runtime, RuntimeOptions};
use bitnet_core::scheduler::{
    EmbedParams, GenStats, Scheduler, SchedulerOptions, StopReason, warm_up, warm_up_embeddings,
};
use tokio::sync::{mpsc::UnboundedSender, oneshot, watch};

use super::args::Args;
use super::loaded::{Loaded, Shared};
use super::prefix_store::PrefixStore;
use super::slots::Slots;
use crate::args::pooling::choose_pooling;
use crate::output::{error_chain, note};
use crate::setup::{Setup, embedding_model};
use crate::template_worker;
use bitnet_core::kv::snapshot_file::SnapshotKey;
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

/// How far a model's load has come, as its engine thread publishes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The file is being read and the engine made.
    Loading,
    /// Loaded and checked ([`Shared::model`] is set); the short warm-up is left.
    WarmingUp,
    /// Serving: `/health` says 200 from here on.
    Ready,
    /// The load failed: the error, causes included.
    Failed(String),
}

/// What to load and how: the server's flags, the file, and what applies to this model.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    pub args: Arc<Args>,
    pub path: PathBuf,
    /// Attach `--model-draft` (the default model only: the draft must share its vocabulary).
    pub draft: bool,
    /// Serve embeddings from an embedding model without `--embeddings` (several models: each
    /// file says what it is).
    pub embed_if_embedding_model: bool,
    /// Put before the engine's notes (the model's name when there are several).
    pub label: String,
}

/// One model's running engine: its handle, what its thread publishes, and the thread
/// itself until it is shut down.
#[derive(Debug)]
pub struct Running {
    pub shared: Arc<Shared>,
    pub engine: Handle,
    pub phase: watch::Receiver<Phase>,
    runtime: Mutex<Option<Runtime<()>>>,
}

impl Running {
    /// Waits until the model serves (`Ok`) or its load failed (the error's text).
    pub async fn ready(&self) -> Result<(), String> {
        let mut phase = self.phase.clone();
        let seen = phase
            .wait_for(|p| matches!(p, Phase::Ready | Phase::Failed(_)))
            .await
            .map(|p| p.clone());
        match seen {
            Ok(Phase::Failed(why)) => Err(why),
            Ok(_) => Ok(()),
            Err(_) => Err("the engine thread ended before the model was ready".to_owned()),
        }
    }

    /// Cancels what is left, ends the engine thread and waits for it: the model's memory is
    /// freed once the last handler holding [`Running::shared`] lets go.
    pub fn shutdown(&self) {
        self.engine.exit();
        let runtime = self
            .runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(r) = runtime {
            let _ = r.shutdown();
        }
    }
}

/// Starts the engine thread of the model `spec` names, its figures kept in `shared`. Its
/// phases are published on the returned [`Running::phase`]; a failure to load is also sent
/// whole to `failed` when given (the server stops on its default model's failure at start).
/// Requests that arrive meanwhile wait (the handlers see to that).
pub fn spawn(
    spec: LoadSpec,
    shared: Arc<Shared>,
    failed: Option<oneshot::Sender<anyhow::Error>>,
) -> Result<Running> {
    let options = RuntimeOptions {
        step_delay: Duration::from_millis(spec.args.step_delay_ms),
        observer: Box::new(Metrics(shared.clone())),
    };
    let (phase_tx, phase) = watch::channel(Phase::Loading);
    let engine_shared = shared.clone();
    let runtime = Runtime::spawn(options, move || {
        start_engine(&spec, &engine_shared, &phase_tx).map_err(|e| {
            phase_tx.send_replace(Phase::Failed(error_chain(&e)));
            if let Some(failed) = failed {
                let _ = failed.send(e);
            }
        })
    })
    .context("starting the engine thread")?;
    Ok(Running {
        shared,
        engine: runtime.handle(),
        phase,
        runtime: Mutex::new(Some(runtime)),
    })
}

/// Loads the model, makes the engine and warms it up, publishing each phase.
fn start_engine(
    spec: &LoadSpec,
    shared: &Shared,
    phase: &watch::Sender<Phase>,
) -> Result<Scheduler> {
    let args = &*spec.args;
    let label = &spec.label;
    let parallel = args.parallel as usize;
    let setup = Setup::load(&spec.path, &args.model_args, Some(&args.attn_entropy))?;
    let model = setup.model.clone();
    if model.tokenizer().is_none() {
        bail!("the model file has no tokenizer (tokenizer.ggml.* keys)");
    }
    setup.check_context()?;
    let speculate = spec.draft || args.speculate.model_draft.is_none();
    if speculate {
        args.speculate.check(setup.engine_opts.batch)?;
    }
    let draft = if spec.draft {
        args.speculate.load(&args.model_args, &setup.engine_opts)?
    } else {
        None
    };
    let template = ChatTemplate::for_model(&model, args.chat_template.as_deref())
        .context("choosing the chat template")?;
    let template = template_worker::confine(template)?;
    let engine = setup.engine()?;
    let max_seq_len = engine.max_seq_len();
    let kv_bytes = engine.kv().bytes();
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
        note!(
            "{label}draft model {} for speculative decoding",
            d.path.display()
        );
    }
    let embedding_model = embedding_model(model.config());
    let embeds = args.embeddings || (spec.embed_if_embedding_model && embedding_model.is_some());
    let pooling = embeds
        .then(|| choose_pooling(args.pooling.as_deref(), model.config()))
        .transpose()?;
    match (&pooling, &embedding_model) {
        (Some(p), None) => note!(
            "{label}warning: the file is not an embedding model (it names no pooling_type): \
             its final hidden states are served as embeddings all the same ({} pooling)",
            p.name()
        ),
        (None, Some(why)) => note!(
            "{label}warning: the file is an embedding model ({why}): chat and completion \
             requests are refused; start the server with --embeddings to serve /v1/embeddings"
        ),
        _ => {}
    }
    let n_embd = model.config().n_embd;
    let (slots, prefix_store) = saved_kv(args, &spec.path, &model)?;
    let _ = shared.model.set(Loaded {
        model,
        max_seq_len,
        kv_bytes,
        template,
        pooling,
        embedding_model: embedding_model.clone(),
        n_embd,
        slots,
        prefix_store: prefix_store.clone(),
    });
    phase.send_replace(Phase::WarmingUp);
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
    if let Some(store) = &prefix_store {
        let t0 = std::time::Instant::now();
        let restored = store.restore(&mut sched);
        for why in &restored.skipped {
            note!("{label}warning: prefix cache: skipped {why}");
        }
        if restored.files > 0 {
            note!(
                "{label}prefix cache: {} restored from {} in {:.0} ms",
                crate::output::count(restored.tokens, "token"),
                crate::output::count(restored.files, "file"),
                t0.elapsed().as_secs_f64() * 1e3
            );
        }
    }
    phase.send_replace(Phase::Ready);
    note!(
        "{label}ready: context {max_seq_len} tokens shared by up to {}, {}",
        crate::output::count(parallel, "sequence"),
        crate::output::count(sched.engine().threads(), "thread")
    );
    Ok(sched)
}

/// The model's slots, and its persistent prefix cache with `--prefix-cache-dir`. Files of
/// either are keyed by the model file's digest (read here, once a load).
fn saved_kv(
    args: &Args,
    path: &std::path::Path,
    model: &bitnet_core::model::Model,
) -> Result<(Arc<Slots>, Option<Arc<PrefixStore>>)> {
    let slots = Slots::new(args.parallel as usize, args.slot_save_path.clone());
    if args.prefix_cache_dir.is_none() && args.slot_save_path.is_none() {
        return Ok((slots, None));
    }
    let key = SnapshotKey::new(path, model)
        .with_context(|| format!("reading {} for its digest", path.display()))?;
    slots.set_key(key.clone());
    let store = args
        .prefix_cache_dir
        .as_deref()
        .map(|dir| PrefixStore::open(dir, key, args.prefix_cache_max_mib.saturating_mul(1 << 20)))
        .transpose()?;
    Ok((slots, store))
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
