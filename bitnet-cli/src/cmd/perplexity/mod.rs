//! `bitnet perplexity -m MODEL.gguf -f TEXT [-c 512] [--chunks N]`: llama.cpp's method. The
//! text is tokenized once (BOS first), cut into non-overlapping windows of `-c` tokens, the
//! first token of every window set to BOS, and each window evaluated from an empty cache;
//! the second half of each window is scored (position `j` predicts token `j + 1` for `j` from
//! `c/2` to `c - 2`). A running estimate goes to stderr per window; the end prints the
//! perplexity with its standard error. Logits are consumed row by row as the engine makes
//! them, never held for a whole window.
//!
//! `--kl-divergence-base FILE` also saves the reference distribution of every scored token
//! (all log-probabilities, or the top `--kl-top-k`); `--kl-divergence-base FILE
//! --kl-divergence` reads it back and reports the mean KL divergence from it and the top-1
//! agreement, so a KV or head quantization can be judged against the plain run.

mod window;

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use bitnet_core::engine::Session;

use crate::args::context::EvictArg;
use crate::args::model::ModelArgs;
use crate::setup::limits::check_context;
use crate::setup::load_model;
use bitnet_core::scheduler::ContextPolicy;

use crate::args::prompt::read_text_as;
use crate::output::{Progress, note};
use crate::output_file::OutputFile;
use window::describe;

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("kv_bounded").args(["kv_window", "kv_evict"])))]
pub struct Args {
    /// The GGUF model file (models/shakespeare.gguf ships with the repository).
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// The text to score ('-' = standard input).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: PathBuf,
    /// Score at most this many windows (default: all).
    #[arg(long)]
    pub chunks: Option<usize>,
    /// Save the reference distributions to FILE (or, with --kl-divergence, read them).
    #[arg(long, value_name = "FILE")]
    pub kl_divergence_base: Option<PathBuf>,
    /// Compare this run against the distributions saved in --kl-divergence-base.
    #[arg(long, requires = "kl_divergence_base")]
    pub kl_divergence: bool,
    /// With --kl-divergence-base: keep only the K most likely tokens per position (0 = all).
    #[arg(long, default_value_t = 0)]
    pub kl_top_k: usize,
    /// Read the whole text as one stream through a bounded cache: this many most recent
    /// tokens (plus --kv-sinks), moving the window as it fills (StreamingLLM).
    #[arg(long, value_name = "W", conflicts_with_all = ["kl_divergence_base", "chunks"])]
    pub kv_window: Option<usize>,
    /// With --kv-window or --kv-evict: the first N tokens always stay (attention sinks).
    #[arg(long, value_name = "N", default_value_t = 4, requires = "kv_bounded")]
    pub kv_sinks: usize,
    /// Read the whole text as one stream through a cache of --kv-budget positions, evicting
    /// by attention received (H2O: sinks, --kv-recent most recent, heavy hitters); scores the
    /// same tokens as --kv-window (budget - sinks).
    #[arg(
        long,
        value_name = "POLICY",
        requires = "kv_budget",
        conflicts_with_all = ["kl_divergence_base", "chunks"]
    )]
    pub kv_evict: Option<EvictArg>,
    /// With --kv-evict: positions the cache holds at most (sinks and recent included).
    #[arg(long, value_name = "N", requires = "kv_evict")]
    pub kv_budget: Option<usize>,
    /// With --kv-evict: the most recent positions that always stay (default: half of what
    /// the budget leaves after the sinks).
    #[arg(long, value_name = "R", requires = "kv_evict")]
    pub kv_recent: Option<usize>,
    #[command(flatten)]
    pub model_args: ModelArgs,
}

/// The window `-c` asks for (default 512, or the trained context if shorter), set as the
/// engine's context; refused under 4 tokens (no second half to score). `perplexity` and
/// `calibrate` cut their texts alike, so a calibration budget is what perplexity reports.
pub fn window_size(
    model: &bitnet_core::Model,
    engine_opts: &mut bitnet_core::EngineOptions,
) -> Result<usize> {
    let n_ctx = if engine_opts.n_ctx == 0 {
        512.min(model.config().n_ctx_train)
    } else {
        engine_opts.n_ctx
    };
    if n_ctx < 4 {
        bail!("-c {n_ctx}: a window needs at least 4 tokens to score its second half");
    }
    engine_opts.n_ctx = n_ctx;
    Ok(n_ctx)
}

const KLD_MAGIC: &[u8; 8] = b"BNKLD\x00\x01\x00";

/// Log-probabilities of one logits row: `(log-sum-exp, max index)`.
fn log_norm(row: &[f32]) -> (f64, usize) {
    let (mut best, mut bi) = (f32::NEG_INFINITY, 0);
    for (i, &x) in row.iter().enumerate() {
        if x > best {
            best = x;
            bi = i;
        }
    }
    let s: f64 = row.iter().map(|&x| f64::from(x - best).exp()).sum();
    (f64::from(best) + s.ln(), bi)
}

/// Running sums of the negative log-likelihood (and its square) of scored tokens.
#[derive(Default)]
struct Nll {
    sum: f64,
    sum2: f64,
    n: u64,
}

impl Nll {
    fn add(&mut self, v: f64) {
        self.sum += v;
        self.sum2 += v * v;
        self.n += 1;
    }

    fn ppl(&self) -> f64 {
        (self.sum / self.n.max(1) as f64).exp()
    }

    /// The standard error of the perplexity (llama.cpp's estimate).
    fn ppl_err(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        let n = self.n as f64;
        let mean = self.sum / n;
        let var = (self.sum2 / n - mean * mean).max(0.0);
        (var / (n - 1.0)).sqrt() * self.ppl()
    }
}

/// What a KL comparison accumulates.
#[derive(Default)]
struct Kld {
    sum: f64,
    sum2: f64,
    n: u64,
    top1_same: u64,
}

/// The reference side of the KL file: per scored token, `k` (id, log-prob) pairs, best
/// first; `k = n_vocab` stores every log-probability in id order.
enum KlMode {
    Off,
    Write(BufWriter<File>, OutputFile, usize),
    Read(BufReader<File>, usize),
}

pub fn run(args: Args) -> Result<()> {
    let mut engine_opts = args.model_args.engine_options();
    let opts = args.model_args.load_options()?;
    let text = read_text_as(&args.file, "the text")?;
    // The KL file is checked (or created) before any work.
    let kl_out = match (&args.kl_divergence_base, args.kl_divergence) {
        (Some(p), false) => Some(OutputFile::create(p)?),
        _ => None,
    };
    let model = load_model(&args.model, &opts)?;
    args.model_args.apply_plan(&model, &mut engine_opts)?;
    let tok = model
        .tokenizer()
        .context("the model file has no tokenizer (tokenizer.ggml.* keys)")?;
    let n_vocab = model.n_vocab();
    let n_ctx = window_size(&model, &mut engine_opts)?;
    let tokens = tok.encode(&text, true, false);
    let sinks = args.kv_sinks;
    if let Some(window) = args.kv_window {
        let bound = ContextPolicy::Window { sinks, window };
        return run_windowed(&model, &engine_opts, &tokens, bound);
    }
    if let (Some(EvictArg::H2o), Some(budget)) = (args.kv_evict, args.kv_budget) {
        let recent = args.kv_recent.unwrap_or(budget.saturating_sub(sinks) / 2);
        let bound = ContextPolicy::HeavyHitters {
            sinks,
            recent,
            budget,
        };
        return run_windowed(&model, &engine_opts, &tokens, bound);
    }
    let available = tokens.len() / n_ctx;
    if available == 0 {
        bail!(
            "the text has {} tokens, fewer than one window of -c {n_ctx}: give a longer text or a smaller -c",
            tokens.len()
        );
    }
    let n_chunks = args.chunks.map_or(available, |c| c.min(available));
    if n_chunks == 0 {
        bail!("--chunks 0: nothing to score");
    }
    check_context(&model, &engine_opts)?;
    let mut session = Session::new(model.clone(), &engine_opts).context("creating a session")?;
    let bos = tok.bos_id();
    let first = n_ctx / 2;
    let k = if args.kl_top_k == 0 || args.kl_top_k > n_vocab {
        n_vocab
    } else {
        args.kl_top_k
    };
    let mut kl = match (&args.kl_divergence_base, args.kl_divergence, kl_out) {
        (Some(_), false, Some(out)) => {
            let mut w = BufWriter::new(out.file().try_clone()?);
            w.write_all(KLD_MAGIC)?;
            for v in [n_vocab, n_ctx, n_chunks, k] {
                w.write_all(&(v as u64).to_le_bytes())?;
            }
            KlMode::Write(w, out, k)
        }
        (Some(p), true, _) => {
            let mut r =
                BufReader::new(File::open(p).with_context(|| format!("opening {}", p.display()))?);
            let not_a_base = || {
                anyhow::anyhow!(
                    "{} is not a KL-divergence base file of this tool (write one with --kl-divergence-base FILE alone)",
                    p.display()
                )
            };
            let mut magic = [0u8; 8];
            // A file shorter than the magic (an empty one, say) is no base file either.
            r.read_exact(&mut magic).map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    not_a_base()
                } else {
                    anyhow::Error::new(e).context(format!("reading {}", p.display()))
                }
            })?;
            if &magic != KLD_MAGIC {
                return Err(not_a_base());
            }
            let mut head = [0u64; 4];
            for h in &mut head {
                let mut b = [0u8; 8];
                r.read_exact(&mut b).with_context(|| {
                    format!("{}: the KL base file ends inside its header", p.display())
                })?;
                *h = u64::from_le_bytes(b);
            }
            let [bv, bc, bn, bk] = head.map(|v| v as usize);
            if bv != n_vocab || bc != n_ctx || bn < n_chunks || bk == 0 || bk > bv {
                bail!(
                    "{} was saved with vocab {bv}, -c {bc}, {bn} windows, top-{bk}: this run has vocab {n_vocab}, -c {n_ctx}, {n_chunks} windows",
                    p.display()
                );
            }
            KlMode::Read(r, bk)
        }
        _ => KlMode::Off,
    };

    let mut nll = Nll::default();
    let mut kld = Kld::default();
    let mut progress = Progress::default();
    let mut probs: Vec<(u32, f32)> = Vec::with_capacity(n_vocab);
    let mut base_row: Vec<(u32, f32)> = Vec::with_capacity(n_vocab);
    let mut io_err: Option<anyhow::Error> = None;
    let t0 = std::time::Instant::now();
    let mut running = String::new();
    for c in 0..n_chunks {
        let start = c * n_ctx;
        let mut window = tokens[start..start + n_ctx].to_vec();
        if let Some(b) = bos {
            window[0] = b;
        }
        session.reset();
        session
            .eval_each(&window, |j, row| {
                if j < first || j + 1 >= n_ctx || io_err.is_some() {
                    return;
                }
                let target = window[j + 1] as usize;
                let (lse, top) = log_norm(row);
                nll.add(lse - f64::from(row[target]));
                let result = match &mut kl {
                    KlMode::Off => Ok(()),
                    KlMode::Write(w, _, k) => write_dist(w, row, lse, *k, &mut probs),
                    KlMode::Read(r, bk) => read_dist(r, *bk, n_vocab, &mut base_row).map(|()| {
                        let (d, base_top) = kl_of(&base_row, row, lse);
                        kld.sum += d;
                        kld.sum2 += d * d;
                        kld.n += 1;
                        if base_top as usize == top {
                            kld.top1_same += 1;
                        }
                    }),
                };
                if let Err(e) = result {
                    io_err = Some(e);
                }
            })
            .with_context(|| format!("evaluating window {}", c + 1))?;
        if let Some(e) = io_err.take() {
            return Err(e);
        }
        running.push_str(&format!("[{}]{:.4},", c + 1, nll.ppl()));
        let msg = format!(
            "perplexity: window {}/{n_chunks}, estimate {:.4} ({:.1} s)",
            c + 1,
            nll.ppl(),
            t0.elapsed().as_secs_f64()
        );
        // Every window on a terminal; about every tenth in a log.
        if (c + 1) % n_chunks.div_ceil(10) == 0 || c + 1 == n_chunks {
            progress.step(&msg);
        } else {
            progress.update(&msg, false);
        }
    }
    progress.clear();
    if let KlMode::Write(mut w, out, _) = kl {
        w.flush()?;
        drop(w);
        out.commit()?;
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{running}")?;
    writeln!(
        stdout,
        "Final estimate: PPL = {:.4} +/- {:.5} ({} scored in {} of {n_ctx})",
        nll.ppl(),
        nll.ppl_err(),
        crate::output::count(nll.n, "token"),
        crate::output::count(n_chunks, "window")
    )?;
    if kld.n > 0 {
        let n = kld.n as f64;
        let mean = kld.sum / n;
        let se = ((kld.sum2 / n - mean * mean).max(0.0) / (n - 1.0).max(1.0)).sqrt();
        writeln!(
            stdout,
            "Mean KLD: {mean:.6} +/- {se:.6} | same top token: {:.3}% ({} of {})",
            100.0 * kld.top1_same as f64 / n,
            kld.top1_same,
            kld.n
        )?;
    }
    note!(
        "{:.2} s | {:.1} tokens/s evaluated",
        t0.elapsed().as_secs_f64(),
        (n_chunks * n_ctx) as f64 / t0.elapsed().as_secs_f64().max(1e-9)
    );
    Ok(())
}

/// Writes one scored position's distribution: all log-probs in id order, or the top `k`
/// (id, log-prob) pairs best first.
fn write_dist(
    w: &mut impl Write,
    row: &[f32],
    lse: f64,
    k: usize,
    scratch: &mut Vec<(u32, f32)>,
) -> Result<()> {
    if k == row.len() {
        for &x in row {
            w.write_all(&((f64::from(x) - lse) as f32).to_le_bytes())?;
        }
        return Ok(());
    }
    scratch.clear();
    scratch.extend(row.iter().enumerate().map(|(i, &x)| (i as u32, x)));
    scratch.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
    scratch.truncate(k);
    scratch.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
    for &(i, x) in scratch.iter() {
        w.write_all(&i.to_le_bytes())?;
        w.write_all(&((f64::from(x) - lse) as f32).to_le_bytes())?;
    }
    Ok(())
}

/// Reads one position's reference distribution as (id, log-prob) pairs.
fn read_dist(r: &mut impl Read, k: usize, n_vocab: usize, out: &mut Vec<(u32, f32)>) -> Result<()> {
    out.clear();
    let mut b = [0u8; 4];
    if k == n_vocab {
        for i in 0..n_vocab {
            r.read_exact(&mut b)
                .context("the KL base file ended early")?;
            out.push((i as u32, f32::from_le_bytes(b)));
        }
    } else {
        for _ in 0..k {
            r.read_exact(&mut b)
                .context("the KL base file ended early")?;
            let id = u32::from_le_bytes(b);
            r.read_exact(&mut b)
                .context("the KL base file ended early")?;
            if id as usize >= n_vocab {
                bail!("the KL base file holds token id {id}, past the vocabulary");
            }
            out.push((id, f32::from_le_bytes(b)));
        }
    }
    Ok(())
}

/// KL(base || this run) over the base's stored tokens, the rest of the probability mass
/// (if only the top k were stored) counted as one more outcome; and the base's top token.
fn kl_of(base: &[(u32, f32)], row: &[f32], lse: f64) -> (f64, u32) {
    let (mut d, mut p_in, mut q_in) = (0.0f64, 0.0f64, 0.0f64);
    let mut top = (0u32, f32::NEG_INFINITY);
    for &(id, lp) in base {
        if lp > top.1 {
            top = (id, lp);
        }
        let p = f64::from(lp).exp();
        let lq = f64::from(row[id as usize]) - lse;
        if p > 0.0 {
            d += p * (f64::from(lp) - lq);
        }
        p_in += p;
        q_in += lq.exp();
    }
    if base.len() < row.len() {
        let (p_rest, q_rest) = ((1.0 - p_in).max(0.0), (1.0 - q_in).max(1e-30));
        if p_rest > 0.0 {
            d += p_rest * (p_rest.ln() - q_rest.ln());
        }
    }
    (d.max(0.0), top.0)
}

/// `--kv-window` and `--kv-evict`: see [`window`].
fn run_windowed(
    model: &std::sync::Arc<bitnet_core::model::Model>,
    opts: &bitnet_core::engine::EngineOptions,
    tokens: &[u32],
    bound: ContextPolicy,
) -> Result<()> {
    let t0 = std::time::Instant::now();
    let r = window::run(model, opts, tokens, bound, log_norm)?;
    let mut nll = Nll {
        sum: r.nll_sum,
        sum2: r.nll_sum2,
        n: r.scored,
    };
    nll.n = nll.n.max(1);
    note!(
        "{} tokens read through {}: {} moves, at most {} of {} blocks held, {:.1} s",
        tokens.len(),
        describe(bound),
        r.shifts,
        r.most_blocks,
        r.n_blocks,
        t0.elapsed().as_secs_f64()
    );
    println!(
        "Final estimate: PPL = {:.4} +/- {:.5} ({} tokens scored, {})",
        nll.ppl(),
        nll.ppl_err(),
        r.scored,
        describe(bound)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nll_and_its_error_match_a_hand_computation() {
        let mut n = Nll::default();
        for v in [1.0, 2.0, 3.0] {
            n.add(v);
        }
        assert!((n.ppl() - 2.0f64.exp()).abs() < 1e-12);
        // var = 2/3, se of the mean = sqrt(var / 2), times ppl.
        let want = (2.0f64 / 3.0 / 2.0).sqrt() * 2.0f64.exp();
        assert!((n.ppl_err() - want).abs() < 1e-12);
    }

    #[test]
    fn kl_is_zero_against_itself_and_positive_otherwise() {
        let row = [1.0f32, 2.0, 0.5, -1.0];
        let (lse, top) = log_norm(&row);
        assert_eq!(top, 1);
        let all: Vec<(u32, f32)> = row
            .iter()
            .enumerate()
            .map(|(i, &x)| (i as u32, (f64::from(x) - lse) as f32))
            .collect();
        let (d, t) = kl_of(&all, &row, lse);
        assert!(d.abs() < 1e-6, "{d}");
        assert_eq!(t, 1);
        let other = [2.0f32, 1.0, 0.5, -1.0];
        let (lse2, _) = log_norm(&other);
        assert!(kl_of(&all, &other, lse2).0 > 0.01);
        // Top-2 of the base: the rest bucket still sees the difference.
        let mut top2: Vec<(u32, f32)> = all.clone();
        top2.sort_by(|a, b| b.1.total_cmp(&a.1));
        top2.truncate(2);
        assert!(kl_of(&top2, &other, lse2).0 > 0.01);
        assert!(kl_of(&top2, &row, lse).0 < 1e-6);
    }
}
