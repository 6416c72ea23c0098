//! `bitnet calibrate -m MODEL -f TEXT --max-kld X -o PLAN`: measures how much each layer's
//! output distribution moves when only that layer's K cache, V cache or activations drop
//! to a cheaper setting (bitnet-core's `plan::Calibration`), prints the per-layer table, and
//! writes the plan with the fewest KV bytes a token whose KL divergence, measured as a
//! whole on the same text, stays within the budget. `--compare-uniform` also measures every
//! single K/V pair for all layers and names the cheapest that does as well as the plan.
//! The text is cut as `perplexity` cuts it (`-c` tokens a window, BOS first, the second
//! half scored), so a plan's budget is what `perplexity --kl-divergence` reports for it.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use bitnet_core::kv::{KvRotate, KvType};
use bitnet_core::plan::{
    Calibration, CalibrationOptions, LayerPlan, PrecisionPlan, Setting, windows_of,
};

use crate::args::model::{ModelArgs, parse_kv_rotate, parse_kv_type};
use crate::args::prompt::read_text_as;
use crate::output::{Progress, note};
use crate::output_file::OutputFile;
use crate::setup::load_model;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The GGUF model file (models/shakespeare.gguf ships with the repository).
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// Calibration text ('-' = standard input); not the text you judge the plan on.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: PathBuf,
    /// Windows of the text to run (default 8; 0 = all of it).
    #[arg(long, default_value_t = 8)]
    pub samples: usize,
    /// The plan's KL-divergence budget: mean nats a scored token, as `perplexity
    /// --kl-divergence` reports it (0.001 is about q8_0 K with q4_0 V on every layer of the
    /// shipped model).
    #[arg(long, value_name = "X", value_parser = budget)]
    pub max_kld: f64,
    /// Write the plan here (JSON; `--plan FILE` runs it).
    #[arg(short = 'o', long, value_name = "PLAN")]
    pub output: PathBuf,
    /// The KV formats to try on each layer, comma-separated (f16 is the reference).
    #[arg(long, value_delimiter = ',', value_parser = parse_kv_type,
          default_value = "q8_0,fp8,q4_0,b1")]
    pub kv_types: Vec<KvType>,
    /// How the low-bit formats are stored (auto: q4_0 and b1 Hadamard-rotated).
    #[arg(long = "plan-rotate", value_name = "SIDES", value_parser = parse_kv_rotate,
          default_value = "auto")]
    pub plan_rotate: KvRotate,
    /// Do not measure int4 activations (they are measured for the table, never chosen: on
    /// this engine they run on the int8 kernels and save nothing).
    #[arg(long)]
    pub no_acts: bool,
    /// Also measure each single K/V pair on every layer and compare the plan with the
    /// cheapest that is as accurate.
    #[arg(long)]
    pub compare_uniform: bool,
    /// Write the per-layer table (markdown) here too.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    #[command(flatten)]
    pub model_args: ModelArgs,
}

fn budget(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err("a KL-divergence budget is a number, 0 or more (mean nats a token)".into()),
    }
}

pub fn run(args: Args) -> Result<()> {
    if args.model_args.plan.is_some() {
        bail!("--plan: calibrate measures from the all-f16 reference; it takes no plan");
    }
    let out = OutputFile::create(&args.output)?;
    let report = args.report.as_deref().map(OutputFile::create).transpose()?;
    let text = read_text_as(&args.file, "the calibration text")?;
    let load = args.model_args.load_options()?;
    let mut engine = args.model_args.engine_options();
    let model = load_model(&args.model, &load)?;
    let tok = model
        .tokenizer()
        .context("the model file has no tokenizer (tokenizer.ggml.* keys)")?;
    let n_ctx = super::perplexity::window_size(&model, &mut engine)?;
    let tokens = tok.encode(&text, true, false);
    let windows = windows_of(&tokens, n_ctx, args.samples, tok.bos_id());
    if windows.is_empty() {
        bail!(
            "the text has {} tokens, fewer than one window of -c {n_ctx}: give a longer text \
             or a smaller -c",
            tokens.len()
        );
    }
    let kv_types: Vec<KvType> = args
        .kv_types
        .iter()
        .copied()
        .filter(|&t| t != KvType::F16)
        .collect();
    let cfg = model.config();
    for &t in &kv_types {
        if t.row_bytes(cfg.head_dim).is_none() {
            bail!(
                "--kv-types {}: its blocks do not divide the head dimension {}",
                t.name(),
                cfg.head_dim
            );
        }
    }
    note!(
        "calibrating {} layers on {} windows of {n_ctx} tokens ({} scored), trying K/V {}{}",
        cfg.n_layer,
        windows.len(),
        windows.len() * (n_ctx - 1 - n_ctx / 2),
        names(&kv_types),
        if args.no_acts {
            ""
        } else {
            " and int4 activations"
        }
    );
    let opts = CalibrationOptions {
        engine,
        kv_types: kv_types.clone(),
        acts_int4: !args.no_acts,
        kv_rotate: args.plan_rotate,
    };
    let t0 = Instant::now();
    let mut progress = Progress::default();
    let cal = Calibration::run(model.clone(), windows, opts, |p| {
        let eta = t0.elapsed().as_secs_f64() / p.done as f64 * (p.total - p.done) as f64;
        progress.step(&format!(
            "calibrate: {}/{} {} ({:.1} s; about {:.0} s left)",
            p.done, p.total, p.what, p.secs, eta
        ));
    })
    .context("measuring the layers")?;
    progress.clear();
    let table = sensitivity_table(&cal, &kv_types, !args.no_acts);
    print!("{table}");

    let model_name = args
        .model
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let plan = cal
        .choose(args.max_kld, &model_name, |p| {
            note!("calibrate: {}", p.what)
        })
        .context("choosing the plan")?;
    let measured = plan.provenance.as_ref().map_or(0.0, |p| p.measured_kld);
    let bytes = |p: &PrecisionPlan| p.kv_bytes_per_token(cfg.n_head_kv, cfg.head_dim);
    let f16 = PrecisionPlan::uniform(cfg.n_layer, LayerPlan::default(), args.plan_rotate);
    let (plan_bytes, f16_bytes) = (
        bytes(&plan).context("plan bytes")?,
        bytes(&f16).context("f16 bytes")?,
    );
    let mut summary = format!(
        "\nplan (budget {}): {}\n  KV {plan_bytes} bytes a token ({:.1}% of f16's {f16_bytes}); \
         KL divergence {measured:.6} on the calibration text\n",
        args.max_kld,
        plan.describe(),
        100.0 * plan_bytes as f64 / f16_bytes as f64
    );
    if args.compare_uniform {
        summary += &compare_uniform(&cal, &plan, &kv_types, args.plan_rotate, measured, |p| {
            bytes(p)
        })?;
    }
    print!("{summary}");
    out.file().write_all(plan.to_json().as_bytes())?;
    out.commit()?;
    note!("wrote {} (run it with --plan)", args.output.display());
    if let Some(r) = report {
        r.file().write_all(format!("{table}{summary}").as_bytes())?;
        r.commit()?;
    }
    Ok(())
}

fn names(types: &[KvType]) -> String {
    types
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The per-layer table: each setting's KL divergence (and top-1 agreement) when only that
/// layer takes it.
fn sensitivity_table(cal: &Calibration, kv_types: &[KvType], acts: bool) -> String {
    let mut settings: Vec<Setting> = Vec::new();
    settings.extend(kv_types.iter().map(|&t| Setting::K(t)));
    settings.extend(kv_types.iter().map(|&t| Setting::V(t)));
    if acts {
        settings.push(Setting::Acts(bitnet_core::plan::ActPrecision::Int4));
    }
    let mut s = format!(
        "per-layer sensitivity: mean KL divergence from the all-f16, int8 run when only that \
         layer changes ({} windows, {} scored tokens)\n\n| layer |",
        cal.windows(),
        cal.scored_tokens()
    );
    for st in &settings {
        let _ = write!(s, " {} |", st.describe());
    }
    s += "\n|---:|";
    s += &"---:|".repeat(settings.len());
    s += "\n";
    for l in &cal.layers {
        let _ = write!(s, "| {} |", l.layer);
        for st in &settings {
            match l.settings.iter().find(|m| m.setting == *st) {
                Some(m) => {
                    let _ = write!(s, " {:.6} ({:.1}%) |", m.kld, 100.0 * m.top1);
                }
                None => s += " - |",
            }
        }
        s += "\n";
    }
    s
}

/// Every single (K, V) pair on all layers, measured whole; the cheapest one whose KL
/// divergence is no worse than the plan's, against the plan.
fn compare_uniform(
    cal: &Calibration,
    plan: &PrecisionPlan,
    kv_types: &[KvType],
    rotate: KvRotate,
    plan_kld: f64,
    bytes: impl Fn(&PrecisionPlan) -> Option<u64>,
) -> Result<String> {
    let mut all = vec![KvType::F16];
    all.extend_from_slice(kv_types);
    let n_layer = plan.n_layer();
    let mut rows: Vec<(KvType, KvType, u64, f64)> = Vec::new();
    for &k in &all {
        for &v in &all {
            let p = PrecisionPlan::uniform(
                n_layer,
                LayerPlan {
                    k,
                    v,
                    ..LayerPlan::default()
                },
                rotate,
            );
            let (kld, _) = cal.measure(&p).context("measuring a uniform pair")?;
            rows.push((k, v, bytes(&p).unwrap_or(u64::MAX), kld));
            note!(
                "calibrate: uniform K {} V {}: KLD {kld:.6}",
                k.name(),
                v.name()
            );
        }
    }
    rows.sort_by(|a, b| a.2.cmp(&b.2).then(a.3.total_cmp(&b.3)));
    let mut s = String::from(
        "\nevery layer on one K/V pair (bytes a token, KL divergence on the calibration text):\n\n\
         | K | V | bytes/token | KLD |\n|---|---|---:|---:|\n",
    );
    for (k, v, b, kld) in &rows {
        let _ = writeln!(s, "| {} | {} | {b} | {kld:.6} |", k.name(), v.name());
    }
    let plan_bytes = bytes(plan).unwrap_or(u64::MAX);
    match rows.iter().find(|r| r.3 <= plan_kld) {
        Some((k, v, b, kld)) => {
            let _ = writeln!(
                s,
                "\nthe cheapest single pair as accurate as the plan (KLD {plan_kld:.6}): K {} V {} \
                 at {b} bytes a token (KLD {kld:.6}); the plan takes {plan_bytes} ({:.1}%)",
                k.name(),
                v.name(),
                100.0 * plan_bytes as f64 / *b as f64
            );
        }
        None => s += "\nno single pair is as accurate as the plan\n",
    }
    Ok(s)
}
