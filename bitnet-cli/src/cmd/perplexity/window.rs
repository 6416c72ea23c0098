//! `bitnet perplexity --kv-window W [--kv-sinks N]` and `bitnet perplexity --kv-evict h2o
//! --kv-budget B [--kv-recent R] [--kv-sinks N]`: perplexity of a text far longer than the
//! cache, read as one stream through a bounded cache, so the two bounded policies can be
//! compared on the same text and the same scored tokens.
//!
//! - Window (StreamingLLM's attention sinks plus a sliding window): the first `N` tokens
//!   stay; when the cache holds `N + W` tokens, the oldest `W / 4` after the sinks are
//!   dropped and the rest moved down with their keys re-rotated (see `Engine::shift`).
//! - Heavy hitters (H2O): the sequence tracks the attention mass each position receives;
//!   when it holds `B` positions, the lightest quarter of those between the sinks and the
//!   `R` most recent is evicted and the rest compacted (see `Engine::evict`).
//!
//! Either way every position the model sees is below the bound and memory stays constant
//! however long the text. Every token after the first `bound - N` is scored (each then has
//! a full cache of context): with `W = B - N` both modes score the same tokens.
//!
//! Removing a quarter at a time rather than a token at a time: each move rounds the moved
//! keys to the cache's format once more.

use anyhow::{Context, Result, bail};
use bitnet_core::engine::{BatchItem, Engine, EngineOptions, Logits};
use bitnet_core::model::Model;
use bitnet_core::scheduler::ContextPolicy;

use crate::output::{Progress, note};

/// What a windowed run measured.
pub struct WindowRun {
    pub nll_sum: f64,
    pub nll_sum2: f64,
    pub scored: u64,
    pub shifts: usize,
    /// Most pool blocks the sequence held at once, and the pool's size.
    pub most_blocks: usize,
    pub n_blocks: usize,
}

/// Positions the cache holds at most under `policy`, and the sinks among them.
fn limit_and_sinks(policy: ContextPolicy) -> (usize, usize) {
    match policy {
        ContextPolicy::Window { sinks, window } => (sinks + window, sinks),
        ContextPolicy::HeavyHitters { sinks, budget, .. } => (budget, sinks),
        ContextPolicy::Stop | ContextPolicy::Shift { .. } => (usize::MAX, 0),
    }
}

/// For humans: `a window of 32 + 4 sinks`, `h2o budget 36 (4 sinks, 16 recent)`.
pub fn describe(policy: ContextPolicy) -> String {
    match policy {
        ContextPolicy::Window { sinks, window } => format!("a window of {window} + {sinks} sinks"),
        ContextPolicy::HeavyHitters {
            sinks,
            recent,
            budget,
        } => format!("h2o budget {budget} ({sinks} sinks, {recent} recent)"),
        other => format!("{other:?}"),
    }
}

/// Streams `tokens` through one sequence bounded by `bound` (a window or H2O).
pub fn run(
    model: &std::sync::Arc<Model>,
    opts: &EngineOptions,
    tokens: &[u32],
    bound: ContextPolicy,
    log_norm: fn(&[f32]) -> (f64, usize),
) -> Result<WindowRun> {
    let (limit, sinks) = limit_and_sinks(bound);
    // Tokens read before the first is scored: a full cache's worth after the sinks.
    let window = limit.saturating_sub(sinks);
    match bound {
        ContextPolicy::Window { window, .. } if window < 16 => {
            bail!("--kv-window {window}: give at least 16 tokens")
        }
        ContextPolicy::HeavyHitters { budget, .. } if window < 16 => {
            bail!("--kv-budget {budget}: give at least 16 tokens more than --kv-sinks")
        }
        ContextPolicy::Window { .. } | ContextPolicy::HeavyHitters { .. } => {}
        ContextPolicy::Stop | ContextPolicy::Shift { .. } => {
            bail!("internal error: a bounded perplexity run needs a window or H2O")
        }
    }
    bound.validate(limit).context(describe(bound))?;
    if limit > model.config().n_ctx_train {
        note!(
            "warning: a bound of {limit} positions is past the {} positions the model was \
             trained on",
            model.config().n_ctx_train
        );
    }
    if tokens.len() <= window + 1 {
        bail!(
            "the text has {} tokens: a windowed run needs more than the window ({window}) to score",
            tokens.len()
        );
    }
    let mut eo = opts.clone();
    eo.n_ctx = limit;
    let mut engine = Engine::new(model.clone(), &eo).context("creating the engine")?;
    let n_blocks = engine.available_blocks();
    let seq = engine.new_sequence();
    if let ContextPolicy::HeavyHitters { .. } = bound {
        engine.track_attention_mass(seq, true)?;
    }
    let batch = engine.max_batch();
    let mut out = WindowRun {
        nll_sum: 0.0,
        nll_sum2: 0.0,
        scored: 0,
        shifts: 0,
        most_blocks: 0,
        n_blocks,
    };
    let mut progress = Progress::default();
    let t0 = std::time::Instant::now();
    let mut fed = 0;
    // The last token predicts nothing: feed all but it.
    let total = tokens.len() - 1;
    while fed < total {
        let len = engine.sequence_len(seq)?;
        if len == limit {
            bound
                .make_room_in(&mut engine, seq, 1, limit)
                .with_context(|| format!("making room in {}", describe(bound)))?;
            out.shifts += 1;
            continue;
        }
        let n = (limit - len).min(batch).min(total - fed);
        let piece = &tokens[fed..fed + n];
        let item = BatchItem {
            seq,
            tokens: piece,
            logits: Logits::All,
        };
        engine
            .forward(&[item], |_, j, row| {
                let t = fed + j;
                if t < window {
                    return;
                }
                let (lse, _) = log_norm(row);
                let v = lse - f64::from(row[tokens[t + 1] as usize]);
                out.nll_sum += v;
                out.nll_sum2 += v * v;
                out.scored += 1;
            })
            .with_context(|| format!("evaluating tokens {fed}..{}", fed + n))?;
        fed += n;
        out.most_blocks = out.most_blocks.max(n_blocks - engine.available_blocks());
        progress.update(
            &format!(
                "perplexity: {fed}/{total} tokens, {}, estimate {:.4} ({:.1} s)",
                describe(bound),
                (out.nll_sum / out.scored.max(1) as f64).exp(),
                t0.elapsed().as_secs_f64()
            ),
            false,
        );
    }
    progress.clear();
    engine.free_sequence(seq)?;
    if engine.available_blocks() != n_blocks {
        bail!("internal error: the window left blocks held");
    }
    Ok(out)
}
