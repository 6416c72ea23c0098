//! `bitnet gen-model`: writes a random-weight model of a real architecture's shapes (or a tiny
//! one for tests) in any weight type we load, deterministic from a seed. Speed does not depend
//! on weight values, so these are our benchmark models too. The destination is checked
//! before anything is generated and written through [`OutputFile`] (temporary beside it,
//! renamed when complete, removed on failure or Ctrl-C).

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use bitnet_core::config::ActBits;
use bitnet_core::synth::{PRESETS, SynthSpec, write_model_into};
use bitnet_gguf::TensorType;

use crate::output::{Progress, human_bytes, human_count};
use crate::output_file::OutputFile;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Shape preset (see --list-presets): 2b-4t, large, 3b, falcon3-1b, tiny, ...
    #[arg(long, default_value = "tiny")]
    pub preset: String,
    /// Output file.
    #[arg(short = 'o', long, required_unless_present = "list_presets")]
    pub output: Option<PathBuf>,
    /// PRNG seed: the same seed writes the same bytes.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Storage type of the layer projections: i2_s, tq2_0, tq1_0, q1_0 (sign-only 1-bit), or a float type.
    #[arg(long = "weight-type")]
    pub weight_type: Option<String>,
    /// Storage type of the token embedding: f16, f32, bf16, q8_0, q6_k, q4_0.
    #[arg(long = "embd-type")]
    pub embd_type: Option<String>,
    /// Untied output head of this type (default: the preset's; `tied` ties it to the embedding).
    #[arg(long = "head-type")]
    pub head_type: Option<String>,
    /// Copy the tokenizer from this GGUF (a vocab-only file is enough).
    #[arg(long)]
    pub vocab: Option<PathBuf>,
    /// Share of zeros in ternary matrices, in [0, 1).
    #[arg(long)]
    pub zero_share: Option<f32>,
    /// Activation bits: 8 (BitNet b1.58) or 1 (binary activations, XNOR/popcount path).
    #[arg(long, default_value_t = 8)]
    pub act_bits: u8,
    /// Override the number of layers (e.g. a 2-layer model of the 2B-4T widths).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Leave out the per-projection input norms of the bitnet-embedding presets: the layout
    /// of their float teachers, whose projections (with `--weight-type f16`) run as float
    /// products, not BitLinear.
    #[arg(long)]
    pub no_proj_norms: bool,
    /// List the presets and exit.
    #[arg(long)]
    pub list_presets: bool,
}

fn parse_type(name: &str) -> Result<TensorType> {
    TensorType::from_name(&name.to_ascii_uppercase())
        .with_context(|| format!("unknown tensor type {name:?}"))
}

pub fn run(args: Args) -> Result<()> {
    if args.list_presets {
        let mut out = io::stdout().lock();
        for p in PRESETS {
            writeln!(out, "{:<21} {}", p.name, p.description)?;
        }
        return Ok(());
    }
    let Some(output) = &args.output else {
        bail!("-o OUTPUT is required")
    };
    let out = OutputFile::create(output)?;
    let mut spec = SynthSpec::preset(&args.preset)?;
    spec.seed = args.seed;
    if let Some(t) = &args.weight_type {
        spec.weight_type = parse_type(t)?;
    }
    if let Some(t) = &args.embd_type {
        spec.embd_type = parse_type(t)?;
    }
    if let Some(t) = &args.head_type {
        spec.head_type = if t.eq_ignore_ascii_case("tied") {
            None
        } else {
            Some(parse_type(t)?)
        };
    }
    if let Some(z) = args.zero_share {
        spec.zero_share = z;
    }
    if let Some(l) = args.layers {
        spec.n_layer = l;
    }
    if args.no_proj_norms {
        spec.proj_norms = false;
    }
    spec.vocab.clone_from(&args.vocab);
    spec.act_bits = match args.act_bits {
        8 => ActBits::Int8,
        1 => ActBits::Binary,
        b => bail!("--act-bits {b}: expected 8 or 1"),
    };

    let start = Instant::now();
    let mut progress = Progress::default();
    let mut next_step = 0.0;
    let report = write_model_into(&spec, out.file(), out.temp_path(), |done, total| {
        let pct = if total > 0 {
            done as f64 * 100.0 / total as f64
        } else {
            100.0
        };
        let msg = format!(
            "writing {}: {pct:5.1}% of {}",
            output.display(),
            human_bytes(total)
        );
        if pct >= next_step {
            // a line per 10% in logs; on a terminal the line is redrawn continuously
            next_step += 10.0;
            progress.step(&msg);
        } else {
            progress.update(&msg, false);
        }
    })
    .with_context(|| format!("generating {}", output.display()))?;
    out.commit()?;
    progress.clear();
    writeln!(
        io::stdout(),
        "wrote {} ({}, {}, {} weights, arch {}, {} of {}, weights {}) in {:.1}s",
        output.display(),
        human_bytes(report.file_bytes),
        crate::output::count(report.n_tensors, "tensor"),
        human_count(report.n_params),
        report.config.arch_name,
        crate::output::count(report.config.n_layer, "layer"),
        report.config.n_embd,
        spec.weight_type.name(),
        start.elapsed().as_secs_f64()
    )?;
    Ok(())
}
