//! `bitnet generate -m MODEL.gguf -p "prompt" -n 128`: streams the continuation as it is
//! produced (whole UTF-8 only) and ends with a line of figures on stderr: load time, prompt
//! tokens/s, generation tokens/s, peak memory, the seed. A closed pipe ends it quietly.
//! Options follow llama.cpp's where they overlap (`-f`, `-n -1`, `--temp`, `-s -1`,
//! `--ignore-eos`, `-c/--ctx-size`, `-b/--batch-size`, `-np`). `--parallel N` generates several
//! prompts (`-p` repeated, or `-f FILE` with one prompt a line) together on one engine and
//! prints each answer in order. Ctrl-C stops a single prompt's run where it is (reading the
//! prompt or generating), prints the figures of what was done, and exits with status 130.

use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use bitnet_core::constrain::Constraint;
use bitnet_core::kv::{PoolStats, SeqId};
use bitnet_core::scheduler::{
    Event, GenParams, GenStats, Scheduler, SchedulerOptions, StopReason, generate_until,
};
use bitnet_core::tokenizer::Tokenizer;

use crate::args::attn_entropy::{AttnEntropyArgs, entropy_figures};
use crate::args::clean_input::{self, CleanInputArgs};
use crate::args::context::ContextArgs;
use crate::args::grammar::GrammarArgs;
use crate::args::model::ModelArgs;
use crate::args::prompt::PromptArgs;
use crate::args::sampling::{SamplingArgs, ban_eog};
use crate::args::speculate::{DraftModel, SpeculateArgs, draft_line};
use crate::interrupt;
use crate::output::{human_bytes, note};
use crate::report::{self, peak_rss};
use crate::setup::Setup;
use crate::setup::limits::{cut_short_note, prompt_too_long};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The GGUF model file (models/shakespeare.gguf ships with the repository).
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    #[command(flatten)]
    pub prompt: PromptArgs,
    #[command(flatten)]
    pub clean: CleanInputArgs,
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
    pub grammar: GrammarArgs,
    #[command(flatten)]
    pub context: ContextArgs,
    #[command(flatten)]
    pub attn_entropy: AttnEntropyArgs,
    #[command(flatten)]
    pub speculate: SpeculateArgs,
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

impl NPredict {
    /// The tokens asked for, `None` without a bound.
    pub fn bound(self) -> Option<usize> {
        match self {
            NPredict::AtMost(n) => Some(n),
            NPredict::UntilFull => None,
        }
    }
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

pub fn run(args: Args) -> Result<()> {
    if let Some(n) = args.parallel {
        return run_parallel(&args, n);
    }
    let original = args.prompt.required_text()?;
    let (prompt, cleaned) = args.clean.apply(&original);
    let (setup, mut encoded, draft) = prepare(&args, std::slice::from_ref(&prompt), false)?;
    let prompt_tokens = encoded.remove(0);
    let model = &setup.model;
    let tokenizer = setup.tokenizer()?;
    if let Some(mode) = args.clean.clean_input {
        let (before, _) = clean_input::token_counts(tokenizer, &original, &prompt);
        eprintln!(
            "{}",
            clean_input::describe(mode, &cleaned, before, prompt_tokens.len())
        );
    }
    let constraint = args.grammar.constraint(model)?;
    let engine_t0 = std::time::Instant::now();
    let mut engine = setup.engine()?;
    let engine_secs = engine_t0.elapsed().as_secs_f64();
    engine.set_profiling(args.profile);
    let threads = engine.threads();
    let mut sched = Scheduler::new(engine, SchedulerOptions::default());
    if let Some(d) = &draft {
        d.attach(&mut sched)?;
    }
    let seed = args.sampling.seed();
    let params = gen_params(&args, seed, tokenizer, prompt_tokens.len(), constraint)?;
    let start_blocks = sched.engine().pool_stats();

    let stdout = io::stdout();
    let mut out = stdout.lock();
    if !args.no_echo {
        out.write_all(prompt.as_bytes())?;
        out.flush()?;
    }
    let mut pipe_error: Option<io::Error> = None;
    // Ctrl-C stops the run with its figures, as llama.cpp does, instead of ending it bare.
    interrupt::catch(true);
    let generated = generate_until(
        &mut sched,
        &prompt_tokens,
        params,
        |text| {
            if interrupt::pending() {
                return false;
            }
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                Ok(()) => true,
                Err(e) => {
                    pipe_error = Some(e);
                    false
                }
            }
        },
        &interrupt::pending,
    );
    let interrupted = interrupt::take();
    interrupt::catch(false);
    let (_, mut stats) = generated.context("generating")?;
    if let Some(e) = pipe_error {
        return Err(e.into());
    }
    if interrupted {
        stats.stop_reason = StopReason::Cancelled;
    }
    writeln!(out)?;
    out.flush()?;

    let load = model.load_stats();
    let asked = stats.prompt_tokens - stats.cached_tokens;
    let prompt_read = if stats.prompt_read < asked {
        format!(
            "{} of {}",
            stats.prompt_read + stats.cached_tokens,
            stats.prompt_tokens
        )
    } else {
        stats.prompt_tokens.to_string()
    };
    note!(
        "load {:.2}s | prompt {prompt_read} tok, {:.2} tok/s | generated {} tok, {:.2} tok/s | stop: {} | peak RSS {} | {}, {} kernels, head {} | seed {seed}",
        load.load_secs,
        stats.prompt_tps(),
        stats.gen_tokens,
        stats.gen_tps(),
        stats.stop_reason.name(),
        human_bytes(peak_rss()),
        crate::output::count(threads, "thread"),
        model.isa().name(),
        model.head_mode().name(),
    );
    if let Some(line) = context_cut(&args, &stats, sched.engine().max_seq_len()) {
        note!("{line}");
    }
    if stats.constraint_masks > 0 {
        note!("{}", mask_line(&stats));
    }
    if let Some(line) = draft_line(&stats) {
        note!("{line}");
    }
    let entropy = entropy_figures(sched.engine());
    if args.verbose {
        let mut line = health_line(&stats, start_blocks, sched.engine().pool_stats());
        if let Some(h) = &entropy {
            line.push_str(" | ");
            line.push_str(h);
        }
        note!("{line}");
        note!("{}", report::load::phases_line(load, engine_secs));
        note!(
            "{}",
            report::load::memory_line(&load.memory, sched.engine().kv().bytes(), peak_rss())
        );
    } else if let Some(h) = &entropy {
        note!("{h}");
    }
    if args.profile {
        // stderr may be a closed pipe too: the run itself succeeded, so that is not an error.
        let mut err = io::stderr().lock();
        let _ = writeln!(err, "profile (prompt and generation):").and_then(|()| {
            report::profile::write_profile(&mut err, sched.engine().profile(), stats.gen_tokens + 1)
        });
    }
    if interrupted {
        note!("interrupted");
        std::process::exit(130);
    }
    Ok(())
}

/// Loads the model and encodes `prompts`, saying before the engine allocates anything
/// what stops the run: an empty prompt, a context the machine cannot hold, a prompt that
/// leaves no room (unless a context policy shifts). With `numbered` (`--parallel`), the
/// context is checked first and errors name the prompt; one prompt is checked for emptiness
/// before the context.
fn prepare(
    args: &Args,
    prompts: &[String],
    numbered: bool,
) -> Result<(Setup, Vec<Vec<u32>>, Option<DraftModel>)> {
    args.sampling.check()?;
    let setup = Setup::load(&args.model, &args.model_args, Some(&args.attn_entropy))?;
    setup.warn_if_embedding_model();
    args.speculate.check(setup.engine_opts.batch)?;
    let tokenizer = setup.tokenizer()?;
    let checked = if numbered {
        Some(setup.check_context()?)
    } else {
        None
    };
    let encoded: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| tokenizer.encode(p, true, false))
        .collect();
    if !numbered && encoded.iter().any(Vec::is_empty) {
        bail!("the prompt is empty after tokenization");
    }
    let n_ctx = match checked {
        Some(n) => n,
        None => setup.check_context()?,
    };
    for (i, t) in encoded.iter().enumerate() {
        if t.is_empty() {
            bail!("prompt {} is empty after tokenization", i + 1);
        }
        if t.len() >= n_ctx && !args.context.shifts() {
            let e = prompt_too_long(t.len(), n_ctx, args.n_predict.bound());
            return Err(if numbered {
                e.context(format!("prompt {}", i + 1))
            } else {
                e
            });
        }
    }
    let draft = args.speculate.load(&args.model_args, &setup.engine_opts)?;
    Ok((setup, encoded, draft))
}

/// What to say when the full context (`n_ctx` positions a sequence) stopped a generation
/// before the `-n` tokens asked for.
fn context_cut(args: &Args, stats: &GenStats, n_ctx: usize) -> Option<String> {
    let asked = args.n_predict.bound()?;
    if stats.stop_reason != StopReason::ContextFull {
        return None;
    }
    cut_short_note(stats.gen_tokens, asked, stats.prompt_tokens, n_ctx)
}

/// What structured output cost: the token masks and their mean time.
fn mask_line(stats: &GenStats) -> String {
    format!(
        "grammar: {} token masks, {:.1} us each",
        stats.constraint_masks,
        stats.constraint_secs * 1e6 / stats.constraint_masks.max(1) as f64
    )
}

/// The request settings of the command line (`seed` for the first request).
fn gen_params(
    args: &Args,
    seed: u64,
    tokenizer: &Tokenizer,
    prompt_len: usize,
    constraint: Option<Constraint>,
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
        constraint,
        speculate: args.speculate.params(),
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
    let originals = args.prompt.texts()?;
    let prompts: Vec<String> = originals.iter().map(|p| args.clean.apply(p).0).collect();
    let (setup, encoded, draft) = prepare(args, &prompts, true)?;
    if let Some(mode) = args.clean.clean_input {
        let tok = setup.tokenizer()?;
        for (i, (o, p)) in originals.iter().zip(&prompts).enumerate() {
            let (before, after) = clean_input::token_counts(tok, o, p);
            let r = args.clean.apply(o).1;
            eprintln!(
                "prompt {}: {}",
                i + 1,
                clean_input::describe(mode, &r, before, after)
            );
        }
    }
    let model = &setup.model;
    let tokenizer = setup.tokenizer()?;
    let constraint = args.grammar.constraint(model)?;
    let engine = setup.engine()?;
    let threads = engine.threads();
    let mut sched = Scheduler::new(
        engine,
        SchedulerOptions {
            max_running: parallel,
        },
    );
    if let Some(d) = &draft {
        d.attach(&mut sched)?;
    }
    let seed = args.sampling.seed();
    let start_blocks = sched.engine().pool_stats();
    let ids: Vec<SeqId> = encoded
        .iter()
        .enumerate()
        .map(|(i, t)| {
            // Each prompt its own stream of randomness, reproducible from the one seed.
            let p = gen_params(
                args,
                seed.wrapping_add(i as u64),
                tokenizer,
                t.len(),
                constraint.clone(),
            )?;
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
                Event::Token { .. } | Event::Embedding { .. } => {}
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
        "{}, {parallel} at a time | prompt {prompt_toks} tok | generated {generated} tok in {secs:.2}s, {:.2} tok/s together | peak RSS {} | {}, {} kernels | seed {seed}",
        crate::output::count(prompts.len(), "prompt"),
        if secs > 0.0 {
            generated as f64 / secs
        } else {
            0.0
        },
        human_bytes(peak_rss()),
        crate::output::count(threads, "thread"),
        model.isa().name(),
    );
    if let Some(h) = entropy_figures(sched.engine()) {
        note!("{h} (all prompts together)");
    }
    let n_ctx = sched.engine().max_seq_len();
    for (i, st) in stats.iter().enumerate() {
        if let Some(line) = st.as_ref().and_then(|st| context_cut(args, st, n_ctx)) {
            note!("prompt {}: {line}", i + 1);
        }
    }
    if args.verbose {
        let end_blocks = sched.engine().pool_stats();
        for (i, st) in stats.iter().enumerate() {
            if let Some(st) = st {
                note!(
                    "prompt {}: {}",
                    i + 1,
                    health_line(st, start_blocks, end_blocks)
                );
                if let Some(line) = draft_line(st) {
                    note!("prompt {}: {line}", i + 1);
                }
            }
        }
    }
    Ok(())
}
