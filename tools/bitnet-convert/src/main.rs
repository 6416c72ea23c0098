//! `bitnet-convert HF_DIR -o OUT.gguf`: the command line over the `bitnet_convert` library,
//! with a progress display (total and per tensor, hidden when stderr is not a terminal) and
//! Ctrl-C cleanup of the partial output.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use bitnet_convert::{Options, Progress, TypeOptions};
use bitnet_gguf::TensorType;
use clap::Parser;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Converts a Hugging Face safetensors checkpoint of a BitNet b1.58 / ternary model, or of a
/// BitNet embedding model (qwen3, gemma3_text), to GGUF.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The checkpoint directory (config.json, *.safetensors, tokenizer files).
    hf_dir: PathBuf,
    /// The GGUF file to write (required unless --dry-run; --outfile as llama.cpp's
    /// convert_hf_to_gguf.py spells it).
    #[arg(short, long, visible_alias = "outfile")]
    output: Option<PathBuf>,
    /// Projection type: i2_s (bitnet.cpp), tq2_0 or tq1_0 (llama.cpp); for the BitNet
    /// embedding models i2_s, f16 or f32 (float projections, ternarized at load).
    #[arg(long, default_value = "i2_s")]
    outtype: String,
    /// Token embedding type: f16, f32, bf16 or q8_0 [default: f16; f32 with --outtype f32
    /// on the embedding models].
    #[arg(long)]
    embd_type: Option<String>,
    /// Output head type (untied heads only): f16, f32, bf16 or q8_0 [default: f16]; the
    /// embedding models have no head.
    #[arg(long)]
    head_type: Option<String>,
    /// Pre-tokenizer name to write for a tokenizer.json whose pre-tokenizer is not
    /// recognised (llama-bpe, falcon3, gpt-2, qwen2, starcoder, ...).
    #[arg(long)]
    pre: Option<String>,
    /// `general.name` (default: the checkpoint directory's name).
    #[arg(long)]
    name: Option<String>,
    /// Keep a precision plan (`bitnet calibrate -o PLAN`) in the file's metadata;
    /// `bitnet ... --plan OUT.gguf` runs it.
    #[arg(long, value_name = "PLAN")]
    calibration: Option<PathBuf>,
    /// Print the tensor mapping and the metadata, write nothing.
    #[arg(long)]
    dry_run: bool,
}

fn parse_type(flag: &str, s: &str, allowed: &[TensorType]) -> Result<TensorType> {
    match TensorType::from_name(s) {
        Some(t) if allowed.contains(&t) => Ok(t),
        _ => bail!(
            "{flag} {s:?}: expected one of {}",
            allowed
                .iter()
                .map(|t| t.name().to_ascii_lowercase())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn human(n: u64) -> String {
    let mib = n as f64 / (1u64 << 20) as f64;
    if mib >= 1024.0 {
        format!("{:.2} GiB", mib / 1024.0)
    } else {
        format!("{mib:.1} MiB")
    }
}

fn run(args: Args) -> Result<()> {
    let floats = [
        TensorType::F16,
        TensorType::F32,
        TensorType::BF16,
        TensorType::Q8_0,
    ];
    let opts = Options {
        types: TypeOptions {
            weights: parse_type(
                "--outtype",
                &args.outtype,
                &[
                    TensorType::I2_S,
                    TensorType::TQ2_0,
                    TensorType::TQ1_0,
                    TensorType::F16,
                    TensorType::F32,
                ],
            )?,
            embd: args
                .embd_type
                .map(|t| parse_type("--embd-type", &t, &floats))
                .transpose()?,
            head: args
                .head_type
                .map(|t| parse_type("--head-type", &t, &floats))
                .transpose()?,
        },
        pre: args.pre,
        name: args.name,
        calibration: args
            .calibration
            .as_deref()
            .map(|p| {
                bitnet_core::plan::PrecisionPlan::read(p)
                    .with_context(|| format!("--calibration {}", p.display()))
            })
            .transpose()?,
    };
    if !args.dry_run && args.output.is_none() {
        bail!("-o OUT.gguf is required (or --dry-run)");
    }
    // Check the destination before reading anything.
    if let Some(out) = &args.output
        && !args.dry_run
    {
        bitnet_convert::output::check_destination(out)?;
    }
    let t0 = Instant::now();
    let plan = bitnet_convert::plan(&args.hf_dir, &opts)
        .with_context(|| format!("reading {}", args.hf_dir.display()))?;
    if args.dry_run {
        print!("{}", bitnet_convert::report::dry_run(&plan));
        return Ok(());
    }
    for w in plan.vocab.warnings.iter().chain(&plan.notes) {
        eprintln!("warning: {w}");
    }
    let out = args.output.as_deref().unwrap_or_else(|| unreachable!());
    bitnet_convert::output::install_interrupt_cleanup().context("installing the Ctrl-C handler")?;

    let tty = std::io::stderr().is_terminal();
    let multi = MultiProgress::with_draw_target(if tty {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    let style =
        |t: &str| ProgressStyle::with_template(t).unwrap_or_else(|_| ProgressStyle::default_bar());
    let total = multi.add(ProgressBar::new(0));
    total.set_style(
        style("{prefix:>7} [{bar:40}] {bytes}/{total_bytes} ({eta})").progress_chars("=> "),
    );
    total.set_prefix("total");
    let tensor = multi.add(ProgressBar::new(0));
    tensor.set_style(style("{prefix:>7} [{bar:40}] {msg}").progress_chars("=> "));
    let mut n_tensors = 0;
    let bytes = bitnet_convert::write_file(&plan, out, &mut |p| match p {
        Progress::Start { total: t, tensors } => {
            total.set_length(t);
            n_tensors = tensors;
        }
        Progress::Tensor { index, job } => {
            tensor.set_length(job.info.n_bytes);
            tensor.set_position(0);
            tensor.set_prefix(format!("{}/{n_tensors}", index + 1));
            tensor.set_message(format!("{} ({})", job.info.name, job.info.ty.name()));
        }
        Progress::Bytes(n) => {
            total.inc(n);
            tensor.inc(n);
        }
        Progress::Done => {
            tensor.finish_and_clear();
            total.finish_and_clear();
        }
    })
    .with_context(|| format!("writing {}", out.display()))?;
    eprintln!(
        "wrote {}: {} ({}), {} tensors, {} in {:.1} s",
        out.display(),
        plan.config.arch_name,
        plan.jobs.first().map_or("-", |_| plan.types.weights.name()),
        plan.jobs.len(),
        human(bytes),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The error and its causes joined with `: `, as `bitnet` prints them (its
/// `output::error_chain`): a cause the message already carries is skipped, and a cause's
/// leading `PATH: ` is dropped where the message already ends with that path.
fn error_chain(err: &anyhow::Error) -> String {
    let mut msg = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if msg.contains(&text) {
            continue;
        }
        let text = without_repeated_head(&msg, &text).to_owned();
        msg.push_str(": ");
        msg.push_str(&text);
    }
    msg
}

/// `text` without a leading `HEAD: ` that `msg` already ends with (`reading x` and `x: not
/// a directory` say x once).
fn without_repeated_head<'a>(msg: &str, text: &'a str) -> &'a str {
    match text.split_once(": ") {
        Some((head, rest))
            if !head.is_empty()
                && msg
                    .strip_suffix(head)
                    .is_some_and(|before| before.is_empty() || before.ends_with(' ')) =>
        {
            rest
        }
        _ => text,
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}
