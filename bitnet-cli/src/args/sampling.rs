//! The sampler flags (`--temp`, `--top-k`, `--top-p`, `--min-p`, penalties, `-s`) shared by
//! `generate` and `chat`, checked before anything is loaded, and `--ignore-eos` as
//! llama.cpp does it.

use anyhow::{Context, Result};
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::tokenizer::Tokenizer;

/// A sampler seed as given: a number, or -1 (the default) for a fresh random one each run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeedArg {
    Random,
    Fixed(u64),
}

fn parse_seed(s: &str) -> Result<SeedArg, String> {
    match s.trim() {
        "-1" => Ok(SeedArg::Random),
        t => t.parse().map(SeedArg::Fixed).map_err(|_| {
            format!("{s:?} is not a seed: give a number >= 0, or -1 for a random seed")
        }),
    }
}

/// A seed that differs between runs without a random-number crate: the standard library's
/// per-process random hashing keys, mixed with the clock.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.write_u32(std::process::id());
    h.finish()
}

#[derive(Debug, Clone, clap::Args)]
pub struct SamplingArgs {
    /// Temperature; 0 or below = greedy (as llama.cpp treats a negative temperature).
    #[arg(long = "temp", default_value_t = 0.8, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Greedy decoding (same as --temp 0).
    #[arg(long)]
    pub greedy: bool,
    /// Keep only the K most likely tokens (0 = all).
    #[arg(long, value_name = "K", default_value_t = 40)]
    pub top_k: usize,
    /// Keep the most likely tokens whose probabilities sum to P (nucleus; 1 = all).
    #[arg(long, value_name = "P", default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens less likely than P times the most likely one (0 = off).
    #[arg(long, value_name = "P", default_value_t = 0.05)]
    pub min_p: f32,
    /// Penalise tokens among the last --repeat-last-n: a positive logit is divided by this,
    /// a negative one multiplied (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// How many recent tokens --repeat-penalty and the other penalties look at.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Subtract this times a token's count among the last --repeat-last-n from its logit
    /// (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// Subtract this from the logit of every token among the last --repeat-last-n (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    /// Sampler seed (same seed, same output); -1 = a random seed, printed with the figures.
    #[arg(
        short = 's',
        long,
        default_value = "-1",
        allow_negative_numbers = true,
        value_parser = parse_seed
    )]
    pub seed: SeedArg,
}

impl SamplingArgs {
    /// The sampler settings; `seed` is the one actually used (see [`Self::seed`]).
    pub fn config(&self, seed: u64) -> SamplerConfig {
        // llama.cpp clamps a negative temperature to 0, which means greedy. NaN is left for
        // the sampler's validation to refuse.
        let temperature = if self.greedy || self.temperature < 0.0 {
            0.0
        } else {
            self.temperature
        };
        SamplerConfig {
            temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            seed,
            logit_bias: Vec::new(),
        }
    }

    /// Refuses values the sampler would refuse (`--temp nan`, `--top-p 0`, ...) before
    /// anything is loaded, instead of after the model is read.
    pub fn check(&self) -> Result<()> {
        // No logit bias is set from the command line here, so the vocabulary size is moot.
        self.config(0)
            .validate(usize::MAX)
            .context("sampling settings")
    }

    /// The seed given, or a fresh random one.
    pub fn seed(&self) -> u64 {
        match self.seed {
            SeedArg::Fixed(s) => s,
            SeedArg::Random => random_seed(),
        }
    }
}

/// `--ignore-eos` as llama.cpp does it: every end-of-generation token gets a logit bias of
/// minus infinity, so it is never sampled.
pub fn ban_eog(cfg: &mut SamplerConfig, tokenizer: &Tokenizer) {
    cfg.logit_bias.extend(
        tokenizer
            .eog_ids()
            .iter()
            .map(|&id| (id, f32::NEG_INFINITY)),
    );
}
