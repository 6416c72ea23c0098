//! The paged KV cache, split by concern:
//!
//! - `format`: the element formats as a table (bytes per row, encoder, attention kernels);
//! - `storage`: the K and V bytes of every block, and row encode/decode, one K and one V
//!   format per layer (`layer_types`: such a list checked uniform and summarized);
//! - `blocks`: who holds which block (reference counts, free list, LRU) and the prefix
//!   index of blocks that hold a known token prefix;
//! - `manager`: the one owner of all three and of the sequences' block tables
//!   (`sequence`); it answers admission questions (blocks needed, blocks available, a
//!   cached prefix to reuse) so the scheduler never does block arithmetic.
//! - `snapshot` and `snapshot_file`: a sequence's rows taken out (and put back), and
//!   their file (a server's persistent prefix cache, a chat saved with its KV);
//! - `stats`: the pool's occupancy and what live sequences hold, as the manager reports
//!   them (and the "cache is full" error carries).

mod blocks;
mod error;
pub mod format;
mod layer_types;
pub mod manager;
mod sequence;
mod snapshot;
pub mod snapshot_file;
mod stats;
pub mod storage;

pub use error::KvError;
pub use format::{FORMATS, KvFormat, KvRotate, KvType};
pub use layer_types::{describe_layer_types, uniform_layer_types};
pub use manager::KvManager;
pub use sequence::{SeqId, Sequence};
pub use snapshot::{KvLayerLayout, KvLayout, KvSnapshot};
pub use stats::{KvStats, PoolStats};
pub use storage::{KvLayer, KvStorage};
