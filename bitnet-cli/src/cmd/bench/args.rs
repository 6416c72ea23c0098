//! `bitnet bench`'s command line, and how its load flags become a model's load options: in
//! a file of its own so that the suite and the speculative tests read the arguments without
//! importing the command that runs them.

use std::path::PathBuf;

use bitnet_core::kv::{KvRotate, KvType};

use super::report::Format;
use crate::args::model::{HeadArg, ModelArgs};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model files to benchmark.
    #[arg(short = 'm', long = "model", num_args = 1..)]
    pub models: Vec<PathBuf>,
    /// Prompt lengths (pp tests), comma-separated; 0 skips pp.
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    pub n_prompt: Vec<usize>,
    /// Generation lengths (tg tests), comma-separated; 0 skips tg.
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    pub n_gen: Vec<usize>,
    /// Context depths, comma-separated (llama-bench's -d): each pp and tg test first fills
    /// this many tokens of context (untimed), then measures; 0 = an empty context.
    #[arg(
        short = 'd',
        long = "n-depth",
        value_delimiter = ',',
        default_value = "0"
    )]
    pub depth: Vec<usize>,
    /// Sequences decoded together in tg (and mixed) tests, comma-separated
    /// (llama-batched-bench's -npl). Here -b is this count of sequences, not the tokens of a
    /// batch that generate's and llama-bench's -b set: that is --batch-size.
    #[arg(
        short = 'b',
        long = "npl",
        alias = "batch",
        value_name = "N",
        value_delimiter = ',',
        default_value = "1"
    )]
    pub batch: Vec<usize>,
    /// Thread counts, comma-separated (default: the physical cores; 0 means the default
    /// too).
    #[arg(short = 't', long = "threads", value_delimiter = ',',
          value_parser = crate::args::model::thread_count())]
    pub threads: Vec<usize>,
    /// Kernel sets, comma-separated (default: the best available).
    #[arg(long = "kernel", value_delimiter = ',')]
    pub kernels: Vec<String>,
    /// Repetitions of each test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub reps: usize,
    /// Untimed runs of each test before the timed ones.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Read models into memory instead of mapping them.
    #[arg(long)]
    pub no_mmap: bool,
    /// Lock the models in memory so they are never paged out.
    #[arg(long)]
    pub mlock: bool,
    /// Do not pin threads to cores.
    #[arg(long)]
    pub no_pin: bool,
    /// Place threads by NUMA node: distribute, isolate or numactl (see `generate --help`).
    #[arg(long, value_name = "MODE", value_parser = crate::args::model::parse_numa)]
    pub numa: Option<bitnet_core::numa::NumaMode>,
    /// KV cache size in tokens (default, or 0: what the largest test needs); a test that
    /// does not fit is refused before anything is measured.
    #[arg(short = 'c', long = "ctx-size", visible_alias = "ctx", value_name = "N",
          value_parser = crate::args::model::context_size)]
    pub ctx: Option<usize>,
    /// Prompt tokens one forward pass evaluates at most, as generate's -b (default: 256,
    /// and at least the largest --npl).
    #[arg(long = "batch-size", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_size: Option<u32>,
    /// Output head format (auto, native or q8; auto as in the other commands).
    #[arg(long, value_enum, default_value_t = HeadArg::Auto)]
    pub head: HeadArg,
    /// Output format on stdout.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Md)]
    pub output: Format,
    /// Also write the full report as JSON to this file.
    #[arg(long)]
    pub json_report: Option<PathBuf>,
    /// Measure the memory read bandwidth (and the decode bound from it). On by default for tg
    /// tests; `--membw` alone (no model) runs only the probe.
    #[arg(long)]
    pub membw: bool,
    /// Skip the bandwidth probe.
    #[arg(long, conflicts_with = "membw")]
    pub no_membw: bool,
    /// Print where the time goes (per op kind) for each pp and tg test (the last
    /// repetition's; per token).
    #[arg(long)]
    pub profile: bool,
    /// Also run llama-batched-bench's shape for every (-p, -n, -b): B sequences of a
    /// -p token prompt each, prefilled, then -n tokens decoded together; reports prefill,
    /// decode and total throughput.
    #[arg(long)]
    pub mixed: bool,
    /// K cache types, comma-separated (llama-bench's -ctk): f16, f32, q8_0, q8_r, fp8, q4_0, b1.
    #[arg(long = "cache-type-k", value_delimiter = ',', value_parser = crate::args::model::parse_kv_type,
          default_value = "f16")]
    pub cache_type_k: Vec<KvType>,
    /// V cache types, comma-separated (-ctv); every K type runs with every V type.
    #[arg(long = "cache-type-v", value_delimiter = ',', value_parser = crate::args::model::parse_kv_type,
          default_value = "f16")]
    pub cache_type_v: Vec<KvType>,
    /// Hadamard rotation of the KV cache (off, k, v, kv, auto), as on the other commands.
    #[arg(long = "kv-rotate", value_name = "SIDES", value_parser = crate::args::model::parse_kv_rotate,
          default_value = "off")]
    pub kv_rotate: KvRotate,
    /// Score b1 keys by XNOR/popcount (needs -ctk b1), as on the other commands.
    #[arg(long = "kv-xnor")]
    pub kv_xnor: bool,
    /// Run a precision plan (`bitnet calibrate -o PLAN`; each layer's K and V formats and
    /// activations) instead of -ctk, -ctv and --kv-rotate, as on the other commands.
    #[arg(long, value_name = "PLAN",
          conflicts_with_all = ["cache_type_k", "cache_type_v", "kv_rotate"])]
    pub plan: Option<std::path::PathBuf>,
    /// Positions per KV cache block (a power of two).
    #[arg(long, default_value_t = bitnet_core::engine::DEFAULT_BLOCK_TOKENS)]
    pub kv_block: usize,
    /// Run the tg tests' repetitions of every thread count and K/V type pair in turn, round
    /// by round (every engine alive at once, each context filled once), and report each
    /// configuration's per-round ratio against the first (median, range, rounds won, sign
    /// test): on a host whose speed drifts, only such pairs compare.
    #[arg(long)]
    pub interleave: bool,
    /// Sample the tg tests under this JSON Schema (text, or @FILE): each sequence feeds back
    /// the most likely token the structured-output mask allows, and the rows say what the
    /// mask cost per token and its share of the step.
    #[arg(long, value_name = "SCHEMA")]
    pub json_schema: Option<String>,
    /// Measure embeddings instead of pp/tg (llama-bench's -embd): -b inputs of -p tokens
    /// each embedded in one call, pooled as the file says, reported as inputs/s and
    /// tokens/s; with several -m, each row against the first model's.
    #[arg(long = "embeddings", visible_alias = "embd")]
    pub embeddings: bool,
    /// Compare two JSON reports instead of running: OLD NEW.
    #[arg(long, num_args = 2, value_names = ["OLD", "NEW"])]
    pub compare: Option<Vec<PathBuf>>,
    /// With --compare: exit non-zero if any row regressed.
    #[arg(long)]
    pub fail_on_regress: bool,
    /// With --compare: the smallest relative drop that can count as a regression.
    #[arg(long, default_value_t = 0.02)]
    pub min_drop: f64,
    /// Speculative decoding: the cost of one pass over each of these numbers of positions
    /// of one sequence (a verification of that many tokens) against a one-token decode
    /// step, interleaved (e.g. 2,3,5,9; -d sets the context before them, 64 by default).
    #[arg(long, value_delimiter = ',', value_name = "N")]
    pub verify: Vec<usize>,
    #[command(flatten)]
    pub speculate: crate::args::speculate::SpeculateArgs,
    /// With --model-draft or --lookup-ngram: the text the prompts are cut from (generation
    /// with and without speculation, alternating; -n tokens each, -r rounds).
    #[arg(long, value_name = "FILE")]
    pub spec_text: Option<PathBuf>,
    /// Prompts cut from --spec-text, spread over it.
    #[arg(long, default_value_t = 8)]
    pub spec_prompts: usize,
    /// Tokens of --spec-text in a prompt (a copy task's passage).
    #[arg(long, default_value_t = 64)]
    pub spec_prompt_tokens: usize,
    /// plain: pieces of the text; copy: a passage twice, then its first third.
    #[arg(long, value_enum, default_value_t = SpecTask::Plain)]
    pub spec_task: SpecTask,
    /// Temperatures of the speculative generation test.
    #[arg(long, value_delimiter = ',', default_value = "0,0.8")]
    pub spec_temp: Vec<f32>,
}

/// Which prompts `--spec-text` gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SpecTask {
    /// Pieces of the text: whatever the model writes next.
    Plain,
    /// A passage of the text twice, then its first third: the answer copies.
    Copy,
}

/// How a bench loads its model: the load flags of `args`, with `threads` and `kernel`; the
/// engine options of the pp/tg suite's tests are set apart (`suite::Config`).
pub(super) fn model_args(args: &Args, threads: Option<usize>, kernel: Option<String>) -> ModelArgs {
    ModelArgs {
        threads,
        kernel,
        no_mmap: args.no_mmap,
        mlock: args.mlock,
        head: args.head,
        ctx: args.ctx,
        batch_size: args.batch_size,
        no_pin: args.no_pin,
        numa: args.numa,
        cache_type_k: KvType::F16,
        cache_type_v: KvType::F16,
        kv_rotate: KvRotate::Off,
        kv_xnor: false,
        plan: None,
    }
}
