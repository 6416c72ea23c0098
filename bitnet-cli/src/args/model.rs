//! Options every model-running subcommand shares (`-t`, `--kernel`, `--no-mmap`, `--mlock`,
//! `--head`, `-c`, `-b`, `-ctk`, `-ctv`, `--kv-rotate`, `--kv-xnor`), turning them into
//! [`LoadOptions`] (how the model is loaded) and [`EngineOptions`] (how it runs).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use bitnet_core::engine::EngineOptions;
use bitnet_core::kv::{KvRotate, KvType};
use bitnet_core::model::{HeadMode, LoadMode, LoadOptions, Model};
use bitnet_core::plan::PrecisionPlan;
use bitnet_kernels::Isa;

use crate::output::note;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HeadArg {
    /// Q8_0 for a float (F32/F16/BF16) head of 16 MiB or more, where the head bounds
    /// decode; else the file's own format.
    Auto,
    /// The file's own format (F16, Q6_K, ...).
    Native,
    /// Re-quantize the output head to 8 bits (Q8_0) in memory at load.
    Q8,
    /// Re-quantize the output head to Q6_K rows (6.56 bits a weight) at load: about a
    /// quarter fewer bytes a decoded token reads for the head than Q8_0.
    #[value(name = "q6_k", alias = "q6k")]
    Q6K,
    /// Re-quantize the output head to Q4_0 rows (4.5 bits a weight) at load: about half
    /// the head's bytes of Q8_0, at a larger accuracy cost (docs/commands.md has the table).
    #[value(name = "q4_0", alias = "q4")]
    Q4_0,
}

#[derive(Clone, Debug, clap::Args)]
pub struct ModelArgs {
    /// Threads (default: the physical cores; 0 means the default too, as in llama.cpp).
    #[arg(short = 't', long, value_parser = thread_count())]
    pub threads: Option<usize>,
    /// Kernel set: scalar, avx2, avxvnni, avx512 (x86-64), neon, dotprod, i8mm (ARM)
    /// (default: the best this CPU has, or $BITNET_KERNEL).
    #[arg(long)]
    pub kernel: Option<String>,
    /// Read the file into memory instead of mapping it.
    #[arg(long)]
    pub no_mmap: bool,
    /// Lock the model in memory so it is never paged out.
    #[arg(long)]
    pub mlock: bool,
    /// Output head format at run time.
    #[arg(long, value_enum, default_value_t = HeadArg::Auto)]
    pub head: HeadArg,
    /// KV cache size in tokens, shared by all sequences when several run at once
    /// (default: the model's training context, at most 4096; 0 means the default too, as
    /// llama.cpp's -c 0).
    #[arg(
        short = 'c',
        long = "ctx-size",
        visible_alias = "ctx",
        value_name = "N",
        value_parser = context_size
    )]
    pub ctx: Option<usize>,
    /// Prompt tokens evaluated per batch (default: 256).
    #[arg(short = 'b', long = "batch-size", value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_size: Option<u32>,
    /// Do not pin threads to cores.
    #[arg(long)]
    pub no_pin: bool,
    /// Place threads by NUMA node: distribute (over every node, in proportion to its
    /// CPUs), isolate (the node the process started on), numactl (the CPUs an outer
    /// numactl or taskset left). Off by default.
    #[arg(long, value_name = "MODE", value_parser = parse_numa)]
    pub numa: Option<bitnet_core::numa::NumaMode>,
    /// K cache type (llama.cpp's -ctk): f16, f32, q8_0, q8_r, fp8, q4_0, b1.
    #[arg(long = "cache-type-k", value_name = "TYPE", value_parser = parse_kv_type,
          default_value = "f16")]
    pub cache_type_k: KvType,
    /// V cache type (llama.cpp's -ctv), chosen independently of K's.
    #[arg(long = "cache-type-v", value_name = "TYPE", value_parser = parse_kv_type,
          default_value = "f16")]
    pub cache_type_v: KvType,
    /// Store K and/or V Hadamard-rotated (off, k, v, kv, or auto: the sides whose type has
    /// fewer than 8 bits, q4_0 and b1); needs a power-of-two head dimension.
    #[arg(long = "kv-rotate", value_name = "SIDES", value_parser = parse_kv_rotate,
          default_value = "off")]
    pub kv_rotate: KvRotate,
    /// Score b1 keys by XNOR/popcount against a sign-quantized query (needs -ctk b1).
    #[arg(long = "kv-xnor")]
    pub kv_xnor: bool,
    /// Run a precision plan written by `bitnet calibrate -o PLAN`: each layer's K and V
    /// cache formats and activation precision (instead of -ctk, -ctv and --kv-rotate).
    #[arg(long, value_name = "PLAN",
          conflicts_with_all = ["cache_type_k", "cache_type_v", "kv_rotate"])]
    pub plan: Option<PathBuf>,
}

/// The most threads `-t` takes.
pub const MAX_THREADS: i64 = 4096;

/// `-t`'s values: 0 (the default) to [`MAX_THREADS`].
pub fn thread_count() -> clap::builder::RangedI64ValueParser<usize> {
    clap::builder::RangedI64ValueParser::new().range(0..=MAX_THREADS)
}

/// A `-c` value: a number of tokens, 0 (the default) or more. Its upper end is not fixed
/// here: what the machine's memory holds is checked before anything is allocated
/// ([`crate::setup::limits::check_context`]), saying what the context would take.
pub fn context_size(s: &str) -> Result<usize, String> {
    s.trim()
        .parse()
        .map_err(|_| "a context size is a number of tokens, 0 or more (0: the default)".to_owned())
}

/// A KV cache type by its llama.cpp name (`f16`, `q8_0`, ...).
pub fn parse_kv_type(name: &str) -> Result<KvType, String> {
    KvType::parse(name).ok_or_else(|| {
        let names: Vec<&str> = KvType::ALL.iter().map(|t| t.name()).collect();
        format!(
            "unknown KV cache type {name:?} (one of {})",
            names.join(", ")
        )
    })
}

/// A `--kv-rotate` value (`off`, `k`, `v`, `kv`, `auto`).
pub fn parse_kv_rotate(name: &str) -> Result<KvRotate, String> {
    KvRotate::parse(name).ok_or_else(|| {
        let names: Vec<&str> = KvRotate::ALL.iter().map(|r| r.name()).collect();
        format!("unknown --kv-rotate {name:?} (one of {})", names.join(", "))
    })
}

pub fn parse_isa(name: Option<&str>) -> Result<Option<Isa>> {
    name.map(|n| Isa::parse(n).and_then(Isa::require))
        .transpose()
        .context("choosing the kernel set")
}

impl ModelArgs {
    pub fn load_options(&self) -> Result<LoadOptions> {
        Ok(LoadOptions {
            mode: if self.no_mmap {
                LoadMode::Read
            } else {
                LoadMode::Mmap
            },
            mlock: self.mlock,
            isa: parse_isa(self.kernel.as_deref())?,
            head: match self.head {
                HeadArg::Auto => None,
                HeadArg::Native => Some(HeadMode::Native),
                HeadArg::Q8 => Some(HeadMode::Q8),
                HeadArg::Q6K => Some(HeadMode::Q6K),
                HeadArg::Q4_0 => Some(HeadMode::Q4_0),
            },
        })
    }

    /// The engine settings; warns (once per process) about more threads than CPUs, and says
    /// what a `-t 0` or `-c 0` given on the command line stands for.
    pub fn engine_options(&self) -> EngineOptions {
        let threads = self.threads.unwrap_or(0);
        warn_threads(threads);
        note_zero_defaults(self.threads, self.ctx);
        EngineOptions {
            threads,
            pin: !self.no_pin,
            numa: self.numa,
            n_ctx: self.ctx.unwrap_or(0),
            batch: self
                .batch_size
                .map_or(EngineOptions::default().batch, |b| b as usize),
            k_type: self.cache_type_k,
            v_type: self.cache_type_v,
            kv_rotate: self.kv_rotate,
            kv_xnor: self.kv_xnor,
            ..EngineOptions::default()
        }
    }
}

impl ModelArgs {
    /// Applies `--plan` (if given) to `opts` for `model` (a plan is for one model's layers,
    /// so it waits for the model), saying once what it runs.
    pub fn apply_plan(&self, model: &Model, opts: &mut EngineOptions) -> Result<()> {
        let Some(path) = &self.plan else {
            return Ok(());
        };
        let plan = read_plan(path)?;
        plan.apply(model.config().n_layer, opts)
            .with_context(|| format!("--plan {}", path.display()))?;
        static SAID: AtomicBool = AtomicBool::new(false);
        if !SAID.swap(true, Ordering::Relaxed) {
            note!("plan {}: {}", path.display(), plan.describe());
        }
        Ok(())
    }
}

/// Reads a plan file, with the path in the error.
pub fn read_plan(path: &std::path::Path) -> Result<PrecisionPlan> {
    PrecisionPlan::read(path).with_context(|| format!("reading the plan {}", path.display()))
}

/// Says (once per process) that a 0 given to `-t` or `-c` means the default, and which: a
/// user who typed 0 may have meant "none" or "unlimited".
pub fn note_zero_defaults(threads: Option<usize>, ctx: Option<usize>) {
    static SAID: AtomicBool = AtomicBool::new(false);
    let zero_given = threads == Some(0) || ctx == Some(0);
    if !zero_given || SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    if threads == Some(0) {
        note!(
            "-t 0 means the default: {} (the physical cores)",
            crate::output::count(bitnet_core::engine::default_threads(), "thread")
        );
    }
    if ctx == Some(0) {
        note!("-c 0 means the default: the model's training context, at most 4096 tokens");
    }
}

/// Logical CPUs this process may run on.
pub fn logical_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Warns (once per process) when more threads are asked for than there are logical CPUs:
/// they then take turns on the cores and every parallel step waits for the slowest.
pub fn warn_threads(threads: usize) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let cpus = logical_cpus();
    if threads > cpus && !WARNED.swap(true, Ordering::Relaxed) {
        note!(
            "warning: -t {threads} is more threads than the {cpus} logical CPUs here: they will \
             share cores and run slower than -t {cpus}"
        );
    }
}

pub fn parse_numa(s: &str) -> Result<bitnet_core::numa::NumaMode, String> {
    bitnet_core::numa::NumaMode::parse(s).map_err(|e| e.to_string())
}
