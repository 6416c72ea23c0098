//! `bitnet logits -m MODEL.gguf --tokens 1,512,29871 -o OUT.f32`: evaluates the ids in one
//! batch and writes every position's logits as raw little-endian f32 `[n_tokens][n_vocab]`,
//! the format of `testdata/golden/logits/`, for comparing engines and debugging. The
//! output path is checked before the model is loaded; the tokens must fit the context (`-c`,
//! default the model's, as for `generate`).

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use bitnet_core::engine::Session;

use crate::args::model::ModelArgs;
use crate::args::prompt::PromptArgs;
use crate::output::note;
use crate::output_file::OutputFile;
use crate::setup::limits::check_context;
use crate::setup::load_model;

#[derive(Debug, clap::Args)]
#[command(
    mut_arg("prompt", |a| a.help(
        "Evaluate this text, tokenized with BOS, instead of --tokens (may start with '-')"
    )),
    mut_arg("file", |a| a.help(
        "Evaluate the text of FILE ('-' = standard input) instead of --tokens"
    ))
)]
pub struct Args {
    /// The GGUF model file (models/shakespeare.gguf ships with the repository).
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// Token ids, comma-separated.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["prompt", "file"])]
    pub tokens: Vec<u32>,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Output file: raw little-endian float32, [n_tokens][n_vocab].
    #[arg(short = 'o', long)]
    pub output: PathBuf,
    #[command(flatten)]
    pub model_args: ModelArgs,
}

pub fn run(args: Args) -> Result<()> {
    let text = args.prompt.text()?;
    if text.is_none() && args.tokens.is_empty() {
        bail!("nothing to evaluate: give --tokens IDS, -p TEXT or -f FILE");
    }
    let out = OutputFile::create(&args.output)?;
    let opts = args.model_args.load_options()?;
    let mut engine_opts = args.model_args.engine_options();
    let model = load_model(&args.model, &opts)?;
    args.model_args.apply_plan(&model, &mut engine_opts)?;
    let tokens = match &text {
        Some(text) => {
            let tok = model
                .tokenizer()
                .context("the model has no tokenizer; pass --tokens")?;
            tok.encode(text, true, false)
        }
        None => args.tokens.clone(),
    };
    if tokens.is_empty() {
        bail!("no tokens to evaluate");
    }
    let n_ctx = if engine_opts.n_ctx == 0 {
        model.default_n_ctx()
    } else {
        engine_opts.n_ctx
    };
    if tokens.len() > n_ctx {
        bail!(
            "{} tokens do not fit the context of {n_ctx}{}: raise -c to at least {}",
            tokens.len(),
            if args.model_args.ctx.is_some() {
                " (-c)"
            } else {
                " (the model's default)"
            },
            tokens.len()
        );
    }
    // The engine needs room for these tokens only, whatever the limit.
    engine_opts.n_ctx = tokens.len();
    check_context(&model, &engine_opts)?;
    let mut session = Session::new(model.clone(), &engine_opts).context("creating a session")?;
    let mut w = BufWriter::new(out.file());
    // Rows go to the file as they come: no [tokens][vocab] buffer.
    let mut write_err: Option<std::io::Error> = None;
    session
        .eval_each(&tokens, |_, row| {
            for x in row {
                if write_err.is_none()
                    && let Err(e) = w.write_all(&x.to_le_bytes())
                {
                    write_err = Some(e);
                }
            }
        })
        .context("evaluating the tokens")?;
    if let Some(e) = write_err {
        return Err(e).with_context(|| format!("writing {}", out.path().display()));
    }
    w.flush()
        .with_context(|| format!("writing {}", out.path().display()))?;
    drop(w);
    out.commit()?;
    note!(
        "wrote {} x {} logits to {}",
        tokens.len(),
        model.n_vocab(),
        args.output.display()
    );
    Ok(())
}
