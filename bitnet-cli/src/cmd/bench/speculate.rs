//! Speculative decoding's figures, two tests apart from the pp/tg suite:
//!
//! - `--verify 2,3,5,9`: the cost of one pass over k positions of one sequence (what a
//!   verification of k - 1 draft tokens costs) against a one-position decode step, in
//!   interleaved repetitions on one engine; with the acceptance a draft gets, this is the
//!   speed-up a model of that shape can have.
//! - `--model-draft FILE` or `--lookup-ngram N` with `--spec-text FILE`: generation from
//!   prompts cut from the text (or, with `--spec-task copy`, prompts that hold a passage the
//!   answer repeats), with and without speculation in turn, at each `--spec-temp`: the
//!   acceptance, mean accepted length and tokens per second of both, and for greedy runs
//!   whether the outputs are identical.

use std::io::{self, Write};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use bitnet_core::engine::{BatchItem, Engine, Logits};
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::scheduler::{GenParams, GenStats, Scheduler, SchedulerOptions, generate};

use super::args::{Args, SpecTask, model_args};
use super::progress::{clear_progress, progress, rep_label};
use crate::args::model::parse_isa;
use crate::output::note;
use crate::setup::load_model;

/// Whether `args` asks for a speculative decoding test (or gives one of its flags, which
/// [`run`] then checks rather than the pp/tg suite ignoring it).
pub fn wanted(args: &Args) -> bool {
    !args.verify.is_empty() || args.speculate.params().is_some() || args.spec_text.is_some()
}

pub fn run(args: &Args) -> Result<()> {
    if args.spec_text.is_some() && args.speculate.params().is_none() {
        bail!(
            "--spec-text measures speculative decoding: give --model-draft FILE or --lookup-ngram N"
        );
    }
    if args.spec_prompts == 0 {
        bail!("--spec-prompts must be at least 1");
    }
    let Some(path) = args.models.first() else {
        bail!("give the model to measure with -m");
    };
    if args.models.len() > 1 || args.threads.len() > 1 || args.kernels.len() > 1 {
        bail!("the speculative decoding tests take one model, one -t and one --kernel");
    }
    let model_args = model_args(
        args,
        args.threads.first().copied(),
        args.kernels.first().cloned(),
    );
    parse_isa(model_args.kernel.as_deref())?;
    let model = load_model(path, &model_args.load_options()?)?;
    let opts = model_args.engine_options();
    let mut out = io::stdout().lock();
    if !args.verify.is_empty() {
        let engine = Engine::new(model.clone(), &opts).context("creating the engine")?;
        verify_costs(args, engine, &mut out)?;
    }
    if args.speculate.params().is_some() {
        args.speculate.check(opts.batch)?;
        let draft = args.speculate.load(&model_args, &opts)?;
        let engine = Engine::new(model.clone(), &opts).context("creating the engine")?;
        let mut sched = Scheduler::new(engine, SchedulerOptions { max_running: 1 });
        if let Some(d) = &draft {
            d.attach(&mut sched)?;
        }
        generation(args, &mut sched, &mut out)?;
    }
    Ok(())
}

/// `--verify`: one pass over k positions after a context of `-d` tokens (64 when 0),
/// against one position, interleaved.
fn verify_costs(args: &Args, mut engine: Engine, out: &mut impl Write) -> Result<()> {
    let mut ks: Vec<usize> = args.verify.clone();
    ks.retain(|&k| k > 0);
    ks.insert(0, 1);
    ks.dedup();
    let max_k = ks.iter().copied().max().unwrap_or(1);
    if max_k > engine.max_batch() {
        bail!(
            "--verify {max_k}: a pass takes {} positions at most",
            engine.max_batch()
        );
    }
    let depth = args.depth.first().copied().filter(|&d| d > 0).unwrap_or(64);
    if depth + max_k > engine.max_seq_len() {
        bail!(
            "a context of {depth} and {max_k} positions do not fit the {}-token cache",
            engine.max_seq_len()
        );
    }
    let n_vocab = engine.n_vocab() as u32;
    let seq = engine.new_sequence();
    let fill: Vec<u32> = (0..depth as u32)
        .map(|i| (i * 7919 + 13) % n_vocab)
        .collect();
    for chunk in fill.chunks(engine.max_batch()) {
        engine.forward(
            &[BatchItem {
                seq,
                tokens: chunk,
                logits: Logits::None,
            }],
            |_, _, _| {},
        )?;
    }
    let tokens: Vec<u32> = (0..max_k as u32)
        .map(|i| (i * 104_729 + 7) % n_vocab)
        .collect();
    let mut secs: Vec<Vec<f64>> = vec![Vec::new(); ks.len()];
    let mut sink = 0.0f32;
    for rep in 0..args.warmup + args.reps {
        let order: Vec<usize> = if rep % 2 == 0 {
            (0..ks.len()).collect()
        } else {
            (0..ks.len()).rev().collect()
        };
        for i in order {
            progress(&format!(
                "verify {} positions, {}",
                ks[i],
                rep_label(rep, args.warmup, args.reps)
            ));
            let t = Instant::now();
            engine.forward(
                &[BatchItem {
                    seq,
                    tokens: &tokens[..ks[i]],
                    logits: Logits::All,
                }],
                |_, _, row| sink += row[0],
            )?;
            let s = t.elapsed().as_secs_f64();
            engine.truncate(seq, depth)?;
            if rep >= args.warmup {
                secs[i].push(s);
            }
        }
    }
    clear_progress();
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let base = median(&mut secs[0].clone());
    writeln!(
        out,
        "verification cost, one sequence at depth {depth}, {} threads, {} rounds (median; \
         interleaved){}",
        engine.threads(),
        args.reps,
        if sink.is_nan() { " [NaN logits]" } else { "" }
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "| positions in the pass | ms | cost vs one decode step | positions per decode-step time |"
    )?;
    writeln!(out, "|---:|---:|---:|---:|")?;
    for (k, s) in ks.iter().zip(secs.iter_mut()) {
        let m = median(s);
        writeln!(
            out,
            "| {k} | {:.2} | {:.2}x | {:.2} |",
            m * 1e3,
            m / base,
            *k as f64 * base / m
        )?;
    }
    writeln!(out)?;
    Ok(())
}

/// `--spec-text`: the same prompts with and without speculation, alternating.
fn generation(args: &Args, sched: &mut Scheduler, out: &mut impl Write) -> Result<()> {
    let Some(text_path) = &args.spec_text else {
        bail!("give the prompts' text with --spec-text FILE");
    };
    let text = std::fs::read_to_string(text_path)
        .with_context(|| format!("reading {}", text_path.display()))?;
    let model = sched.engine().model().clone();
    let tk = model.tokenizer().context("the model has no tokenizer")?;
    let all = tk.encode(&text, false, false);
    let piece = args.spec_prompt_tokens.max(4);
    let n_gen = args
        .n_gen
        .first()
        .copied()
        .filter(|&n| n > 0)
        .unwrap_or(128);
    let stride = (all.len() / args.spec_prompts).max(piece);
    let mut prompts: Vec<Vec<u32>> = Vec::new();
    for i in 0..args.spec_prompts {
        let start = i * stride;
        if start + piece > all.len() {
            break;
        }
        let passage = &all[start..start + piece];
        let mut p: Vec<u32> = Vec::new();
        if tk.add_bos() {
            p.push(tk.bos_id().unwrap_or(0));
        }
        match args.spec_task {
            SpecTask::Plain => p.extend_from_slice(passage),
            SpecTask::Copy => {
                p.extend_from_slice(passage);
                p.extend_from_slice(passage);
                p.extend_from_slice(&passage[..piece / 3]);
            }
        }
        prompts.push(p);
    }
    if prompts.is_empty() {
        bail!(
            "{} is too short for one prompt of {piece} tokens",
            text_path.display()
        );
    }
    let max_len = sched.engine().max_seq_len();
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    if longest + n_gen > max_len {
        bail!(
            "prompts of {longest} tokens and {n_gen} generated do not fit the {max_len}-token \
             context (lower --spec-prompt-tokens or -n)"
        );
    }
    let spec = args.speculate.params().expect("checked by the caller");
    writeln!(
        out,
        "speculative decoding: {} prompts ({:?}, {} tokens of {}), {n_gen} tokens each, \
         {} threads, {} rounds; draft {}",
        prompts.len(),
        args.spec_task,
        piece,
        text_path.display(),
        sched.engine().threads(),
        args.reps,
        match &args.speculate.model_draft {
            Some(p) => format!("model {}", p.display()),
            None => format!("lookup n-gram {}", args.speculate.lookup_ngram.unwrap_or(0)),
        }
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "| temp | tok/s without | tok/s with | speed-up | acceptance | tokens a verification | greedy identical |"
    )?;
    writeln!(out, "|---:|---:|---:|---:|---:|---:|---|")?;
    for &temp in &args.spec_temp {
        let (mut secs, mut toks) = ([0.0f64; 2], [0usize; 2]);
        let mut spec_stats = (0usize, 0usize, 0usize);
        let mut identical = true;
        for rep in 0..args.warmup + args.reps {
            for (p_i, prompt) in prompts.iter().enumerate() {
                let mut outs: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
                let order = if (rep + p_i) % 2 == 0 { [0, 1] } else { [1, 0] };
                for with in order {
                    progress(&format!(
                        "temp {temp} prompt {} {} {}",
                        p_i + 1,
                        if with == 1 { "with" } else { "without" },
                        rep_label(rep, args.warmup, args.reps)
                    ));
                    let params = GenParams {
                        max_tokens: n_gen,
                        sampler: SamplerConfig {
                            temperature: temp,
                            seed: (rep * 1000 + p_i) as u64,
                            ..SamplerConfig::default()
                        },
                        ignore_eos: true,
                        speculate: (with == 1).then(|| spec.clone()),
                        ..GenParams::default()
                    };
                    let t = Instant::now();
                    let (_, stats): (_, GenStats) = generate(sched, prompt, params, |_| true)?;
                    let s = t.elapsed().as_secs_f64();
                    // Forget the prompt: each run reads it afresh, as the other did.
                    sched.clear_prefix_cache();
                    if rep >= args.warmup {
                        secs[with] += s - stats.prompt_secs;
                        toks[with] += stats.gen_tokens.saturating_sub(1);
                        if with == 1 {
                            spec_stats.0 += stats.draft_tokens;
                            spec_stats.1 += stats.draft_accepted;
                            spec_stats.2 += stats.draft_verifies;
                        }
                    }
                    outs[with] = stats.tokens;
                }
                identical &= outs[0] == outs[1];
            }
        }
        clear_progress();
        let tps = |i: usize| toks[i] as f64 / secs[i].max(1e-9);
        let (drafted, accepted, verifies) = spec_stats;
        writeln!(
            out,
            "| {temp} | {:.1} | {:.1} | {:.2}x | {:.1}% | {:.2} | {} |",
            tps(0),
            tps(1),
            tps(1) / tps(0),
            100.0 * accepted as f64 / drafted.max(1) as f64,
            (accepted + verifies) as f64 / verifies.max(1) as f64,
            if temp == 0.0 {
                if identical { "yes" } else { "NO" }
            } else {
                "-"
            }
        )?;
        if temp == 0.0 && !identical {
            note!("greedy output with speculation differs from greedy output without: a bug");
        }
    }
    writeln!(out)?;
    Ok(())
}
