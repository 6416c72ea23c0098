//! `bitnet bench`: throughput as llama.cpp's `llama-bench` measures it, so figures compare one
//! to one — pp (prompt tokens/s, the prompt evaluated in batches) and tg (tokens/s generating
//! one token at a time), mean and spread over repetitions, for every combination of models,
//! prompt/generation lengths, threads and kernel sets; plus the decode bound from a read
//! bandwidth probe run in the same process, and `--compare` for two saved reports.
//!
//! Each model is loaded once per kernel set; every thread count gets its own engine over
//! it. `-b B` decodes B sequences together (one forward pass per step, the weights
//! streamed once for all of them); `--mixed` adds llama-batched-bench's shape (B prompts
//! prefilled, then decoded together).
//! Everything that can be checked is checked before the first measurement: the arguments,
//! the report's destination, and each model file (readable, a model, tests within its
//! trained context).

pub mod compare;
pub mod membw;
pub mod profile_table;
pub mod report;

use std::fs;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use std::sync::Arc;

use bitnet_core::config::ModelConfig;
use bitnet_core::model::{
    BatchItem, Engine, EngineOptions, KvRotate, KvType, Logits, Model, SeqId,
};
use bitnet_gguf::GgufFile;

use self::report::{BenchReport, BenchRow, Format, MachineInfo, TestKind, mean_stddev};
use super::common::{ModelArgs, load_model, parse_isa};
use super::limits::{check_context, warn_threads};
use crate::output::{Progress, note};
use crate::output_file::OutputFile;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model files to benchmark.
    #[arg(short = 'm', long = "model", num_args = 1..)]
    pub models: Vec<PathBuf>,
    /// Prompt lengths (pp tests), comma-separated; 0 skips pp.
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    pub n_prompt: Vec<usize>,
    /// Generation lengths (tg tests), comma-separated; 0 skips tg.
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    pub n_gen: Vec<usize>,
    /// Context depths, comma-separated (llama-bench's -d): each pp and tg test first fills
    /// this many tokens of context (untimed), then measures; 0 = an empty context.
    #[arg(
        short = 'd',
        long = "n-depth",
        value_delimiter = ',',
        default_value = "0"
    )]
    pub depth: Vec<usize>,
    /// Sequences decoded together in tg (and mixed) tests, comma-separated.
    #[arg(
        short = 'b',
        long = "batch",
        value_delimiter = ',',
        default_value = "1"
    )]
    pub batch: Vec<usize>,
    /// Thread counts, comma-separated (default: the physical cores).
    #[arg(short = 't', long = "threads", value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Kernel sets, comma-separated (default: the best available).
    #[arg(long = "kernel", value_delimiter = ',')]
    pub kernels: Vec<String>,
    /// Repetitions of each test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub reps: usize,
    /// Untimed runs of each test before the timed ones.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Read models into memory instead of mapping them.
    #[arg(long)]
    pub no_mmap: bool,
    /// Output head format (native or q8).
    #[arg(long, value_enum, default_value_t = super::common::HeadArg::Native)]
    pub head: super::common::HeadArg,
    /// Output format on stdout.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Md)]
    pub output: Format,
    /// Also write the full report as JSON to this file.
    #[arg(long)]
    pub json_report: Option<PathBuf>,
    /// Measure the memory read bandwidth (and the decode bound from it). On by default for tg
    /// tests; `--membw` alone (no model) runs only the probe.
    #[arg(long)]
    pub membw: bool,
    /// Skip the bandwidth probe.
    #[arg(long, conflicts_with = "membw")]
    pub no_membw: bool,
    /// Print where decode time goes (per op kind) for each tg test.
    #[arg(long)]
    pub profile: bool,
    /// Also run llama-batched-bench's shape for every (-p, -n, -b): B sequences of a
    /// -p token prompt each, prefilled, then -n tokens decoded together; reports prefill,
    /// decode and total throughput.
    #[arg(long)]
    pub mixed: bool,
    /// K cache types, comma-separated (llama-bench's -ctk): f16, f32, q8_0, q8_r, fp8, q4_0, b1.
    #[arg(long = "cache-type-k", value_delimiter = ',', value_parser = super::common::parse_kv_type,
          default_value = "f16")]
    pub cache_type_k: Vec<KvType>,
    /// V cache types, comma-separated (-ctv); every K type runs with every V type.
    #[arg(long = "cache-type-v", value_delimiter = ',', value_parser = super::common::parse_kv_type,
          default_value = "f16")]
    pub cache_type_v: Vec<KvType>,
    /// Hadamard rotation of the KV cache (off, k, v, kv, auto), as on the other commands.
    #[arg(long = "kv-rotate", value_name = "SIDES", value_parser = super::common::parse_kv_rotate,
          default_value = "off")]
    pub kv_rotate: KvRotate,
    /// Score b1 keys by XNOR/popcount (needs -ctk b1), as on the other commands.
    #[arg(long = "kv-xnor")]
    pub kv_xnor: bool,
    /// Positions per KV cache block (a power of two).
    #[arg(long, default_value_t = bitnet_core::model::DEFAULT_BLOCK_TOKENS)]
    pub kv_block: usize,
    /// Compare two JSON reports instead of running: OLD NEW.
    #[arg(long, num_args = 2, value_names = ["OLD", "NEW"])]
    pub compare: Option<Vec<PathBuf>>,
    /// With --compare: exit non-zero if any row regressed.
    #[arg(long)]
    pub fail_on_regress: bool,
    /// With --compare: the smallest relative drop that can count as a regression.
    #[arg(long, default_value_t = 0.02)]
    pub min_drop: f64,
}

pub fn run(args: Args) -> Result<()> {
    if let Some(files) = &args.compare {
        return run_compare(&files[0], &files[1], args.min_drop, args.fail_on_regress);
    }
    if args.models.is_empty() && !args.membw {
        bail!("nothing to do: give -m MODEL (one or more) or --membw");
    }
    if let Some(b) = args.batch.iter().find(|&&b| b == 0 || b > 1024) {
        bail!("-b {b}: the number of sequences decoded together must be in 1..=1024");
    }
    if args.reps == 0 {
        bail!("-r must be at least 1");
    }
    let has_tests = args.n_prompt.iter().chain(&args.n_gen).any(|&n| n > 0);
    if !args.models.is_empty() && !has_tests {
        bail!("nothing to measure: every -p and -n is 0 (give a prompt or generation length)");
    }
    let threads_list = if args.threads.is_empty() {
        vec![0]
    } else {
        args.threads.clone()
    };
    if let Some(&t) = threads_list.iter().max() {
        warn_threads(t);
    }
    let kernels: Vec<Option<String>> = if args.kernels.is_empty() {
        vec![None]
    } else {
        args.kernels.iter().cloned().map(Some).collect()
    };
    for k in kernels.iter().flatten() {
        parse_isa(Some(k))?;
    }
    let report_file = args
        .json_report
        .as_deref()
        .map(OutputFile::create)
        .transpose()?;
    // The longest test fixes the context every session needs.
    let longest = args
        .n_prompt
        .iter()
        .chain(&args.n_gen)
        .copied()
        .max()
        .unwrap_or(1)
        .max(1);
    // A mixed test's sequences hold a prompt and its generation.
    let max = |v: &[usize]| v.iter().copied().max().unwrap_or(0);
    let longest = if args.mixed {
        longest.max(max(&args.n_prompt) + max(&args.n_gen))
    } else {
        longest
    };
    for path in &args.models {
        check_model_file(path, longest, max(&args.depth))?;
    }

    // One probe per thread count: a 1-thread decode is bounded by what one core can read.
    let want_bw = !args.no_membw && (args.membw || args.n_gen.iter().any(|&n| n > 0));
    let mut probe_threads: Vec<usize> = threads_list
        .iter()
        .map(|&t| if t == 0 { default_threads() } else { t })
        .collect();
    probe_threads.sort_unstable();
    probe_threads.dedup();
    let bandwidths: Vec<membw::Bandwidth> = if want_bw {
        probe_threads
            .iter()
            .map(|&t| {
                progress(&format!("measuring read bandwidth with {t} thread(s)"));
                membw::measure(membw::DEFAULT_PROBE_BYTES, t, 3)
            })
            .collect()
    } else {
        Vec::new()
    };
    let bandwidth = bandwidths.last().copied();

    let mut rows = Vec::new();
    for path in &args.models {
        for kernel in &kernels {
            let model_args = ModelArgs {
                threads: None,
                kernel: kernel.clone(),
                no_mmap: args.no_mmap,
                mlock: false,
                head: args.head,
                ctx: None,
                batch_size: None,
                no_pin: false,
                cache_type_k: KvType::F16,
                cache_type_v: KvType::F16,
                kv_rotate: KvRotate::Off,
                kv_xnor: false,
            };
            let opts = model_args.load_options()?;
            reset_peak_rss();
            progress(&format!("loading {}", path.display()));
            // One load (and repack) per model and kernel set; each thread count gets its
            // own engine over the shared model.
            let model = load_model(path, &opts)?;
            for &threads in &threads_list {
                for &k in &args.cache_type_k {
                    for &v in &args.cache_type_v {
                        let kv = (k, v);
                        bench_model(&args, path, &model, threads, kv, &bandwidths, &mut rows)?;
                    }
                }
            }
        }
    }
    clear_progress();

    let report = BenchReport {
        bitnet_version: env!("CARGO_PKG_VERSION").to_owned(),
        commit: git_commit(),
        date: utc_now(),
        machine: MachineInfo {
            cpu: cpu_name(),
            logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            membw_gbs: bandwidth.map(|b| b.gbs),
            membw_threads: bandwidth.map(|b| b.threads),
            membw_by_threads: bandwidths
                .iter()
                .map(|b| report::ThreadBandwidth {
                    threads: b.threads,
                    gbs: b.gbs,
                })
                .collect(),
        },
        rows,
    };
    let stdout = io::stdout();
    let mut out = stdout.lock();
    report::write_report(&mut out, &report, args.output).context("writing the report")?;
    out.flush()?;
    if let Some(out) = report_file {
        let mut w = io::BufWriter::new(out.file());
        report::write_report(&mut w, &report, Format::Json)
            .and_then(|()| w.flush())
            .with_context(|| format!("writing {}", out.path().display()))?;
        drop(w);
        out.commit()?;
    }
    Ok(())
}

/// What can be known about a model before measuring anything: the file opens, it is a model
/// (not a vocab-only GGUF), and the longest test and the deepest depth each fit the context
/// it was trained on (past it, the figures would describe a model running outside its
/// design). A test that starts inside the trained context and runs past its end (`-d 4096
/// -n 32` on a 4,096-token model, the depth llama-bench users quote) is measured with a
/// warning: the speed of those last positions is what it would be inside.
fn check_model_file(path: &std::path::Path, longest: usize, depth: usize) -> Result<()> {
    let file = GgufFile::open(path, bitnet_gguf::LoadMode::Mmap)
        .with_context(|| format!("opening {}", path.display()))?;
    if file.tensors().is_empty() && file.metadata().get("tokenizer.ggml.model").is_some() {
        bail!(
            "{} holds only a tokenizer (a vocab-only GGUF, no weights): nothing to benchmark",
            path.display()
        );
    }
    let cfg = ModelConfig::from_gguf(&file)
        .with_context(|| format!("reading the model config of {}", path.display()))?;
    let trained = cfg.n_ctx_train;
    if longest > trained || depth > trained {
        let what = if depth > trained {
            format!("a depth of {depth} tokens")
        } else {
            format!("a test of {longest} tokens")
        };
        bail!(
            "{what} does not fit {}: its trained context is {trained} tokens \
             (lower -p / -n / -d)",
            path.display(),
        );
    }
    if longest + depth > trained {
        note!(
            "warning: the tests at depth {depth} run to position {}, past the {trained} tokens \
             {} was trained on (timings only: the text would degrade there)",
            longest + depth,
            path.display()
        );
    }
    Ok(())
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

fn bench_model(
    args: &Args,
    path: &std::path::Path,
    model: &Arc<Model>,
    threads: usize,
    (type_k, type_v): (KvType, KvType),
    bandwidths: &[membw::Bandwidth],
    rows: &mut Vec<BenchRow>,
) -> Result<()> {
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let model_bytes = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let n_params = model.config().n_params();
    let bytes_per_token = model.decode_bytes_per_token();
    let max_b = args.batch.iter().copied().max().unwrap_or(1);
    let engine_opts = EngineOptions {
        threads,
        n_ctx: kv_tokens_needed(args),
        batch: EngineOptions::default().batch.max(max_b),
        block_tokens: args.kv_block,
        k_type: type_k,
        v_type: type_v,
        kv_rotate: args.kv_rotate,
        kv_xnor: args.kv_xnor,
        ..EngineOptions::default()
    };
    check_context(model, &engine_opts)?;
    let mut engine = Engine::new(model.clone(), &engine_opts).context("creating the engine")?;
    let threads = engine.threads();
    let n_vocab = model.n_vocab() as u32;
    let bandwidth = bandwidths.iter().find(|b| b.threads == threads).copied();
    let kv_extra = {
        let (rk, rv) = engine.kv_rotated();
        let rot = match (rk, rv) {
            (true, true) => Some("rotate kv"),
            (true, false) => Some("rotate k"),
            (false, true) => Some("rotate v"),
            (false, false) => None,
        };
        let parts: Vec<&str> = rot
            .into_iter()
            .chain(engine.kv_xnor().then_some("xnor"))
            .collect();
        (!parts.is_empty()).then(|| parts.join(" "))
    };
    let make_row = |test, n_tokens: usize, batch: usize, samples: Vec<f64>| {
        let (mean_tps, stddev_tps) = mean_stddev(&samples);
        // Batched decode streams the weights once per step for all its sequences.
        let bound_tps = match (test, bandwidth) {
            (TestKind::Tg, Some(bw)) if bytes_per_token > 0 => {
                Some(batch as f64 * bw.gbs * 1e9 / bytes_per_token as f64)
            }
            _ => None,
        };
        BenchRow {
            model: name.clone(),
            model_bytes,
            n_params,
            kernel: model.isa().name().to_owned(),
            threads,
            batch,
            mmap: !args.no_mmap,
            test,
            n_tokens,
            samples,
            mean_tps,
            stddev_tps,
            peak_rss_bytes: peak_rss(),
            bytes_per_token: (test == TestKind::Tg).then_some(bytes_per_token),
            bound_tps,
            bound_share: bound_tps.map(|b| mean_tps / b),
            per_seq_tps: (test == TestKind::Tg && batch > 1).then_some(mean_tps / batch as f64),
            pp_share: None,
            n_prompt: None,
            prefill_tps: None,
            decode_tps: None,
            type_k: type_k.name().to_owned(),
            type_v: type_v.name().to_owned(),
            kv_extra: kv_extra.clone(),
            n_depth: 0,
        }
    };
    let total = args.warmup + args.reps;
    let mut best_pp: Option<f64> = None;
    for &depth in &args.depth {
        for &n in args.n_prompt.iter().filter(|&&n| n > 0) {
            let tokens = pseudo_tokens(n, n_vocab, 1);
            let mut samples = Vec::with_capacity(args.reps);
            progress(&format!("{name} filling{} t{threads}", depth_label(depth)));
            let seqs = vec![engine.new_sequence()];
            fill_depth(&mut engine, &seqs, depth, n_vocab)?;
            for rep in 0..total {
                progress(&format!(
                    "{name} pp{n}{} t{threads} {}",
                    depth_label(depth),
                    rep_label(rep, args.warmup, args.reps)
                ));
                let t = Instant::now();
                prefill_into(&mut engine, &seqs, std::slice::from_ref(&tokens))?;
                let secs = t.elapsed().as_secs_f64();
                back_to_depth(&mut engine, &seqs, depth)?;
                if rep >= args.warmup {
                    samples.push(n as f64 / secs);
                }
            }
            release(&mut engine, &seqs)?;
            let mut row = make_row(TestKind::Pp, n, 1, samples);
            row.n_depth = depth;
            if depth == 0 {
                best_pp = Some(best_pp.map_or(row.mean_tps, |b: f64| b.max(row.mean_tps)));
            }
            rows.push(row);
        }
    }
    for &depth in &args.depth {
        for &n in args.n_gen.iter().filter(|&&n| n > 0) {
            for &b in &args.batch {
                let mut samples = Vec::with_capacity(args.reps);
                progress(&format!(
                    "{name} filling{} b{b} t{threads}",
                    depth_label(depth)
                ));
                let seqs: Vec<SeqId> = (0..b).map(|_| engine.new_sequence()).collect();
                fill_depth(&mut engine, &seqs, depth, n_vocab)?;
                for rep in 0..total {
                    progress(&format!(
                        "{name} tg{n}{} b{b} t{threads} {}",
                        depth_label(depth),
                        rep_label(rep, args.warmup, args.reps)
                    ));
                    let profiled = args.profile && rep + 1 == total;
                    engine.set_profiling(profiled);
                    let t = Instant::now();
                    decode(&mut engine, &seqs, n, n_vocab)?;
                    let secs = t.elapsed().as_secs_f64();
                    back_to_depth(&mut engine, &seqs, depth)?;
                    if rep >= args.warmup {
                        samples.push((b * n) as f64 / secs);
                    }
                    if profiled {
                        clear_progress();
                        let mut err = io::stderr().lock();
                        writeln!(
                            err,
                            "profile of {name} tg{n}{} b{b}, {threads} threads (last repetition):",
                            depth_label(depth)
                        )?;
                        profile_table::write_profile(&mut err, engine.profile(), n)?;
                        engine.set_profiling(false);
                    }
                }
                release(&mut engine, &seqs)?;
                let mut row = make_row(TestKind::Tg, n, b, samples);
                row.n_depth = depth;
                if b > 1 && depth == 0 {
                    row.pp_share = best_pp.map(|pp| row.mean_tps / pp);
                }
                rows.push(row);
            }
        }
    }
    if args.mixed {
        for &pp in args.n_prompt.iter().filter(|&&n| n > 0) {
            for &tg in args.n_gen.iter().filter(|&&n| n > 0) {
                for &b in &args.batch {
                    let mut samples = Vec::with_capacity(args.reps);
                    let (mut pre, mut dec) = (Vec::new(), Vec::new());
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
                        let seqs = prefill(&mut engine, &prompts)?;
                        let t_pp = t.elapsed().as_secs_f64();
                        decode(&mut engine, &seqs, tg, n_vocab)?;
                        let t_all = t.elapsed().as_secs_f64();
                        release(&mut engine, &seqs)?;
                        if rep >= args.warmup {
                            pre.push((b * pp) as f64 / t_pp);
                            dec.push((b * tg) as f64 / (t_all - t_pp));
                            samples.push((b * (pp + tg)) as f64 / t_all);
                        }
                    }
                    let mut row = make_row(TestKind::Mixed, tg, b, samples);
                    row.n_prompt = Some(pp);
                    row.prefill_tps = Some(mean_stddev(&pre).0);
                    row.decode_tps = Some(mean_stddev(&dec).0);
                    rows.push(row);
                }
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
/// token of every sequence, every sequence's logits produced.
fn decode(engine: &mut Engine, seqs: &[SeqId], n: usize, n_vocab: u32) -> Result<()> {
    let streams: Vec<Vec<u32>> = (0..seqs.len())
        .map(|i| pseudo_tokens(n, n_vocab, 2 + i as u64))
        .collect();
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
        engine
            .forward(&items, |_, _, row| sink += row[0])
            .context("decoding")?;
    }
    std::hint::black_box(sink);
    Ok(())
}

/// Frees the sequences and the prefix cache, so every repetition starts cold alike.
/// Cuts the sequences back to the `depth` tokens filled before the repetitions: every
/// repetition starts from the same context without paying for filling it again (at depth
/// 4,096 the fill takes minutes on two cores; the timed part, seconds).
fn back_to_depth(engine: &mut Engine, seqs: &[SeqId], depth: usize) -> Result<()> {
    for &s in seqs {
        engine.truncate(s, depth)?;
    }
    Ok(())
}

fn release(engine: &mut Engine, seqs: &[SeqId]) -> Result<()> {
    for &s in seqs {
        engine.free_sequence(s)?;
    }
    engine.clear_prefix_cache();
    Ok(())
}

/// "warmup 1/1" for the untimed runs, then "rep 1/5" counting only the timed ones.
fn rep_label(run: usize, warmup: usize, reps: usize) -> String {
    if run < warmup {
        format!("warmup {}/{warmup}", run + 1)
    } else {
        format!("rep {}/{reps}", run - warmup + 1)
    }
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

fn run_compare(
    old: &std::path::Path,
    new: &std::path::Path,
    min_drop: f64,
    fail: bool,
) -> Result<()> {
    let read = |p: &std::path::Path| -> Result<BenchReport> {
        let text = fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not a bench JSON report", p.display()))
    };
    let cmp = compare::compare(&read(old)?, &read(new)?, min_drop);
    let stdout = io::stdout();
    let mut out = stdout.lock();
    compare::write_comparison(&mut out, &cmp)?;
    out.flush()?;
    if fail && cmp.regressions() > 0 {
        bail!("{} row(s) regressed", cmp.regressions());
    }
    Ok(())
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

thread_local! {
    static PROGRESS: std::cell::RefCell<Progress> = std::cell::RefCell::new(Progress::default());
}

/// The `[bench]` progress line on stderr (redrawn on a terminal, one line per step in logs).
fn progress(msg: &str) {
    PROGRESS.with(|p| p.borrow_mut().step(&format!("[bench] {msg}")));
}

fn clear_progress() {
    PROGRESS.with(|p| p.borrow_mut().clear());
}

/// Resets the kernel's peak-RSS mark for this process (Linux: `echo 5 > /proc/self/clear_refs`),
/// so each model's peak is its own. Best effort elsewhere.
fn reset_peak_rss() {
    let _ = fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident set size in bytes (`VmHWM`), 0 where unknown.
pub fn peak_rss() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn cpu_name() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned())
}

fn git_commit() -> Option<String> {
    option_env!("BITNET_GIT_COMMIT")
        .map(str::to_owned)
        .or_else(|| {
            std::process::Command::new("git")
                .args(["rev-parse", "--short", "HEAD"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        })
}

/// The current UTC time as RFC 3339, from the system clock (no date crate needed).
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a (year, month, day) date, proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rep_labels_count_warmups_and_timed_runs_apart() {
        let labels: Vec<String> = (0..3).map(|r| rep_label(r, 1, 2)).collect();
        assert_eq!(labels, ["warmup 1/1", "rep 1/2", "rep 2/2"]);
        assert_eq!(rep_label(0, 0, 1), "rep 1/1");
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_413), (2025, 11, 21));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn pseudo_tokens_are_deterministic_and_in_range() {
        let a = pseudo_tokens(500, 1000, 1);
        assert_eq!(a, pseudo_tokens(500, 1000, 1));
        assert_ne!(a, pseudo_tokens(500, 1000, 2));
        assert!(a.iter().all(|&t| t < 1000));
    }

    #[test]
    fn peak_rss_is_reported_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(peak_rss() > 0);
        }
    }
}
