//! The KV cache: a table of element formats ([`format`]) and a pool of fixed-size,
//! reference-counted blocks shared by every sequence of an engine, with a prefix cache
//! ([`pool`]). A sequence's own view of it is its block table ([`Sequence`]).

pub mod format;
pub mod pool;
mod sequence;

pub use format::{FORMATS, KvFormat, KvRotate, KvType};
pub use pool::{KvPool, KvPoolError, PoolStats};
pub use sequence::Sequence;
