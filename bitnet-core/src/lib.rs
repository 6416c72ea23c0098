//! bitnet-core: the runtime of 1-bit and ternary LLMs over `bitnet-kernels`.
//!
//! - [`model`]: what a model is, loaded from a GGUF file ([`Model`]; immutable, shared);
//! - [`engine`]: runs batches of tokens from many sequences over a model ([`Engine`]);
//!   [`Session`] is one sequence on its own engine;
//! - [`kv`]: the paged KV cache (formats, storage, block ownership, the manager that owns
//!   the sequences);
//! - [`scheduler`]: many generation requests on one engine ([`Scheduler`]), decoded
//!   together, each with its own sampler, stop strings and context policy;
//! - [`runtime`]: the engine on a thread of its own, for many client threads (a server);
//! - [`chat`]: chat templates, conversations, and [`chat::ChatSession`] (multi-turn chat);
//! - [`constrain`]: structured output (JSON, JSON Schema, regular expressions, grammars);
//! - [`tokenizer`], [`sampling`], [`config`], [`threadpool`], [`synth`] (the model
//!   generator), [`health`] (repetition signals).
//!
//! Dependencies point down: {runtime, chat} -> scheduler -> engine -> {kv, model} ->
//! kernels.
//!
//! Generating from a model (the shipped one, here):
//!
//! ```
//! use std::sync::Arc;
//!
//! use bitnet_core::sampling::SamplerConfig;
//! use bitnet_core::{Engine, EngineOptions, GenParams, LoadOptions, Model, Scheduler, generate};
//!
//! # fn main() -> Result<(), bitnet_core::CoreError> {
//! # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/shakespeare.gguf");
//! let model = Arc::new(Model::load(path, &LoadOptions::default())?);
//! let prompt = model.tokenizer().unwrap().encode("ROMEO:", true, false);
//! let engine = Engine::new(model, &EngineOptions::default())?;
//! let mut sched = Scheduler::new(engine, Default::default());
//! let greedy = GenParams {
//!     max_tokens: 16,
//!     sampler: SamplerConfig { temperature: 0.0, ..SamplerConfig::default() },
//!     ..GenParams::default()
//! };
//! let mut text = String::new();
//! let (_, stats) = generate(&mut sched, &prompt, greedy, |piece| {
//!     text.push_str(piece);
//!     true // false would stop the request
//! })?;
//! assert_eq!(stats.gen_tokens, 16);
//! assert!(!text.is_empty());
//! # Ok(())
//! # }
//! ```
//!
//! `examples/` shows more: `generate.rs`, `chat.rs` (a [`chat::ChatSession`]) and
//! `serve_threads.rs` (the engine on its own thread, [`runtime::Runtime`]).

// `unsafe` is allowed only where a module opts in with a reason: the thread pool (sharing a
// job across workers, CPU affinity), the loader (`mlock`), the SIGBUS message handler
// (`model/sigbus.rs`), the NUMA binding of weight pages (`numa/bind.rs`: `mbind`,
// `get_mempolicy`) and, on Windows, the memory figures (`windows_memory.rs`). Everything
// else is safe Rust.
#![deny(unsafe_code)]

pub mod chat;
pub mod config;
pub mod constrain;
pub mod embed;
pub mod engine;
pub mod error;
pub mod health;
pub mod kv;
pub mod model;
pub mod numa;
pub mod plan;
pub mod runtime;
pub mod sampling;
pub mod scheduler;
pub mod synth;
pub mod threadpool;
pub mod tokenizer;
#[cfg(windows)]
pub mod windows_memory;

pub use engine::{Engine, EngineOptions, Session};
pub use error::CoreError;
pub use kv::SeqId;
pub use model::{LoadOptions, Model};
pub use scheduler::{
    Event, GenParams, GenStats, Scheduler, SchedulerOptions, StopReason, generate,
};
