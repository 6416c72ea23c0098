//! `bitnet bench --embeddings`: embedding throughput, as a retrieval index builds it: `-b`
//! inputs of `-p` tokens each embedded in one call (`bitnet_core::embed::embed_batch`: the
//! inputs share forward passes of `--batch-size` tokens, each pooled as the file says and
//! L2-normalized), reported as inputs a second and tokens a second, mean and spread over
//! the repetitions, for every model, kernel set and thread count. With several models, every
//! row also gives its speed against the first model's on the same test (an I2_S file against
//! the F16 teacher of the same shape, say).

use std::io::{self, Write};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use bitnet_core::embed::{Normalize, Pooling, embed_batch};
use bitnet_core::engine::Engine;

use super::args::{Args, model_args};
use super::progress::{clear_progress, progress, rep_label};
use crate::args::model::parse_isa;
use crate::output::note;
use crate::output_file::OutputFile;
use crate::setup::load_model;

/// One measured test.
#[derive(Debug, serde::Serialize)]
struct Row {
    model: String,
    kernel: String,
    threads: usize,
    tokens_per_input: usize,
    inputs_per_call: usize,
    /// Inputs a second: mean and standard deviation over the repetitions.
    inputs_per_sec: f64,
    inputs_per_sec_sd: f64,
    tokens_per_sec: f64,
    /// This row's speed against the first model's on the same test.
    vs_first_model: Option<f64>,
}

pub fn run(args: &Args) -> Result<()> {
    if args.models.is_empty() {
        bail!("give the models to measure with -m");
    }
    if args.reps == 0 {
        bail!("-r must be at least 1");
    }
    let lens: Vec<usize> = args.n_prompt.iter().copied().filter(|&p| p > 0).collect();
    if lens.is_empty() {
        bail!("--embeddings measures inputs of -p tokens: give -p N > 0");
    }
    if let Some(b) = args.batch.iter().find(|&&b| b == 0 || b > 4096) {
        bail!("-b {b}: the inputs embedded in one call must be in 1..=4096");
    }
    let report_file = args
        .json_report
        .as_deref()
        .map(OutputFile::create)
        .transpose()?;
    let threads: Vec<Option<usize>> = if args.threads.is_empty() {
        vec![None]
    } else {
        args.threads.iter().map(|&t| Some(t)).collect()
    };
    let kernels: Vec<Option<String>> = if args.kernels.is_empty() {
        vec![None]
    } else {
        args.kernels.iter().cloned().map(Some).collect()
    };
    for k in kernels.iter().flatten() {
        parse_isa(Some(k))?;
    }
    let mut rows: Vec<Row> = Vec::new();
    for path in &args.models {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |s| s.to_string_lossy().into(),
        );
        for kernel in &kernels {
            let margs = model_args(args, None, kernel.clone());
            let model = load_model(path, &margs.load_options()?)?;
            let cfg = model.config();
            if !cfg.is_embedding_model() {
                note!(
                    "{name} is not an embedding model (no pooling_type, no per-projection input \
                     norms): its final hidden states are measured all the same"
                );
            }
            let pooling = cfg
                .pooling_type
                .and_then(|v| Pooling::from_gguf(i64::from(v)))
                .unwrap_or(Pooling::Last);
            let longest = lens.iter().copied().max().unwrap_or(1);
            if longest > cfg.n_ctx_train {
                bail!(
                    "-p {longest}: {name} was trained on {} tokens at most",
                    cfg.n_ctx_train
                );
            }
            for &t in &threads {
                for &p in &lens {
                    for &b in &args.batch {
                        let mut opts = model_args(args, t, kernel.clone()).engine_options();
                        // Room for every input of a call at once (the cache holds each
                        // input until it is pooled), unless -c says otherwise.
                        opts.n_ctx = args.ctx.filter(|&c| c > 0).unwrap_or(p * b).max(p);
                        let mut engine =
                            Engine::new(model.clone(), &opts).context("creating the engine")?;
                        let inputs = make_inputs(cfg.n_vocab, p, b);
                        let refs: Vec<&[u32]> = inputs.iter().map(Vec::as_slice).collect();
                        let mut secs = Vec::with_capacity(args.reps);
                        for run in 0..args.warmup + args.reps {
                            progress(&format!(
                                "{name} {} t{} embed {b} x {p} tokens, {}",
                                model.isa(),
                                engine.threads(),
                                rep_label(run, args.warmup, args.reps)
                            ));
                            let start = Instant::now();
                            let v = embed_batch(&mut engine, &refs, pooling, Normalize(2))?;
                            let s = start.elapsed().as_secs_f64();
                            if v.iter().flatten().flatten().any(|x| !x.is_finite()) {
                                bail!("{name}: an embedding is not finite");
                            }
                            if run >= args.warmup {
                                secs.push(s);
                            }
                        }
                        let rates: Vec<f64> = secs.iter().map(|s| b as f64 / s).collect();
                        let (mean, sd) = mean_sd(&rates);
                        rows.push(Row {
                            model: name.clone(),
                            kernel: model.isa().to_string(),
                            threads: engine.threads(),
                            tokens_per_input: p,
                            inputs_per_call: b,
                            inputs_per_sec: mean,
                            inputs_per_sec_sd: sd,
                            tokens_per_sec: mean * p as f64,
                            vs_first_model: None,
                        });
                    }
                }
            }
        }
    }
    clear_progress();
    ratios(&mut rows, &args.models.len());
    let mut out = io::stdout().lock();
    print_table(&rows, &mut out)?;
    if let Some(file) = report_file {
        let body = serde_json::to_vec_pretty(&serde_json::json!({ "embeddings": rows }))?;
        let mut f = file.file();
        f.write_all(&body)
            .with_context(|| format!("writing {}", file.path().display()))?;
        file.commit()?;
    }
    Ok(())
}

/// `b` inputs of `p` tokens, different from each other, in the vocabulary.
fn make_inputs(n_vocab: usize, p: usize, b: usize) -> Vec<Vec<u32>> {
    (0..b)
        .map(|i| {
            (0..p)
                .map(|j| ((j * 7919 + i * 104_729 + 13) % n_vocab) as u32)
                .collect()
        })
        .collect()
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Each row's speed against the first model's row of the same test (kernel, threads, shape).
fn ratios(rows: &mut [Row], n_models: &usize) {
    if *n_models < 2 {
        return;
    }
    let first = rows.first().map(|r| r.model.clone());
    let base: Vec<(String, usize, usize, usize, f64)> = rows
        .iter()
        .filter(|r| Some(&r.model) == first.as_ref())
        .map(|r| {
            (
                r.kernel.clone(),
                r.threads,
                r.tokens_per_input,
                r.inputs_per_call,
                r.inputs_per_sec,
            )
        })
        .collect();
    for r in rows.iter_mut() {
        r.vs_first_model = base
            .iter()
            .find(|b| {
                (&b.0, b.1, b.2, b.3)
                    == (&r.kernel, r.threads, r.tokens_per_input, r.inputs_per_call)
            })
            .map(|b| r.inputs_per_sec / b.4);
    }
}

fn print_table(rows: &[Row], out: &mut impl Write) -> io::Result<()> {
    let ratio = rows.iter().any(|r| r.vs_first_model.is_some());
    writeln!(
        out,
        "| model | kernel | threads | tokens/input | inputs/call | inputs/s | tokens/s |{}",
        if ratio { " vs first model |" } else { "" }
    )?;
    writeln!(
        out,
        "|---|---|---:|---:|---:|---:|---:|{}",
        if ratio { "---:|" } else { "" }
    )?;
    for r in rows {
        write!(
            out,
            "| {} | {} | {} | {} | {} | {:.2} ± {:.2} | {:.1} |",
            r.model,
            r.kernel,
            r.threads,
            r.tokens_per_input,
            r.inputs_per_call,
            r.inputs_per_sec,
            r.inputs_per_sec_sd,
            r.tokens_per_sec
        )?;
        match (ratio, r.vs_first_model) {
            (true, Some(x)) => writeln!(out, " {x:.2}x |")?,
            (true, None) => writeln!(out, " |")?,
            (false, _) => writeln!(out)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(model: &str, p: usize, rate: f64) -> Row {
        Row {
            model: model.into(),
            kernel: "avx2".into(),
            threads: 2,
            tokens_per_input: p,
            inputs_per_call: 1,
            inputs_per_sec: rate,
            inputs_per_sec_sd: 0.0,
            tokens_per_sec: rate * p as f64,
            vs_first_model: None,
        }
    }

    #[test]
    fn ratios_pair_rows_of_the_same_test() {
        let mut rows = vec![
            row("a", 128, 10.0),
            row("a", 512, 2.0),
            row("b", 128, 25.0),
            row("b", 512, 3.0),
        ];
        ratios(&mut rows, &2);
        let got: Vec<Option<f64>> = rows.iter().map(|r| r.vs_first_model).collect();
        assert_eq!(got, [Some(1.0), Some(1.0), Some(2.5), Some(1.5)]);
        let mut one = vec![row("a", 128, 10.0)];
        ratios(&mut one, &1);
        assert_eq!(one[0].vs_first_model, None);
        let inputs = make_inputs(100, 5, 3);
        assert_eq!(inputs.len(), 3);
        assert!(
            inputs
                .iter()
                .all(|i| i.len() == 5 && i.iter().all(|&t| t < 100))
        );
        assert_ne!(inputs[0], inputs[1]);
    }
}
