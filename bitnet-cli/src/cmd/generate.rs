//! `bitnet generate -m MODEL.gguf -p "prompt" -n 128`: streams the continuation as it is
//! produced (whole UTF-8 only) and ends with a line of figures on stderr: load time, prompt
//! tokens/s, generation tokens/s, peak memory. A closed pipe ends it quietly.

use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use bitnet_core::model::{Engine, generate};
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::scheduler::{GenParams, Scheduler, SchedulerOptions};

use super::bench::{peak_rss, profile_table};
use super::common::{ModelArgs, load_model};
use crate::output::human_bytes;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// The prompt.
    #[arg(short = 'p', long)]
    pub prompt: String,
    /// Tokens to generate at most.
    #[arg(short = 'n', long = "n-predict", default_value_t = 128)]
    pub n_predict: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Stop when this text appears (repeatable); it is not printed.
    #[arg(long = "stop")]
    pub stop: Vec<String>,
    /// Do not echo the prompt before the continuation.
    #[arg(long)]
    pub no_echo: bool,
    /// Print where decode time goes per op kind at the end.
    #[arg(long)]
    pub profile: bool,
    #[command(flatten)]
    pub model_args: ModelArgs,
}

#[derive(Debug, Clone, clap::Args)]
pub struct SamplingArgs {
    /// Temperature; 0 = greedy.
    #[arg(long = "temp", default_value_t = 0.8)]
    pub temperature: f32,
    /// Greedy decoding (same as --temp 0).
    #[arg(long)]
    pub greedy: bool,
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    /// Sampler seed (same seed, same output).
    #[arg(short = 's', long, default_value_t = 42)]
    pub seed: u64,
}

impl SamplingArgs {
    pub fn config(&self) -> SamplerConfig {
        SamplerConfig {
            temperature: if self.greedy { 0.0 } else { self.temperature },
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            seed: self.seed,
            logit_bias: Vec::new(),
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    let opts = args.model_args.load_options()?;
    let engine_opts = args.model_args.engine_options();
    let model = load_model(&args.model, &opts)?;
    let tokenizer = model
        .tokenizer()
        .context("the model file has no tokenizer (tokenizer.ggml.* keys)")?;
    let prompt_tokens = tokenizer.encode(&args.prompt, true, false);
    if prompt_tokens.is_empty() {
        bail!("the prompt is empty after tokenization");
    }
    let mut engine = Engine::new(model.clone(), &engine_opts).context("creating the engine")?;
    if prompt_tokens.len() >= engine.max_seq_len() {
        bail!(
            "the prompt has {} tokens but the context holds {}: shorten it or raise -c",
            prompt_tokens.len(),
            engine.max_seq_len()
        );
    }
    engine.set_profiling(args.profile);
    let threads = engine.threads();
    let mut sched = Scheduler::new(engine, SchedulerOptions::default());
    let params = GenParams {
        max_tokens: args.n_predict,
        sampler: args.sampling.config(),
        stop: args.stop.clone(),
        ..GenParams::default()
    };

    let stdout = io::stdout();
    let mut out = stdout.lock();
    if !args.no_echo {
        out.write_all(args.prompt.as_bytes())?;
        out.flush()?;
    }
    let mut pipe_error: Option<io::Error> = None;
    let (_, stats) = generate(&mut sched, &prompt_tokens, params, |text| {
        match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => true,
            Err(e) => {
                pipe_error = Some(e);
                false
            }
        }
    })
    .context("generating")?;
    if let Some(e) = pipe_error {
        return Err(e.into());
    }
    writeln!(out)?;
    out.flush()?;

    let load = model.load_stats();
    eprintln!(
        "load {:.2}s | prompt {} tok, {:.2} tok/s | generated {} tok, {:.2} tok/s | stop: {} | peak RSS {} | {} threads, {} kernels, head {}",
        load.load_secs,
        stats.prompt_tokens,
        stats.prompt_tps(),
        stats.gen_tokens,
        stats.gen_tps(),
        stats.stop_reason.name(),
        human_bytes(peak_rss()),
        threads,
        model.isa().name(),
        model.head_mode().name(),
    );
    if args.profile {
        let mut err = io::stderr().lock();
        writeln!(err, "profile (prompt and generation):")?;
        profile_table::write_profile(&mut err, sched.engine().profile(), stats.gen_tokens + 1)?;
    }
    Ok(())
}
