//! `bitnet logits -m MODEL.gguf --tokens 1,512,29871 -o OUT.f32`: evaluates the ids in one
//! batch and writes every position's logits as raw little-endian f32 `[n_tokens][n_vocab]`,
//! the format of `shared/data/golden/logits/`, for comparing engines and debugging.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use bitnet_core::model::Session;

use super::common::{ModelArgs, load_model};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// Token ids, comma-separated.
    #[arg(long, value_delimiter = ',', required_unless_present = "prompt")]
    pub tokens: Vec<u32>,
    /// Tokenize this text (with BOS) instead of giving ids.
    #[arg(short = 'p', long, conflicts_with = "tokens")]
    pub prompt: Option<String>,
    /// Output file: raw little-endian float32, [n_tokens][n_vocab].
    #[arg(short = 'o', long)]
    pub output: PathBuf,
    #[command(flatten)]
    pub model_args: ModelArgs,
}

pub fn run(args: Args) -> Result<()> {
    let opts = args.model_args.load_options()?;
    let mut engine_opts = args.model_args.engine_options();
    let model = load_model(&args.model, &opts)?;
    let tokens = match &args.prompt {
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
    if engine_opts.n_ctx == 0 {
        engine_opts.n_ctx = tokens.len();
    }
    engine_opts.n_ctx = engine_opts.n_ctx.max(tokens.len());
    let mut session = Session::new(model.clone(), &engine_opts).context("creating a session")?;
    let file = File::create(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    let mut w = BufWriter::new(file);
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
        return Err(e).with_context(|| format!("writing {}", args.output.display()));
    }
    w.flush()
        .with_context(|| format!("writing {}", args.output.display()))?;
    eprintln!(
        "wrote {} x {} logits to {}",
        tokens.len(),
        model.n_vocab(),
        args.output.display()
    );
    Ok(())
}
