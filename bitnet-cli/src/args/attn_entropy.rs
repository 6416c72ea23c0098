//! `--attn-entropy [--attn-entropy-every N]`: sample the mean attention entropy of each layer
//! on decode steps (see `Engine::attention_entropy`), a health signal beside the 3-gram
//! repetition rate: attention collapsing onto a few positions (entropy falling) or spreading
//! flat (rising towards ln of the context) tends to come before a 1-bit model loops or
//! rambles. Shared by `generate` (shown with its health figures), `chat` (in `/stats`) and
//! `serve` (the `bitnet_attention_entropy_nats{layer}` gauge). Off by default: it then costs
//! nothing.

use anyhow::{Result, bail};
use bitnet_core::engine::{Engine, EngineOptions};

#[derive(Debug, Clone, Default, clap::Args)]
pub struct AttnEntropyArgs {
    /// Sample the mean Shannon entropy (nats) of each layer's attention on decode steps,
    /// averaged over heads and, across samples, by an exponential moving average (weight
    /// 1/8): shown with generate's health figures, chat's /stats, serve's /metrics
    /// (bitnet_attention_entropy_nats{layer="i"}).
    #[arg(long)]
    pub attn_entropy: bool,
    /// With --attn-entropy: sample every N-th decode step.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 16,
        requires = "attn_entropy"
    )]
    pub attn_entropy_every: usize,
}

impl AttnEntropyArgs {
    /// Sets the engine option the flags ask for.
    pub fn apply(&self, opts: &mut EngineOptions) -> Result<()> {
        if !self.attn_entropy {
            return Ok(());
        }
        if self.attn_entropy_every == 0 {
            bail!("--attn-entropy-every takes a number of decode steps >= 1");
        }
        opts.attn_entropy_every = self.attn_entropy_every;
        Ok(())
    }
}

/// The entropy figures for a human, `None` when off: `attention entropy (nats) by layer:
/// 2.31 1.87 ... (12 samples)`, or a note that nothing was sampled yet.
pub fn entropy_figures(engine: &Engine) -> Option<String> {
    if engine.attention_entropy_every() == 0 {
        return None;
    }
    Some(match engine.attention_entropy() {
        None => "attention entropy: no decode step sampled yet".to_string(),
        Some(h) => {
            let layers: Vec<String> = h.iter().map(|v| format!("{v:.2}")).collect();
            format!(
                "attention entropy (nats) by layer: {} ({} samples, every {} steps)",
                layers.join(" "),
                engine.attention_entropy_samples(),
                engine.attention_entropy_every()
            )
        }
    })
}
