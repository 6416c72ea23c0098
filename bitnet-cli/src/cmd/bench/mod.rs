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
//! trained context). `--embeddings` measures embedding throughput instead (`embed.rs`).

mod args;
pub mod compare;
pub mod embed;
pub mod membw;
pub mod paired;
mod progress;
pub mod report;
pub mod speculate;
pub mod suite;

use std::fs;
use std::io::{self, Write};

use anyhow::{Context, Result, bail};

use bitnet_core::config::ModelConfig;

pub use self::args::Args;
use self::args::model_args;
use self::progress::{clear_progress, progress};
use self::report::{BenchReport, Format, MachineInfo};
use crate::args::model::parse_isa;
use crate::args::model::{note_zero_defaults, warn_threads};
use crate::output::note;
use crate::output_file::OutputFile;
use crate::setup::{load_model, open_gguf};

pub fn run(args: Args) -> Result<()> {
    if let Some(files) = &args.compare {
        return run_compare(&files[0], &files[1], args.min_drop, args.fail_on_regress);
    }
    // Speculation's tuning flags without a draft source are refused, as in the other
    // commands, not ignored by the pp/tg suite.
    args.speculate
        .check(bitnet_core::engine::EngineOptions::default().batch)?;
    if speculate::wanted(&args) {
        return speculate::run(&args);
    }
    if args.embeddings {
        return embed::run(&args);
    }
    if args.models.is_empty() && !args.membw {
        bail!("nothing to do: give -m MODEL (one or more) or --membw");
    }
    if let Some(b) = args.batch.iter().find(|&&b| b == 0 || b > 1024) {
        bail!("--npl {b} (-b {b}): the number of sequences decoded together must be in 1..=1024");
    }
    if args.reps == 0 {
        bail!("-r must be at least 1");
    }
    let has_tests = args.n_prompt.iter().chain(&args.n_gen).any(|&n| n > 0);
    if !args.models.is_empty() && !has_tests {
        bail!("nothing to measure: every -p and -n is 0 (give a prompt or generation length)");
    }
    if args.interleave && (args.models.is_empty() || !args.n_gen.iter().any(|&n| n > 0)) {
        bail!(
            "--interleave pairs the tg tests' repetitions: give a model (-m) and a generation length (-n N > 0)"
        );
    }
    let threads_list = if args.threads.is_empty() {
        vec![0]
    } else {
        args.threads.clone()
    };
    if let Some(&t) = threads_list.iter().max() {
        warn_threads(t);
    }
    // bench's -c 0 is what the tests need, said in its help; -t 0 is the default as anywhere.
    note_zero_defaults(args.threads.contains(&0).then_some(0), None);
    suite::context_size(&args)?;
    suite::batch_size(&args)?;
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
                membw::measure(membw::DEFAULT_PROBE_BYTES, t, 5)
            })
            .collect()
    } else {
        Vec::new()
    };
    let bandwidth = bandwidths.last().copied();

    let mut rows = Vec::new();
    for path in &args.models {
        for kernel in &kernels {
            let model_args = model_args(&args, None, kernel.clone());
            let opts = model_args.load_options()?;
            reset_peak_rss();
            progress(&format!("loading {}", path.display()));
            // One load (and repack) per model and kernel set; each thread count gets its
            // own engine over the shared model.
            let model = load_model(path, &opts)?;
            // The head decides much of decode's speed, and `auto` picks it per file.
            clear_progress();
            note!("{}: head {}", path.display(), model.head_mode().name());
            let mut configs = Vec::new();
            for &threads in &threads_list {
                for &k in &args.cache_type_k {
                    for &v in &args.cache_type_v {
                        configs.push((threads, (k, v)));
                    }
                }
            }
            let new_config =
                |(threads, kv)| suite::Config::new(&args, path, &model, threads, kv, &bandwidths);
            if args.interleave {
                let mut cfgs: Vec<suite::Config> =
                    configs.into_iter().map(new_config).collect::<Result<_>>()?;
                for cfg in &mut cfgs {
                    suite::run_pp(&args, cfg, &mut rows)?;
                }
                suite::run_tg(&args, &mut cfgs, &mut rows)?;
                if args.mixed {
                    for cfg in &mut cfgs {
                        suite::run_mixed(&args, cfg, &mut rows)?;
                    }
                }
            } else {
                // One engine at a time: its KV pool is freed before the next is made.
                for c in configs {
                    let mut cfg = new_config(c)?;
                    suite::run_pp(&args, &mut cfg, &mut rows)?;
                    suite::run_tg(&args, std::slice::from_mut(&mut cfg), &mut rows)?;
                    if args.mixed {
                        suite::run_mixed(&args, &mut cfg, &mut rows)?;
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
            membw_bytes: bandwidth.map(|b| b.bytes as u64),
            membw_by_threads: bandwidths
                .iter()
                .map(|b| report::ThreadBandwidth {
                    threads: b.threads,
                    gbs: b.gbs,
                })
                .collect(),
            numa: Some(numa_layout(args.numa)),
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
    let file = open_gguf(path, bitnet_gguf::LoadMode::Mmap)?;
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

/// Resets the kernel's peak-RSS mark for this process (Linux: `echo 5 > /proc/self/clear_refs`),
/// so each model's peak is its own. Best effort elsewhere: Windows cannot reset its peak
/// working set, so there a later model's peak is at least an earlier one's.
fn reset_peak_rss() {
    let _ = fs::write("/proc/self/clear_refs", "5");
}

/// The CPU's name from `/proc/cpuinfo`; elsewhere (macOS, Windows) the architecture.
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

/// The node layout the run saw, and the `--numa` mode (`bench` reports both).
fn numa_layout(mode: Option<bitnet_core::numa::NumaMode>) -> String {
    let nodes = match bitnet_core::numa::Topology::current() {
        Ok(t) => t.describe(),
        Err(e) => format!("unknown ({e})"),
    };
    match mode {
        Some(m) => format!("{nodes}; --numa {}", m.name()),
        None => nodes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_413), (2025, 11, 21));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
