//! `bitnet perplexity --kv-window W [--kv-sinks N]`: perplexity of a text far longer than
//! the cache, read as one stream through a bounded cache (StreamingLLM's attention sinks
//! plus a sliding window). The first `N` tokens stay; when the cache holds `N + W` tokens,
//! the oldest `W / 4` after the sinks are dropped and the rest moved down with their keys
//! re-rotated (see `Engine::shift`), so every position the model sees is below `N + W`
//! and memory stays constant however long the text. Every token after the first `W` is
//! scored (each then has a full window of context).
//!
//! Dropping a quarter at a time rather than a token at a time: each move rounds the moved
//! keys to the cache's format once more, and a token lives through at most four moves.

use anyhow::{Context, Result, bail};
use bitnet_core::model::{BatchItem, Engine, EngineOptions, Logits, Model};

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

/// Streams `tokens` through one sequence with `sinks` kept and a window of `window`.
pub fn run(
    model: &std::sync::Arc<Model>,
    opts: &EngineOptions,
    tokens: &[u32],
    sinks: usize,
    window: usize,
    log_norm: fn(&[f32]) -> (f64, usize),
) -> Result<WindowRun> {
    if window < 16 {
        bail!("--kv-window {window}: give at least 16 tokens");
    }
    let limit = sinks + window;
    if limit > model.config().n_ctx_train {
        note!(
            "warning: --kv-sinks + --kv-window = {limit} is past the {} positions the model \
             was trained on",
            model.config().n_ctx_train
        );
    }
    if tokens.len() <= window + 1 {
        bail!(
            "the text has {} tokens: a windowed run needs more than the window ({window}) to score",
            tokens.len()
        );
    }
    let drop = (window / 4).max(1);
    let mut eo = opts.clone();
    eo.n_ctx = limit;
    let mut engine = Engine::new(model.clone(), &eo).context("creating the engine")?;
    let n_blocks = engine.available_blocks();
    let seq = engine.new_sequence();
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
        let len = engine.sequence(seq)?.len();
        if len == limit {
            engine
                .shift(seq, sinks, drop)
                .context("moving the window")?;
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
                "perplexity: {fed}/{total} tokens, window of {window} + {sinks} sinks, estimate {:.4} ({:.1} s)",
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
