//! bitnet-core: the model runtime — architectures and their configs, loading from GGUF,
//! the forward pass over bitnet-kernels, the KV cache, the thread pool, the tokenizer and
//! sampling. The CLI (`bitnet-cli`) is a thin layer over this crate.

// `unsafe` is allowed only where a module opts in with a reason: the thread pool (sharing a
// job across workers, CPU affinity), the loader (`mlock`) and the SIGBUS message handler
// (`sigbus.rs`). Everything else is safe Rust.
#![deny(unsafe_code)]

pub mod chat;
pub mod config;
pub mod error;
pub mod eviction;
pub mod health;
pub mod kv;
pub mod kv_cache;
pub mod model;
pub mod sampling;
pub mod scheduler;
pub mod sigbus;
pub mod synth;
pub mod threadpool;
pub mod tokenizer;

pub use error::CoreError;
pub use model::{
    Engine, EngineOptions, GenStats, HeadMode, LoadMode, LoadOptions, LoadPhase, LoadStats, Model,
    Profile, SeqId, Session, StopReason, WeightMemory, generate,
};
