//! Options every model-running subcommand shares (`-t`, `--kernel`, `--no-mmap`, `--mlock`,
//! `--head`, `-c`), and turning them into [`LoadOptions`] (how the model is loaded) and
//! [`EngineOptions`] (how it runs).

use std::path::Path;

use anyhow::{Context, Result};
use std::sync::Arc;

use bitnet_core::model::{EngineOptions, HeadMode, LoadMode, LoadOptions, Model};
use bitnet_kernels::Isa;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HeadArg {
    /// The file's own format (F16, Q6_K, ...).
    Native,
    /// Re-quantize the output head to 8 bits (Q8_0) in memory at load.
    Q8,
}

#[derive(Clone, Debug, clap::Args)]
pub struct ModelArgs {
    /// Threads (default: the physical cores).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Kernel set: scalar, avx2 or avx512 (default: the best this CPU has, or $BITNET_KERNEL).
    #[arg(long)]
    pub kernel: Option<String>,
    /// Read the file into memory instead of mapping it.
    #[arg(long)]
    pub no_mmap: bool,
    /// Lock the model in memory so it is never paged out.
    #[arg(long)]
    pub mlock: bool,
    /// Output head format at run time.
    #[arg(long, value_enum, default_value_t = HeadArg::Native)]
    pub head: HeadArg,
    /// KV cache size in tokens, shared by all sequences when several run at once
    /// (default: the model's training context, at most 4096).
    #[arg(short = 'c', long)]
    pub ctx: Option<usize>,
    /// Do not pin threads to cores.
    #[arg(long)]
    pub no_pin: bool,
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
                HeadArg::Native => HeadMode::Native,
                HeadArg::Q8 => HeadMode::Q8,
            },
        })
    }

    pub fn engine_options(&self) -> EngineOptions {
        EngineOptions {
            threads: self.threads.unwrap_or(0),
            pin: !self.no_pin,
            n_ctx: self.ctx.unwrap_or(0),
            ..EngineOptions::default()
        }
    }
}

pub fn load_model(path: &Path, opts: &LoadOptions) -> Result<Arc<Model>> {
    Model::load(path, opts)
        .map(Arc::new)
        .with_context(|| format!("loading {}", path.display()))
}
