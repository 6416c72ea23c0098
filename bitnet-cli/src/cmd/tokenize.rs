//! `bitnet tokenize -m MODEL.gguf "text"`: the token ids of a text, as llama.cpp's
//! `llama-tokenize --ids` prints them; `--pieces` prints `id -> 'piece'` per token (llama-
//! tokenize's default). The text comes as an argument, `-p TEXT`, `-f FILE` or `--stdin`, as
//! llama-tokenize takes it; `--show-count` adds its `Total number of tokens: N` line,
//! `--show-unknown` an `Unknown tokens: N` line. `--clean-input` cleans the
//! text first and says on stderr what it saved. Only the tokenizer metadata is read, so
//! vocab-only GGUFs work.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use bitnet_core::tokenizer::Tokenizer;
use bitnet_gguf::LoadMode;

use crate::args::clean_input::{self, CleanInputArgs};
use crate::args::prompt::{PromptArgs, read_text};
use crate::setup::{open_gguf, watch_mapped_file};

#[derive(Debug, clap::Args)]
#[command(
    mut_arg("prompt", |a| a.help("The text to tokenize (may start with '-'), as the argument")),
    mut_arg("file", |a| a.help("Read the text to tokenize from FILE ('-' = standard input)"))
)]
pub struct Args {
    /// Model or vocab-only GGUF.
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// The text to tokenize (may start with '-'); or use -p, -f or --stdin.
    #[arg(allow_hyphen_values = true, conflicts_with_all = ["prompt", "file", "stdin"])]
    pub text: Option<String>,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Read the text from standard input (as llama-tokenize; the same as -f -).
    #[arg(long, conflicts_with_all = ["prompt", "file"])]
    pub stdin: bool,
    /// Print the ids as `[1, 2, 3]` (the default; llama-tokenize's --ids).
    #[arg(long, conflicts_with = "pieces")]
    pub ids: bool,
    /// Print `id -> 'piece'` per token instead of the id list.
    #[arg(long)]
    pub pieces: bool,
    /// Also print `Total number of tokens: N`.
    #[arg(long)]
    pub show_count: bool,
    /// Do not add BOS/EOS even where the vocabulary asks for them.
    #[arg(long)]
    pub no_bos: bool,
    /// Recognise special tokens written in the text (e.g. `<|eot_id|>`).
    #[arg(long)]
    pub parse_special: bool,
    /// Also print `Unknown tokens: N` (0 for a vocabulary without an unknown token).
    #[arg(long)]
    pub show_unknown: bool,
    #[command(flatten)]
    pub clean: CleanInputArgs,
}

pub fn run(args: Args) -> Result<()> {
    let text = match (&args.text, args.stdin) {
        (Some(t), _) => t.clone(),
        (None, true) => read_text(Path::new("-"))?,
        (None, false) => match args.prompt.text()? {
            Some(t) => t,
            None => bail!("no text: give it as an argument, -p TEXT, -f FILE or --stdin"),
        },
    };
    watch_mapped_file(&args.model);
    let file = open_gguf(&args.model, LoadMode::Mmap)?;
    let tok = Tokenizer::from_metadata(file.metadata())
        .with_context(|| format!("building the tokenizer of {}", args.model.display()))?;
    let original = text;
    let (text, cleaned) = args.clean.apply(&original);
    let ids = tok.encode(&text, !args.no_bos, args.parse_special);
    if let Some(mode) = args.clean.clean_input {
        let before = tok
            .encode(&original, !args.no_bos, args.parse_special)
            .len();
        eprintln!(
            "{}",
            clean_input::describe(mode, &cleaned, before, ids.len())
        );
    }
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
    if args.show_count {
        writeln!(out, "Total number of tokens: {}", ids.len())?;
    }
    if args.show_unknown {
        let n = tok
            .unk_id()
            .map_or(0, |unk| ids.iter().filter(|&&i| i == unk).count());
        writeln!(out, "Unknown tokens: {n}")?;
    }
    out.flush()?;
    Ok(())
}
