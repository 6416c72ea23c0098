//! The `bitnet` binary: a thin command-line layer over bitnet-core. One module per
//! subcommand under `cmd/`, the flags they share under `args/`, loading a model and making
//! an engine under `setup/`, the figures they report under `report/`, the child processes
//! that render chat templates from files in `template_worker`; this file only parses
//! arguments, dispatches, and turns errors into exit codes.
//! No `unsafe` but, on Windows, the template workers' Job Object (`job_object`).
#![cfg_attr(not(windows), forbid(unsafe_code))]
#![cfg_attr(windows, deny(unsafe_code))]

mod args;
mod cmd;
mod interrupt;
#[cfg(windows)]
mod job_object;
mod output;
mod output_file;
mod report;
mod setup;
mod template_worker;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Under `bitnet --help`: a first command for each job, on the model that ships with the
/// repository, and where a real model comes from.
const EXAMPLES: &str = "\
Examples (models/shakespeare.gguf is a tiny model that ships with the repository):
  bitnet generate -m models/shakespeare.gguf -p \"ROMEO:\" -n 80 -s 1
  bitnet chat -m models/shakespeare.gguf
  bitnet serve -m models/shakespeare.gguf --port 8080
  bitnet inspect models/shakespeare.gguf
  bitnet-convert HF_CHECKPOINT_DIR -o model.gguf

A real model (BitNet b1.58 2B-4T): README.md, \"Run a real model\", gives the download,
convert and chat commands.";

/// Run 1-bit and ternary LLMs (BitNet b1.58 and friends) on the CPU, from GGUF files.
#[derive(Debug, Parser)]
#[command(name = "bitnet", version, about, propagate_version = true, after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show a GGUF model: hyper-parameters, tokenizer, tensors, memory needed.
    Inspect(cmd::inspect::Args),
    /// Chat with a model in the terminal (streaming; the conversation stays cached).
    Chat(cmd::chat::Args),
    /// Generate text from a prompt, streaming it as it is produced.
    Generate(cmd::generate::Args),
    /// Print the token ids of a text (works on vocab-only GGUFs).
    Tokenize(cmd::tokenize::Args),
    /// Evaluate token ids in one batch and write every position's logits (raw f32).
    Logits(cmd::logits::Args),
    /// Perplexity of a text, llama.cpp's method; KL divergence against a saved run.
    Perplexity(cmd::perplexity::Args),
    /// Choose each layer's KV formats under a KL-divergence budget; writes a --plan file.
    Calibrate(cmd::calibrate::Args),
    /// Embeddings of texts: pooled, normalized final hidden states (llama-embedding's).
    Embed(cmd::embed::Args),
    /// Measure prompt and generation throughput, llama-bench style.
    Bench(cmd::bench::Args),
    /// Write a random-weight model of a real architecture's shapes.
    GenModel(cmd::gen_model::Args),
    /// Serve the model over an OpenAI-compatible HTTP API (continuous batching, metrics).
    Serve(cmd::serve::Args),
    /// Render chat templates from stdin under a memory limit (the template worker).
    #[command(name = "__render-template", hide = true)]
    RenderTemplate(cmd::render_template::Args),
}

fn main() -> ExitCode {
    let command = args::negative_numbers::as_values(args::llama_spellings::with_spellings_in_help(
        Cli::command(),
    ));
    let argv = match args::llama_spellings::rewrite(&command, std::env::args_os()) {
        Ok(argv) => argv,
        Err(why) => {
            output::note!("error: {why}");
            // clap's status for a usage error.
            return ExitCode::from(2);
        }
    };
    let cli = Cli::from_arg_matches(&command.get_matches_from(argv)).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Command::Inspect(args) => cmd::inspect::run(args),
        Command::Chat(args) => cmd::chat::run(args),
        Command::Generate(args) => cmd::generate::run(args),
        Command::Tokenize(args) => cmd::tokenize::run(args),
        Command::Logits(args) => cmd::logits::run(args),
        Command::Perplexity(args) => cmd::perplexity::run(args),
        Command::Calibrate(args) => cmd::calibrate::run(args),
        Command::Embed(args) => cmd::embed::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::GenModel(args) => cmd::gen_model::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::RenderTemplate(args) => cmd::render_template::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if output::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            output::note!("error: {}", output::error_chain(&err));
            ExitCode::FAILURE
        }
    }
}
