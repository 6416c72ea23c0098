//! The model's load and engine settings from the keyword arguments of `Llama(...)`, named
//! as the CLI's flags are (`kernel`, `head`, `cache_type_k`, `use_mmap`, ...): the names
//! parsed here, each refusal naming the argument.

use bitnet_core::EngineOptions;
use bitnet_core::kv::KvType;
use bitnet_core::model::{HeadMode, LoadMode, LoadOptions};
use bitnet_kernels::Isa;
use pyo3::PyResult;

use crate::error::{engine_error, refused};

/// `kernel=`: a kernel set the CPU has (`scalar`, `avx2`, `avx512`, ...); `None` picks the
/// best one (or `BITNET_KERNEL`).
pub fn kernel(name: Option<&str>) -> PyResult<Option<Isa>> {
    name.map(|n| Isa::parse(n).and_then(Isa::require))
        .transpose()
        .map_err(|e| engine_error("kernel", &e))
}

/// `head=`: `auto` (the loader decides), `native`, `q8`, `q6k` or `q4_0`.
pub fn head(name: &str) -> PyResult<Option<HeadMode>> {
    match name.to_ascii_lowercase().as_str() {
        "auto" => Ok(None),
        "native" => Ok(Some(HeadMode::Native)),
        "q8" | "q8_0" => Ok(Some(HeadMode::Q8)),
        "q6k" | "q6_k" => Ok(Some(HeadMode::Q6K)),
        "q4_0" => Ok(Some(HeadMode::Q4_0)),
        _ => Err(refused(format!(
            "head: {name:?} is not a head mode (auto, native, q8, q6k, q4_0)"
        ))),
    }
}

/// `cache_type_k=` / `cache_type_v=`: a KV element type (`f16`, `f32`, `q8_0`, ...).
pub fn kv_type(name: &str, argument: &str) -> PyResult<KvType> {
    KvType::parse(name).ok_or_else(|| {
        refused(format!(
            "{argument}: {name:?} is not a KV cache type (f16, f32, q8_0, q8_r, fp8, q4_0, b1)"
        ))
    })
}

/// The settings of one `Llama`, as the constructor's keyword arguments give them.
#[derive(Debug)]
pub struct ModelSettings<'a> {
    pub n_ctx: usize,
    pub n_threads: usize,
    pub n_batch: usize,
    pub kernel: Option<&'a str>,
    pub head: &'a str,
    pub cache_type_k: &'a str,
    pub cache_type_v: &'a str,
    pub use_mmap: bool,
    pub use_mlock: bool,
    pub pin_threads: bool,
}

impl ModelSettings<'_> {
    pub fn load_options(&self) -> PyResult<LoadOptions> {
        Ok(LoadOptions {
            mode: if self.use_mmap {
                LoadMode::Mmap
            } else {
                LoadMode::Read
            },
            mlock: self.use_mlock,
            isa: kernel(self.kernel)?,
            head: head(self.head)?,
        })
    }

    pub fn engine_options(&self) -> PyResult<EngineOptions> {
        if self.n_batch == 0 {
            return Err(refused("n_batch must be at least 1"));
        }
        Ok(EngineOptions {
            threads: self.n_threads,
            pin: self.pin_threads,
            n_ctx: self.n_ctx,
            batch: self.n_batch,
            k_type: kv_type(self.cache_type_k, "cache_type_k")?,
            v_type: kv_type(self.cache_type_v, "cache_type_v")?,
            ..EngineOptions::default()
        })
    }
}
