//! `bitnet generate -m MODEL.gguf -p "prompt" -n 128`: streams the continuation as it is
//! produced (whole UTF-8 only) and ends with a line of figures on stderr: load time, prompt
//! tokens/s, generation tokens/s, peak memory, the seed. A closed pipe ends it quietly.
//! Options follow llama.cpp's where they overlap (`-f`, `-n -1`, `--temp`, `-s -1`,
//! `--ignore-eos`, `-c/--ctx-size`, `-b/--batch-size`, `-np`). `--parallel N` generates several
//! prompts (`-p` repeated, or `-f FILE` with one prompt a line) together on one engine and
//! prints each answer in order.

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use bitnet_core::kv::PoolStats;
use bitnet_core::model::{Engine, EngineOptions, GenStats, Model, SeqId, generate};
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::scheduler::{Event, GenParams, Scheduler, SchedulerOptions};
use bitnet_core::tokenizer::Tokenizer;

use super::attn_entropy_args::{AttnEntropyArgs, entropy_figures};
use super::bench::{peak_rss, profile_table};
use super::common::{ModelArgs, load_model};
use super::context_args::ContextArgs;
use super::limits::{check_context, prompt_too_long};
use super::load_figures;
use super::prompt::PromptArgs;
use crate::output::{human_bytes, note};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Tokens to generate at most; -1: until the context is full.
    #[arg(
        short = 'n',
        long = "n-predict",
        default_value = "128",
        allow_negative_numbers = true,
        value_parser = parse_n_predict
    )]
    pub n_predict: NPredict,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Stop when this text appears (repeatable); it is not printed.
    #[arg(long = "stop", allow_hyphen_values = true)]
    pub stop: Vec<String>,
    /// Keep generating past end-of-generation tokens (they are never sampled).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Do not echo the prompt before the continuation.
    #[arg(long)]
    pub no_echo: bool,
    /// Print where decode time goes per op kind at the end.
    #[arg(long)]
    pub profile: bool,
    /// Generate the prompts (several -p, or -f FILE with one prompt a line) together,
    /// at most N at a time (llama.cpp's -np); the answers are printed in order. -c is
    /// shared by all of them.
    #[arg(long = "parallel", visible_alias = "np", value_name = "N")]
    pub parallel: Option<usize>,
    #[command(flatten)]
    pub context: ContextArgs,
    #[command(flatten)]
    pub attn_entropy: AttnEntropyArgs,
    /// Also print the run's health figures: the 3-gram repetition rate of the answer,
    /// positions removed by a context shift or window, the KV pool's blocks, and with
    /// --attn-entropy the attention entropy by layer; then where the load's time went and
    /// where the weights live (`memory: weights in use ... MiB, KV ... MiB`).
    #[arg(short = 'v', long)]
    pub verbose: bool,
    #[command(flatten)]
    pub model_args: ModelArgs,
}

/// How many tokens `-n` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NPredict {
    AtMost(usize),
    /// `-n -1`: until the context is full (or an end-of-generation token, a stop string).
    UntilFull,
}

fn parse_n_predict(s: &str) -> Result<NPredict, String> {
    match s.trim() {
        // llama.cpp: -1 = no limit, -2 = until the context is full; with a bounded context
        // both end when it is full.
        "-1" | "-2" => Ok(NPredict::UntilFull),
        t => t.parse().map(NPredict::AtMost).map_err(|_| {
            format!("{s:?} is not a token count: give a number >= 0, or -1 for \"until the context is full\"")
        }),
    }
}

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

pub fn run(args: Args) -> Result<()> {
    if let Some(n) = args.parallel {
        return run_parallel(&args, n);
    }
    let prompt = args.prompt.required_text()?;
    let (model, engine_opts) = load(&args)?;
    let tokenizer = tokenizer_of(&model)?;
    let prompt_tokens = tokenizer.encode(&prompt, true, false);
    if prompt_tokens.is_empty() {
        bail!("the prompt is empty after tokenization");
    }
    // Said before the engine allocates anything: a prompt that leaves no room, a context
    // the machine cannot hold.
    let n_ctx = check_context(&model, &engine_opts)?;
    if prompt_tokens.len() >= n_ctx && !args.context.shifts() {
        return Err(prompt_too_long(prompt_tokens.len(), n_ctx));
    }
    let engine_t0 = std::time::Instant::now();
    let mut engine = Engine::new(model.clone(), &engine_opts).context("creating the engine")?;
    let engine_secs = engine_t0.elapsed().as_secs_f64();
    engine.set_profiling(args.profile);
    let threads = engine.threads();
    let mut sched = Scheduler::new(engine, SchedulerOptions::default());
    let seed = args.sampling.seed();
    let params = gen_params(&args, seed, tokenizer, prompt_tokens.len())?;
    let start_blocks = sched.engine().kv_stats().pool;

    let stdout = io::stdout();
    let mut out = stdout.lock();
    if !args.no_echo {
        out.write_all(prompt.as_bytes())?;
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
    note!(
        "load {:.2}s | prompt {} tok, {:.2} tok/s | generated {} tok, {:.2} tok/s | stop: {} | peak RSS {} | {} threads, {} kernels, head {} | seed {seed}",
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
    let entropy = entropy_figures(sched.engine());
    if args.verbose {
        let mut line = health_line(&stats, start_blocks, sched.engine().kv_stats().pool);
        if let Some(h) = &entropy {
            line.push_str(" | ");
            line.push_str(h);
        }
        note!("{line}");
        note!("{}", load_figures::phases_line(load, engine_secs));
        note!(
            "{}",
            load_figures::memory_line(
                &load.memory,
                sched.engine().kv_stats().pool.bytes,
                peak_rss()
            )
        );
    } else if let Some(h) = &entropy {
        note!("{h}");
    }
    if args.profile {
        // stderr may be a closed pipe too: the run itself succeeded, so that is not an error.
        let mut err = io::stderr().lock();
        let _ = writeln!(err, "profile (prompt and generation):").and_then(|()| {
            profile_table::write_profile(&mut err, sched.engine().profile(), stats.gen_tokens + 1)
        });
    }
    Ok(())
}

/// The model and the engine settings of the command line.
fn load(args: &Args) -> Result<(Arc<Model>, EngineOptions)> {
    args.sampling.check()?;
    let opts = args.model_args.load_options()?;
    let mut engine_opts = args.model_args.engine_options();
    args.attn_entropy.apply(&mut engine_opts)?;
    Ok((load_model(&args.model, &opts)?, engine_opts))
}

fn tokenizer_of(model: &Model) -> Result<&Tokenizer> {
    model
        .tokenizer()
        .context("the model file has no tokenizer (tokenizer.ggml.* keys)")
}

/// The request settings of the command line (`seed` for the first request).
fn gen_params(
    args: &Args,
    seed: u64,
    tokenizer: &Tokenizer,
    prompt_len: usize,
) -> Result<GenParams> {
    let mut sampler = args.sampling.config(seed);
    if args.ignore_eos {
        ban_eog(&mut sampler, tokenizer);
    }
    let context = args.context.policy(tokenizer.add_bos(), prompt_len)?;
    Ok(GenParams {
        max_tokens: match args.n_predict {
            NPredict::AtMost(n) => n,
            // Generation stops by itself when the context is full.
            NPredict::UntilFull => usize::MAX,
        },
        sampler,
        stop: args.stop.clone(),
        ignore_eos: args.ignore_eos,
        keep: false,
        context,
    })
}

/// `--verbose`'s health figures: what users of 1-bit models watch (a degrading model loops,
/// and loops show as repeated 3-grams), what the context policy removed, and the KV pool
/// before and after (every block back once the answer is done).
pub fn health_line(stats: &GenStats, before: PoolStats, after: PoolStats) -> String {
    let repetition = bitnet_core::health::repetition_rate_3gram(&stats.tokens)
        .map_or_else(|| "-".to_string(), |r| format!("{:.1}%", 100.0 * r));
    format!(
        "health: 3-gram repetition {repetition} | {} positions removed by the context policy | KV blocks in use {} before, {} after, {} in the pool",
        stats.discarded_tokens, before.used, after.used, after.n_blocks
    )
}

/// `--parallel N`: every prompt submitted to one scheduler, at most N decoded together;
/// each answer printed in order once it is complete.
fn run_parallel(args: &Args, parallel: usize) -> Result<()> {
    if parallel == 0 {
        bail!("--parallel must be at least 1");
    }
    let prompts = args.prompt.texts()?;
    let (model, engine_opts) = load(args)?;
    let tokenizer = tokenizer_of(&model)?;
    let n_ctx = check_context(&model, &engine_opts)?;
    let encoded: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| tokenizer.encode(p, true, false))
        .collect();
    for (i, t) in encoded.iter().enumerate() {
        if t.is_empty() {
            bail!("prompt {} is empty after tokenization", i + 1);
        }
        if t.len() >= n_ctx && !args.context.shifts() {
            return Err(prompt_too_long(t.len(), n_ctx))
                .with_context(|| format!("prompt {}", i + 1));
        }
    }
    let engine = Engine::new(model.clone(), &engine_opts).context("creating the engine")?;
    let threads = engine.threads();
    let mut sched = Scheduler::new(
        engine,
        SchedulerOptions {
            max_running: parallel,
        },
    );
    let seed = args.sampling.seed();
    let start_blocks = sched.engine().kv_stats().pool;
    let ids: Vec<SeqId> = encoded
        .iter()
        .enumerate()
        .map(|(i, t)| {
            // Each prompt its own stream of randomness, reproducible from the one seed.
            let p = gen_params(args, seed.wrapping_add(i as u64), tokenizer, t.len())?;
            sched
                .submit(t, p)
                .with_context(|| format!("prompt {}", i + 1))
        })
        .collect::<Result<_>>()?;
    let t0 = std::time::Instant::now();
    let mut texts: Vec<String> = vec![String::new(); ids.len()];
    let mut stats: Vec<Option<GenStats>> = vec![None; ids.len()];
    let index = |seq: SeqId| ids.iter().position(|&s| s == seq);
    while !sched.is_idle() {
        let mut failure = None;
        sched
            .step(&mut |ev| match ev {
                Event::Text { seq, text } => {
                    if let Some(i) = index(seq) {
                        texts[i].push_str(text);
                    }
                }
                Event::Done { seq, stats: st } => {
                    if let Some(i) = index(seq) {
                        stats[i] = Some(st);
                    }
                }
                Event::Error { seq, error } => {
                    let which =
                        index(seq).map_or(format!("{seq}"), |i| format!("prompt {}", i + 1));
                    failure = Some(format!("{which}: {error}"));
                }
                Event::Token { .. } => {}
            })
            .context("generating")?;
        if let Some(f) = failure {
            bail!("generating: {f}");
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let stdout = io::stdout();
    let mut out = stdout.lock();
    for (i, (p, t)) in prompts.iter().zip(&texts).enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        if !args.no_echo {
            out.write_all(p.as_bytes())?;
        }
        writeln!(out, "{t}")?;
    }
    out.flush()?;
    let done: Vec<&GenStats> = stats.iter().flatten().collect();
    let generated: usize = done.iter().map(|s| s.gen_tokens).sum();
    let prompt_toks: usize = done.iter().map(|s| s.prompt_tokens).sum();
    note!(
        "{} prompts, {parallel} at a time | prompt {prompt_toks} tok | generated {generated} tok in {secs:.2}s, {:.2} tok/s together | peak RSS {} | {threads} threads, {} kernels | seed {seed}",
        prompts.len(),
        if secs > 0.0 {
            generated as f64 / secs
        } else {
            0.0
        },
        human_bytes(peak_rss()),
        model.isa().name(),
    );
    if let Some(h) = entropy_figures(sched.engine()) {
        note!("{h} (all prompts together)");
    }
    if args.verbose {
        let end_blocks = sched.engine().kv_stats().pool;
        for (i, st) in stats.iter().enumerate() {
            if let Some(st) = st {
                note!(
                    "prompt {}: {}",
                    i + 1,
                    health_line(st, start_blocks, end_blocks)
                );
            }
        }
    }
    Ok(())
}
