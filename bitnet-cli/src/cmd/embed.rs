//! `bitnet embed -m MODEL.gguf -p TEXT [-p TEXT ...] [-f FILE]`: one embedding an input, as
//! llama.cpp's `llama-embedding` makes them. Each input is tokenized as the model's tokenizer
//! says (BOS and EOS where the file asks for them), evaluated from an empty context, and the
//! final normed hidden states pooled (`--pooling`, default the file's `{arch}.pooling_type`,
//! else the last token's: these are causal models), normalized (`--normalize`, llama.cpp's
//! `embd_normalize` values, default 2: unit length) and written at `--output-precision`.
//! Output: OpenAI's embeddings response as JSON (stdout or `-o`), or `--format raw`: the
//! values back to back, little-endian, `[inputs][dims]` (with no pooling, `[tokens][dims]`
//! of each input in turn), to `-o`.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use bitnet_core::embed::precision::{Precision, Quantized, quantize};
use bitnet_core::embed::{Normalize, embed_batch};
use bitnet_core::engine::Engine;

use crate::args::model::ModelArgs;
use crate::args::pooling::{POOLING_NAMES, choose_pooling};
use crate::output::note;
use crate::output_file::OutputFile;
use crate::setup::limits::check_context;
use crate::setup::load_model;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The GGUF model file.
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// An input text (repeat for more; may start with '-').
    #[arg(short = 'p', long = "prompt", allow_hyphen_values = true)]
    pub prompts: Vec<String>,
    /// A file of inputs, one a line ('-' = standard input); after the -p ones.
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// Pooling: none (a vector a token), mean, cls (the first token's) or last (default: the
    /// file's pooling_type, else last).
    #[arg(long, value_parser = POOLING_NAMES)]
    pub pooling: Option<String>,
    /// Normalization (llama.cpp's --embd-normalize): -1 none, 0 max-abs to 32760, 1 taxicab,
    /// 2 Euclidean, p > 2 the p-norm.
    #[arg(
        long = "normalize",
        alias = "embd-normalize",
        default_value_t = 2,
        allow_negative_numbers = true
    )]
    pub normalize: i32,
    /// Storage precision (sentence-transformers' conventions): float32, int8 and uint8 (each
    /// dimension's range over the inputs onto 256 steps: two inputs at least), binary and
    /// ubinary (sign bits, eight a byte).
    #[arg(long = "output-precision", default_value = "float32",
          value_parser = ["float32", "int8", "uint8", "binary", "ubinary"])]
    pub precision: String,
    /// Output format: json (OpenAI's embeddings response) or raw (little-endian values, needs
    /// -o).
    #[arg(long, default_value = "json", value_parser = ["json", "raw"])]
    pub format: String,
    /// Output file (default: standard output, for json).
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub model_args: ModelArgs,
}

/// The inputs: the -p ones, then the file's lines. An empty input is refused by its place.
fn inputs(args: &Args) -> Result<Vec<String>> {
    let mut out = args.prompts.clone();
    if let Some(path) = &args.file {
        let reader: Box<dyn Read> = if path.as_os_str() == "-" {
            Box::new(std::io::stdin())
        } else {
            Box::new(
                std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?,
            )
        };
        for (i, line) in BufReader::new(reader).lines().enumerate() {
            let line = line.with_context(|| format!("reading {}", path.display()))?;
            let line = line.strip_suffix('\r').unwrap_or(&line);
            if line.is_empty() {
                bail!(
                    "line {} of {} is empty: every line is an input",
                    i + 1,
                    path.display()
                );
            }
            out.push(line.to_owned());
        }
    }
    if let Some(i) = out.iter().position(String::is_empty) {
        bail!("input {} is empty", i + 1);
    }
    if out.is_empty() {
        bail!("nothing to embed: give -p TEXT (one or more) or -f FILE");
    }
    Ok(out)
}

pub fn run(args: Args) -> Result<()> {
    let texts = inputs(&args)?;
    if args.format == "raw" && args.output.is_none() {
        bail!("--format raw writes binary: give -o FILE");
    }
    let out = args.output.as_deref().map(OutputFile::create).transpose()?;
    let precision = Precision::from_name(&args.precision).expect("clap checked it");
    let opts = args.model_args.load_options()?;
    let mut engine_opts = args.model_args.engine_options();
    let model = load_model(&args.model, &opts)?;
    args.model_args.apply_plan(&model, &mut engine_opts)?;
    let tok = model
        .tokenizer()
        .context("the model has no tokenizer: it cannot embed text")?;
    let pooling = choose_pooling(args.pooling.as_deref(), model.config())?;
    let tokens: Vec<Vec<u32>> = texts.iter().map(|t| tok.encode(t, true, false)).collect();
    let longest = tokens.iter().map(Vec::len).max().unwrap_or(0);
    let n_ctx = args.model_args.ctx.unwrap_or_else(|| model.default_n_ctx());
    if let Some(i) = tokens.iter().position(|t| t.len() > n_ctx) {
        bail!(
            "input {} is {} tokens, over the context of {n_ctx}{}",
            i + 1,
            tokens[i].len(),
            if args.model_args.ctx.is_some() {
                " (-c)"
            } else {
                " (the model's default; raise -c)"
            }
        );
    }
    if let Some(i) = tokens.iter().position(Vec::is_empty) {
        bail!("input {} has no tokens", i + 1);
    }
    // Inputs share passes (`embed_batch`); the cache needs room for the longest input, and
    // holds as many more as fit in the context.
    let n_tokens: usize = tokens.iter().map(Vec::len).sum();
    engine_opts.n_ctx = n_tokens.min(n_ctx).max(longest);
    check_context(&model, &engine_opts)?;
    let mut engine = Engine::new(model.clone(), &engine_opts).context("creating the engine")?;
    let normalize = Normalize(args.normalize);
    let refs: Vec<&[u32]> = tokens.iter().map(Vec::as_slice).collect();
    let vectors: Vec<Vec<f32>> = embed_batch(&mut engine, &refs, pooling, normalize)
        .context("embedding the inputs")?
        .into_iter()
        .flatten()
        .collect();
    let quantized = quantize(&vectors, precision)?;
    let bytes = if args.format == "raw" {
        let mut b = Vec::new();
        for q in &quantized {
            match q {
                Quantized::Float32(v) => {
                    v.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()))
                }
                Quantized::Int8(v) => b.extend(v.iter().map(|&x| x as u8)),
                Quantized::Uint8(v) => b.extend_from_slice(v),
            }
        }
        b
    } else {
        let name = args
            .model
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        let data: Vec<serde_json::Value> = quantized
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let embedding = match q {
                    Quantized::Float32(v) => serde_json::json!(v),
                    Quantized::Int8(v) => serde_json::json!(v),
                    Quantized::Uint8(v) => serde_json::json!(v),
                };
                serde_json::json!({"object": "embedding", "index": i, "embedding": embedding})
            })
            .collect();
        let body = serde_json::json!({
            "object": "list",
            "data": data,
            "model": name,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        });
        let mut b = serde_json::to_vec(&body).context("encoding the response")?;
        b.push(b'\n');
        b
    };
    match out {
        Some(out) => {
            let mut f = out.file();
            f.write_all(&bytes)
                .and_then(|()| f.flush())
                .with_context(|| format!("writing {}", out.path().display()))?;
            out.commit()?;
        }
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&bytes)?;
            stdout.flush()?;
        }
    }
    note!(
        "embedded {} input{} ({n_tokens} tokens): {} vector{} of {} ({} pooling, normalize {}, {})",
        texts.len(),
        if texts.len() == 1 { "" } else { "s" },
        vectors.len(),
        if vectors.len() == 1 { "" } else { "s" },
        model.config().n_embd,
        pooling.name(),
        args.normalize,
        precision.name()
    );
    Ok(())
}
