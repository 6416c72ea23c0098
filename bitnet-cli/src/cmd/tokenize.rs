//! `bitnet tokenize -m MODEL.gguf "text"`: the token ids of a text, as llama.cpp's
//! `llama-tokenize --ids` prints them; `--pieces` prints `id -> 'piece'` per token. Only the
//! tokenizer metadata is read, so vocab-only GGUFs work.

use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use bitnet_core::tokenizer::Tokenizer;
use bitnet_gguf::{GgufFile, LoadMode};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model or vocab-only GGUF.
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// The text to tokenize.
    pub text: String,
    /// Print `id -> 'piece'` per token instead of the id list.
    #[arg(long)]
    pub pieces: bool,
    /// Do not add BOS/EOS even where the vocabulary asks for them.
    #[arg(long)]
    pub no_bos: bool,
    /// Recognise special tokens written in the text (e.g. `<|eot_id|>`).
    #[arg(long)]
    pub parse_special: bool,
}

pub fn run(args: Args) -> Result<()> {
    let file = GgufFile::open(&args.model, LoadMode::Mmap)
        .with_context(|| format!("opening {}", args.model.display()))?;
    let tok = Tokenizer::from_metadata(file.metadata())
        .with_context(|| format!("building the tokenizer of {}", args.model.display()))?;
    let ids = tok.encode(&args.text, !args.no_bos, args.parse_special);
    let mut out = io::stdout().lock();
    if args.pieces {
        for id in &ids {
            let piece = String::from_utf8_lossy(tok.token_to_piece_special(*id, true));
            writeln!(out, "{id:>6} -> '{piece}'")?;
        }
    } else {
        let list: Vec<String> = ids.iter().map(u32::to_string).collect();
        writeln!(out, "[{}]", list.join(", "))?;
    }
    out.flush()?;
    Ok(())
}
