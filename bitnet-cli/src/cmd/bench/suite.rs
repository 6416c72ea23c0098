//! The measurements themselves: one [`Config`] (an engine over the loaded model, at one
//! thread count and KV cache type pair) and the pp, tg and mixed tests run on it. The tg
//! tests take several configurations at once: with `--interleave` their repetitions run in
//! turn, round by round, so a drifting host slows them alike and each row carries its ratios
//! against the first configuration ([`paired`](super::paired)).

use std::fs;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use bitnet_core::constrain::{Constraint, ConstraintError, ConstraintSpec, ConstraintState};
use bitnet_core::engine::{BatchItem, Engine, EngineOptions, Logits};
use bitnet_core::kv::{KvType, SeqId};
use bitnet_core::model::Model;
use bitnet_core::sampling::{Sampler, SamplerConfig};

use super::args::Args;
use super::progress::{clear_progress, progress, rep_label};
use super::report::{BenchRow, TestKind, mean_stddev};
use super::{membw, paired};
use crate::report::{self, peak_rss};
use crate::setup::limits::check_context;

/// One configuration under test: its engine, and what every row measured on it says about
/// it besides the figures.
pub struct Config {
    engine: Engine,
    model_name: String,
    model_bytes: u64,
    n_params: u64,
    kernel: String,
    /// Weight bytes a decoded token streams (the decode bound's denominator).
    bytes_per_token: u64,
    threads: usize,
    mmap: bool,
    bandwidth: Option<membw::Bandwidth>,
    /// The best in-place read of a token's weights during the test being measured (GB/s):
    /// the decode bound's numerator when there is one.
    read_gbs: Option<f64>,
    /// K's and V's format names (`per-layer` under a plan).
    type_k: String,
    type_v: String,
    kv_extra: Option<String>,
    /// The best pp figure at depth 0, which batched tg rows are compared with.
    best_pp: Option<f64>,
    /// `--json-schema`: tg tests sample under it and time its masks.
    constraint: Option<Constraint>,
}

impl Config {
    /// An engine over `model` at `threads` (0: the default) with K/V types `kv`, its KV pool
    /// sized for the largest test of `args`.
    pub fn new(
        args: &Args,
        path: &std::path::Path,
        model: &Arc<Model>,
        threads: usize,
        (type_k, type_v): (KvType, KvType),
        bandwidths: &[membw::Bandwidth],
    ) -> Result<Self> {
        let mut engine_opts = EngineOptions {
            threads,
            pin: !args.no_pin,
            numa: args.numa,
            n_ctx: context_size(args)?,
            batch: batch_size(args)?,
            block_tokens: args.kv_block,
            k_type: type_k,
            v_type: type_v,
            kv_rotate: args.kv_rotate,
            kv_xnor: args.kv_xnor,
            ..EngineOptions::default()
        };
        let plan = match &args.plan {
            Some(path) => {
                let plan = crate::args::model::read_plan(path)?;
                plan.apply(model.config().n_layer, &mut engine_opts)
                    .with_context(|| format!("--plan {}", path.display()))?;
                Some(path.file_name().map_or_else(
                    || path.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                ))
            }
            None => None,
        };
        check_context(model, &engine_opts)?;
        let engine = Engine::new(model.clone(), &engine_opts).context("creating the engine")?;
        let threads = engine.threads();
        let kv_extra = {
            // A side counts as rotated when any layer's is (layers may differ).
            let (rk, rv) = (engine.kv().layer_rotations().into_iter())
                .fold((false, false), |(rk, rv), (k, v)| (rk || k, rv || v));
            let rot = match (rk, rv) {
                (true, true) => Some("rotate kv"),
                (true, false) => Some("rotate k"),
                (false, true) => Some("rotate v"),
                (false, false) => None,
            };
            let plan = plan.as_ref().map(|p| format!("plan {p}"));
            let parts: Vec<&str> = plan
                .as_deref()
                .into_iter()
                .chain(rot)
                .chain(engine.kv_xnor().then_some("xnor"))
                .collect();
            (!parts.is_empty()).then(|| parts.join(" "))
        };
        Ok(Self {
            model_name: path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
            model_bytes: fs::metadata(path).map(|m| m.len()).unwrap_or(0),
            n_params: model.config().n_params(),
            kernel: model.isa().name().to_owned(),
            bytes_per_token: model.decode_bytes_per_token(),
            threads,
            mmap: !args.no_mmap,
            bandwidth: bandwidths.iter().find(|b| b.threads == threads).copied(),
            read_gbs: None,
            type_k: if plan.is_some() {
                "per-layer".into()
            } else {
                type_k.name().to_owned()
            },
            type_v: if plan.is_some() {
                "per-layer".into()
            } else {
                type_v.name().to_owned()
            },
            kv_extra,
            best_pp: None,
            constraint: match &args.json_schema {
                None => None,
                Some(text) => Some(compile_schema(text, model)?),
            },
            engine,
        })
    }

    /// `t2 K q8_0 V q4_0`: what tells this configuration apart from the others of a run.
    fn label(&self) -> String {
        let extra = self
            .kv_extra
            .as_deref()
            .map_or(String::new(), |e| format!(" {e}"));
        format!(
            "t{} K {} V {}{extra}",
            self.threads, self.type_k, self.type_v
        )
    }

    /// The configuration in a progress line: its thread count alone when it is the only
    /// one of its test.
    fn progress_label(&self, interleaved: bool) -> String {
        if interleaved {
            self.label()
        } else {
            format!("t{}", self.threads)
        }
    }

    fn row(&self, test: TestKind, n_tokens: usize, batch: usize, samples: Vec<f64>) -> BenchRow {
        let (mean_tps, stddev_tps) = mean_stddev(&samples);
        // Batched decode streams the weights once per step for all its sequences. The
        // in-place read of those weights bounds decode; the separate buffer's probe stands in
        // only where the read did not run.
        let read_gbs = (test == TestKind::Tg).then_some(self.read_gbs).flatten();
        let gbs = read_gbs.or(self.bandwidth.map(|b| b.gbs));
        let bound_tps = match (test, gbs) {
            (TestKind::Tg, Some(gbs)) if self.bytes_per_token > 0 => {
                Some(batch as f64 * gbs * 1e9 / self.bytes_per_token as f64)
            }
            _ => None,
        };
        BenchRow {
            model: self.model_name.clone(),
            model_bytes: self.model_bytes,
            n_params: self.n_params,
            kernel: self.kernel.clone(),
            threads: self.threads,
            batch,
            mmap: self.mmap,
            test,
            n_tokens,
            samples,
            mean_tps,
            stddev_tps,
            peak_rss_bytes: peak_rss(),
            bytes_per_token: (test == TestKind::Tg).then_some(self.bytes_per_token),
            bound_tps,
            bound_share: bound_tps.map(|b| mean_tps / b),
            read_gbs,
            read_share_paired: None,
            per_seq_tps: (test == TestKind::Tg && batch > 1).then_some(mean_tps / batch as f64),
            pp_share: None,
            n_prompt: None,
            prefill_tps: None,
            decode_tps: None,
            type_k: self.type_k.clone(),
            type_v: self.type_v.clone(),
            kv_extra: self.kv_extra.clone(),
            n_depth: 0,
            paired: None,
            mask_us: None,
            mask_share: None,
        }
    }

    fn n_vocab(&self) -> u32 {
        self.engine.model().n_vocab() as u32
    }
}

/// The KV cache the tests of `args` run in: `-c` when given, else what they need
/// ([`kv_tokens_needed`]). A `-c` too small for a test is refused, naming what would fit.
pub fn context_size(args: &Args) -> Result<usize> {
    let need = kv_tokens_needed(args);
    let Some(ctx) = args.ctx.filter(|&c| c > 0) else {
        return Ok(need);
    };
    // The pool is whole blocks of -c rounded up; a sequence holds at most -c positions.
    let bt = args.kv_block.max(1);
    if need > ctx.div_ceil(bt) * bt || longest_sequence(args) > ctx {
        bail!(
            "-c {ctx} does not hold these tests: they need a KV cache of {need} tokens \
             (-c {need}), or lower -p / -n / -d / --npl"
        );
    }
    Ok(ctx)
}

/// Tokens one forward pass takes: `--batch-size`, else the default; at least the most
/// sequences a tg step decodes together.
pub fn batch_size(args: &Args) -> Result<usize> {
    let max_b = args.batch.iter().copied().max().unwrap_or(1);
    match args.batch_size {
        None => Ok(EngineOptions::default().batch.max(max_b)),
        Some(b) if (b as usize) < max_b => bail!(
            "--batch-size {b} is less than the {max_b} sequences --npl decodes together (a \
             step takes one token of each)"
        ),
        Some(b) => Ok(b as usize),
    }
}

/// The most positions one sequence of the tests of `args` holds.
fn longest_sequence(args: &Args) -> usize {
    let max = |v: &[usize]| v.iter().copied().max().unwrap_or(0);
    let depth = max(&args.depth);
    let single = max(&args.n_prompt).max(max(&args.n_gen)) + depth;
    if args.mixed {
        single.max(max(&args.n_prompt) + max(&args.n_gen))
    } else {
        single
    }
}

/// KV tokens the tests of `args` need at once.
fn kv_tokens_needed(args: &Args) -> usize {
    let max = |v: &[usize]| v.iter().copied().max().unwrap_or(0);
    let depth = max(&args.depth);
    let (pp, tg, b) = (
        max(&args.n_prompt) + depth,
        max(&args.n_gen) + depth,
        max(&args.batch).max(1),
    );
    // A sequence's blocks are its own: round each up to whole blocks of the engine.
    let bt = args.kv_block.max(1);
    let blocks = |n: usize| n.div_ceil(bt);
    let pp_need = blocks(pp + 1) * bt;
    let tg_need = b * blocks(tg + 1) * bt;
    let mixed_need = if args.mixed {
        b * blocks(pp + tg - 2 * depth + 1) * bt
    } else {
        0
    };
    pp_need.max(tg_need).max(mixed_need).max(bt)
}

/// The pp tests of `args` on `cfg`, one row each; remembers the best depth-0 figure.
pub fn run_pp(args: &Args, cfg: &mut Config, rows: &mut Vec<BenchRow>) -> Result<()> {
    let total = args.warmup + args.reps;
    let (name, threads, n_vocab) = (cfg.model_name.clone(), cfg.threads, cfg.n_vocab());
    for &depth in &args.depth {
        for &n in args.n_prompt.iter().filter(|&&n| n > 0) {
            let tokens = pseudo_tokens(n, n_vocab, 1);
            let mut samples = Vec::with_capacity(args.reps);
            progress(&format!("{name} filling{} t{threads}", depth_label(depth)));
            let engine = &mut cfg.engine;
            let seqs = vec![engine.new_sequence()];
            fill_depth(engine, &seqs, depth, n_vocab)?;
            for rep in 0..total {
                progress(&format!(
                    "{name} pp{n}{} t{threads} {}",
                    depth_label(depth),
                    rep_label(rep, args.warmup, args.reps)
                ));
                let profiled = args.profile && rep + 1 == total;
                engine.set_profiling(profiled);
                let t = Instant::now();
                prefill_into(engine, &seqs, std::slice::from_ref(&tokens))?;
                let secs = t.elapsed().as_secs_f64();
                back_to_depth(engine, &seqs, depth)?;
                if rep >= args.warmup {
                    samples.push(n as f64 / secs);
                }
                if profiled {
                    let heading = format!(
                        "{name} pp{n}{}, {}",
                        depth_label(depth),
                        crate::output::count(threads, "thread")
                    );
                    print_profile(engine, &heading, n)?;
                }
            }
            release(engine, &seqs)?;
            let mut row = cfg.row(TestKind::Pp, n, 1, samples);
            row.n_depth = depth;
            if depth == 0 {
                cfg.best_pp = Some(cfg.best_pp.map_or(row.mean_tps, |b| b.max(row.mean_tps)));
            }
            rows.push(row);
        }
    }
    Ok(())
}

/// Prints the profile of the repetition just run (`tokens` a pass, per token) under
/// `heading`, and turns profiling off.
fn print_profile(engine: &mut Engine, heading: &str, tokens: usize) -> Result<()> {
    clear_progress();
    let mut err = io::stderr().lock();
    writeln!(err, "profile of {heading} (last repetition):")?;
    report::profile::write_profile(&mut err, engine.profile(), tokens)?;
    engine.set_profiling(false);
    Ok(())
}

/// The tg tests of `args` on every configuration of `cfgs`, one row per test and
/// configuration. With more than one configuration the repetitions run in rounds, one of
/// each configuration a round (in reverse order every other round, so a steady drift
/// favours none), and every row after the first configuration's carries its round-by-round
/// ratios against it.
pub fn run_tg(args: &Args, cfgs: &mut [Config], rows: &mut Vec<BenchRow>) -> Result<()> {
    let total = args.warmup + args.reps;
    let interleaved = cfgs.len() > 1;
    for &depth in &args.depth {
        for &n in args.n_gen.iter().filter(|&&n| n > 0) {
            for &b in &args.batch {
                let mut seqs: Vec<Vec<SeqId>> = Vec::with_capacity(cfgs.len());
                for cfg in cfgs.iter_mut() {
                    let what = cfg.progress_label(interleaved);
                    progress(&format!(
                        "{} filling{} b{b} {what}",
                        cfg.model_name,
                        depth_label(depth),
                    ));
                    let n_vocab = cfg.n_vocab();
                    let engine = &mut cfg.engine;
                    let s: Vec<SeqId> = (0..b).map(|_| engine.new_sequence()).collect();
                    fill_depth(engine, &s, depth, n_vocab)?;
                    seqs.push(s);
                }
                let mut samples = vec![Vec::with_capacity(args.reps); cfgs.len()];
                let mut best_read = vec![0.0f64; cfgs.len()];
                let mut reads = vec![Vec::with_capacity(args.reps); cfgs.len()];
                let mut mask_secs = vec![0.0f64; cfgs.len()];
                let mut step_secs = vec![0.0f64; cfgs.len()];
                for rep in 0..total {
                    let order: Vec<usize> = if rep % 2 == 0 {
                        (0..cfgs.len()).collect()
                    } else {
                        (0..cfgs.len()).rev().collect()
                    };
                    for i in order {
                        let cfg = &mut cfgs[i];
                        let what = cfg.progress_label(interleaved);
                        progress(&format!(
                            "{} tg{n}{} b{b} {what} {}",
                            cfg.model_name,
                            depth_label(depth),
                            rep_label(rep, args.warmup, args.reps)
                        ));
                        let n_vocab = cfg.n_vocab();
                        let engine = &mut cfg.engine;
                        let profiled = args.profile && rep + 1 == total;
                        // The bound, measured beside each repetition (the machine's speed
                        // drifts): one plain read of the weights this decode streams.
                        let read = engine.read_streamed_weights().gbs();
                        best_read[i] = best_read[i].max(read);
                        engine.set_profiling(profiled);
                        let t = Instant::now();
                        let masks = decode(engine, &seqs[i], n, n_vocab, cfg.constraint.as_ref())?;
                        let secs = t.elapsed().as_secs_f64();
                        if rep >= args.warmup {
                            mask_secs[i] += masks;
                            step_secs[i] += secs;
                        }
                        back_to_depth(engine, &seqs[i], depth)?;
                        if rep >= args.warmup {
                            samples[i].push((b * n) as f64 / secs);
                            reads[i].push(read);
                        }
                        if profiled {
                            let heading = format!(
                                "{} tg{n}{} b{b}, {}",
                                cfg.model_name,
                                depth_label(depth),
                                if interleaved {
                                    what
                                } else {
                                    crate::output::count(cfg.threads, "thread")
                                },
                            );
                            print_profile(engine, &heading, n)?;
                        }
                    }
                }
                let (base_label, base) = (cfgs[0].label(), samples[0].clone());
                for (i, cfg) in cfgs.iter_mut().enumerate() {
                    release(&mut cfg.engine, &seqs[i])?;
                    cfg.read_gbs = Some(best_read[i]).filter(|&g| g > 0.0);
                    let paired = (interleaved && i > 0)
                        .then(|| paired::paired(&samples[i], &base, &base_label))
                        .flatten();
                    let mut row = cfg.row(TestKind::Tg, n, b, std::mem::take(&mut samples[i]));
                    row.read_share_paired =
                        paired_read_share(&row.samples, &reads[i], b, cfg.bytes_per_token);
                    row.n_depth = depth;
                    row.paired = paired;
                    if cfg.constraint.is_some() && step_secs[i] > 0.0 {
                        let tokens = (b * n * args.reps) as f64;
                        row.mask_us = Some(mask_secs[i] * 1e6 / tokens);
                        row.mask_share = Some(mask_secs[i] / step_secs[i]);
                    }
                    if b > 1 && depth == 0 {
                        row.pp_share = cfg.best_pp.map(|pp| row.mean_tps / pp);
                    }
                    rows.push(row);
                }
            }
        }
    }
    Ok(())
}

/// The median over repetitions of `tps / bound`, each repetition's bound from the read
/// (GB/s) just before it; `None` without reads or bytes.
fn paired_read_share(
    tps: &[f64],
    reads: &[f64],
    batch: usize,
    bytes_per_token: u64,
) -> Option<f64> {
    let mut shares: Vec<f64> = tps
        .iter()
        .zip(reads)
        .filter(|&(_, &g)| g > 0.0 && bytes_per_token > 0)
        .map(|(&t, &g)| t / (batch as f64 * g * 1e9 / bytes_per_token as f64))
        .collect();
    if shares.is_empty() {
        return None;
    }
    shares.sort_by(f64::total_cmp);
    let m = shares.len();
    Some(if m % 2 == 1 {
        shares[m / 2]
    } else {
        (shares[m / 2 - 1] + shares[m / 2]) / 2.0
    })
}

/// llama-batched-bench's shape on `cfg` for every (-p, -n, -b): B prompts prefilled, then
/// decoded together.
pub fn run_mixed(args: &Args, cfg: &mut Config, rows: &mut Vec<BenchRow>) -> Result<()> {
    let total = args.warmup + args.reps;
    let (name, threads, n_vocab) = (cfg.model_name.clone(), cfg.threads, cfg.n_vocab());
    for &pp in args.n_prompt.iter().filter(|&&n| n > 0) {
        for &tg in args.n_gen.iter().filter(|&&n| n > 0) {
            for &b in &args.batch {
                let mut samples = Vec::with_capacity(args.reps);
                let (mut pre, mut dec) = (Vec::new(), Vec::new());
                let engine = &mut cfg.engine;
                for rep in 0..total {
                    progress(&format!(
                        "{name} pp{pp}+tg{tg} b{b} t{threads} {}",
                        rep_label(rep, args.warmup, args.reps)
                    ));
                    // Distinct prompts, so no sequence reuses another's blocks.
                    let prompts: Vec<Vec<u32>> = (0..b)
                        .map(|i| pseudo_tokens(pp, n_vocab, 100 + i as u64))
                        .collect();
                    let t = Instant::now();
                    let seqs = prefill(engine, &prompts)?;
                    let t_pp = t.elapsed().as_secs_f64();
                    decode(engine, &seqs, tg, n_vocab, None)?;
                    let t_all = t.elapsed().as_secs_f64();
                    release(engine, &seqs)?;
                    if rep >= args.warmup {
                        pre.push((b * pp) as f64 / t_pp);
                        dec.push((b * tg) as f64 / (t_all - t_pp));
                        samples.push((b * (pp + tg)) as f64 / t_all);
                    }
                }
                let mut row = cfg.row(TestKind::Mixed, tg, b, samples);
                row.n_prompt = Some(pp);
                row.prefill_tps = Some(mean_stddev(&pre).0);
                row.decode_tps = Some(mean_stddev(&dec).0);
                rows.push(row);
            }
        }
    }
    Ok(())
}

/// Prefills one new sequence per prompt, packing prompt chunks of several sequences into
/// each forward pass as the scheduler does; the last token of each prompt gets logits.
fn prefill(engine: &mut Engine, prompts: &[Vec<u32>]) -> Result<Vec<SeqId>> {
    let seqs: Vec<SeqId> = prompts.iter().map(|_| engine.new_sequence()).collect();
    prefill_into(engine, &seqs, prompts)?;
    Ok(seqs)
}

/// Fills each of `seqs` with `depth` tokens of context (distinct per sequence, so none
/// reuses another's blocks), untimed.
fn fill_depth(engine: &mut Engine, seqs: &[SeqId], depth: usize, n_vocab: u32) -> Result<()> {
    if depth == 0 {
        return Ok(());
    }
    let prompts: Vec<Vec<u32>> = (0..seqs.len())
        .map(|i| pseudo_tokens(depth, n_vocab, 1000 + i as u64))
        .collect();
    prefill_into(engine, seqs, &prompts).context("filling the context depth")
}

/// " @ d4096" for a depth, as llama-bench labels it; nothing for 0.
fn depth_label(depth: usize) -> String {
    if depth == 0 {
        String::new()
    } else {
        format!(" @ d{depth}")
    }
}

/// Evaluates `prompts[i]` on `seqs[i]` (after what they hold), every sequence's chunks
/// packed into passes of at most the engine's batch.
fn prefill_into(engine: &mut Engine, seqs: &[SeqId], prompts: &[Vec<u32>]) -> Result<()> {
    let mut fed = vec![0usize; prompts.len()];
    let budget = engine.max_batch();
    while fed.iter().zip(prompts).any(|(&f, p)| f < p.len()) {
        let mut items = Vec::new();
        let mut used = 0;
        for (i, p) in prompts.iter().enumerate() {
            let n = (p.len() - fed[i]).min(budget - used);
            if n == 0 {
                continue;
            }
            let end = fed[i] + n;
            items.push(BatchItem {
                seq: seqs[i],
                tokens: &p[fed[i]..end],
                logits: if end == p.len() {
                    Logits::Last
                } else {
                    Logits::None
                },
            });
            used += n;
            if used == budget {
                break;
            }
        }
        let taken: Vec<(usize, usize)> = items
            .iter()
            .map(|it| {
                (
                    seqs.iter().position(|&s| s == it.seq).unwrap_or(0),
                    it.tokens.len(),
                )
            })
            .collect();
        let mut sink = 0.0f32;
        engine
            .forward(&items, |_, _, row| sink += row[0])
            .context("evaluating the prompt")?;
        std::hint::black_box(sink);
        for (i, n) in taken {
            fed[i] += n;
        }
    }
    Ok(())
}

/// Decodes `n` tokens on each of `seqs` together: one forward pass per step with one
/// token of every sequence, every sequence's logits produced. Under a `constraint` each
/// sequence feeds back the most likely token its mask allows (starting a new output when
/// one is complete), and the seconds spent on masks are returned.
fn decode(
    engine: &mut Engine,
    seqs: &[SeqId],
    n: usize,
    n_vocab: u32,
    constraint: Option<&Constraint>,
) -> Result<f64> {
    let mut streams: Vec<Vec<u32>> = (0..seqs.len())
        .map(|i| pseudo_tokens(n, n_vocab, 2 + i as u64))
        .collect();
    let mut states: Vec<ConstraintState> = constraint
        .map(|c| seqs.iter().map(|_| c.start()).collect())
        .unwrap_or_default();
    let mut greedy = Sampler::new(SamplerConfig::greedy(), n_vocab as usize)?;
    let mut mask_secs = 0.0f64;
    let mut failure = None;
    let mut sink = 0.0f32;
    for step in 0..n {
        let items: Vec<BatchItem<'_>> = seqs
            .iter()
            .zip(&streams)
            .map(|(&seq, s)| BatchItem {
                seq,
                tokens: std::slice::from_ref(&s[step]),
                logits: Logits::Last,
            })
            .collect();
        let mut next: Vec<Option<u32>> = vec![None; seqs.len()];
        engine
            .forward(&items, |item, _, row| {
                sink += row[0];
                let Some(state) = states.get_mut(item) else {
                    return;
                };
                let t = Instant::now();
                match masked_argmax(state, &mut greedy, row) {
                    Ok(token) => next[item] = Some(token),
                    Err(e) => failure = Some(e),
                }
                if state.is_finished() {
                    *state = constraint.expect("states come from it").start();
                }
                mask_secs += t.elapsed().as_secs_f64();
            })
            .context("decoding")?;
        drop(items);
        if let Some(e) = failure.take() {
            return Err(e).context("the --json-schema constraint");
        }
        if step + 1 < n {
            for (s, t) in streams.iter_mut().zip(&next) {
                if let Some(t) = *t {
                    s[step + 1] = t;
                }
            }
        }
    }
    std::hint::black_box(sink);
    Ok(mask_secs)
}

/// The most likely token `state` allows (the scheduler's greedy masked sample), accepted
/// into it.
fn masked_argmax(
    state: &mut ConstraintState,
    greedy: &mut Sampler,
    row: &[f32],
) -> Result<u32, ConstraintError> {
    let token = greedy.sample_masked(row, &[], state.compute_mask()?);
    state.accept(token)?;
    Ok(token)
}

/// `--json-schema`'s text (or `@FILE`) compiled for `model`.
fn compile_schema(text: &str, model: &Model) -> Result<Constraint> {
    let text = match text.strip_prefix('@') {
        Some(path) => fs::read_to_string(path).with_context(|| format!("reading {path}"))?,
        None => text.to_owned(),
    };
    let schema: serde_json::Value =
        serde_json::from_str(&text).context("--json-schema: the schema is not valid JSON")?;
    let vocab = model.constraint_vocab()?;
    Ok(Constraint::compile(
        &ConstraintSpec::JsonSchema(schema),
        &vocab,
    )?)
}

/// Cuts the sequences back to the `depth` tokens filled before the repetitions: every
/// repetition starts from the same context without paying for filling it again (at depth
/// 4,096 the fill takes minutes on two cores; the timed part, seconds).
fn back_to_depth(engine: &mut Engine, seqs: &[SeqId], depth: usize) -> Result<()> {
    for &s in seqs {
        engine.truncate(s, depth)?;
    }
    Ok(())
}

/// Frees the sequences and the prefix cache, so every test starts cold alike.
fn release(engine: &mut Engine, seqs: &[SeqId]) -> Result<()> {
    for &s in seqs {
        engine.free_sequence(s)?;
    }
    engine.clear_prefix_cache();
    Ok(())
}

/// Deterministic token ids spread over the vocabulary (like llama-bench's random tokens).
fn pseudo_tokens(n: usize, n_vocab: u32, seed: u64) -> Vec<u32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % u64::from(n_vocab.max(1))) as u32
        })
        .collect()
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pseudo_tokens_are_deterministic_and_in_range() {
        let a = pseudo_tokens(500, 1000, 1);
        assert_eq!(a, pseudo_tokens(500, 1000, 1));
        assert_ne!(a, pseudo_tokens(500, 1000, 2));
        assert!(a.iter().all(|&t| t < 1000));
    }

    #[test]
    fn paired_read_share_pairs_each_repetition_with_its_own_read() {
        // 1 GB a token: a 40 GB/s read bounds decode at 40 t/s. The machine slowed to half
        // for the second repetition, and decode with it: each repetition ran at 90% of its
        // own bound, where the mean against the best read says 67%.
        let gb = 1_000_000_000;
        let s = paired_read_share(&[36.0, 18.0, 36.0], &[40.0, 20.0, 40.0], 1, gb).unwrap();
        assert!((s - 0.9).abs() < 1e-12, "{s}");
        // Even counts take the middle pair's mean; a batch of 4 has four times the bound.
        let s = paired_read_share(&[36.0, 30.0], &[40.0, 40.0], 4, gb).unwrap();
        assert!((s - 33.0 / 160.0).abs() < 1e-12, "{s}");
        // No read (or no bytes): no figure.
        assert_eq!(paired_read_share(&[36.0], &[0.0], 1, gb), None);
        assert_eq!(paired_read_share(&[36.0], &[40.0], 1, 0), None);
    }
}
