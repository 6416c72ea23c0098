//! `bitnet-gguf`: the GGUF file format (versions 2 and 3, little-endian), nothing else.
//!
//! - [`GgufFile`] opens a file through a memory map or into an owned 64-byte-aligned buffer
//!   ([`LoadMode`]), parses and validates the header, and hands out zero-copy `&[u8]` views
//!   of tensor data. Every offset, count and length is checked before it is used; a broken
//!   or hostile file gives a [`GgufError`] naming the byte offset, key or tensor.
//! - [`Metadata`] keeps the key/value pairs in file order with typed getters.
//! - [`TensorType`] knows the exact size of every ggml type, bitnet.cpp's I2_S (id 36) and
//!   upstream's ternary TQ1_0/TQ2_0 and 1-bit Q1_0 included; ids that differ between ggml
//!   forks are resolved per file ([`Flavour`]).
//! - [`GgufWriter`] streams a file out: header first, then each tensor's bytes in order.
//!   A read-then-write round trip is byte-identical.
//!
//! ```
//! use bitnet_gguf::{GgufFile, Metadata, TensorInfo, TensorType, write_to_vec};
//!
//! let mut md = Metadata::new();
//! md.insert("general.architecture", "bitnet");
//! md.insert("bitnet.block_count", 4u32);
//! let w = TensorInfo::new("blk.0.attn_q.weight", vec![256, 2], TensorType::TQ2_0)?;
//! let data = vec![0u8; w.n_bytes as usize];
//! let bytes = write_to_vec(3, &md, &[(w, &data)])?;
//!
//! let f = GgufFile::from_bytes(&bytes)?; // or GgufFile::open(path, LoadMode::Mmap)
//! assert_eq!(f.metadata().get_u64("bitnet.block_count")?, 4);
//! let t = f.tensor("blk.0.attn_q.weight").unwrap();
//! assert_eq!((t.row_len(), t.rows(), t.n_bytes), (256, 2, 132));
//! assert_eq!(f.tensor_data(t).len(), 132);
//! # Ok::<(), bitnet_gguf::GgufError>(())
//! ```
//!
//! Why our own parser: the `gguf-rs-lib` crate refuses tensor type ids it does not know
//! (such as I2_S = 36), so it cannot open bitnet.cpp files, and it does not enforce our caps
//! on hostile input. It is used only as a dev-dependency, in `tests/cross_check.rs`, as an
//! independent reader of the metadata of the shared test files that it can open.
//!
//! Safety: the crate denies `unsafe_code`; the one exception is the creation of the memory
//! map in `storage.rs`, with its contract stated there.

#![deny(unsafe_code)]

mod error;
mod file;
mod metadata;
mod parse;
mod storage;
mod tensor;
mod types;
mod value;
mod writer;

pub use error::GgufError;
pub use file::{FileData, GgufFile, LoadMode};
pub use metadata::Metadata;
pub use parse::MAGIC;
pub use tensor::{MAX_DIMS, TensorInfo};
pub use types::{Flavour, I2S_TAIL_BYTES, TensorType, i2s_scale};
pub use value::{Array, Value, ValueType};
pub use writer::{GgufWriter, WriteOptions, write_to_vec};

/// Alignment of the data section and of each tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

// Sanity caps for hostile files, enforced by the reader and the writer alike. Each is far
// above anything a real model needs; counts are also checked against the bytes left in the
// file (times the smallest size of one item) before anything is allocated.

/// Largest accepted `general.alignment`.
pub const MAX_ALIGNMENT: u64 = 1 << 16;
/// Longest metadata key (the GGUF spec's limit).
pub const MAX_KEY_LEN: u64 = 65_535;
/// Longest tensor name (ggml itself allows 63 bytes).
pub const MAX_TENSOR_NAME_LEN: u64 = 4096;
/// Longest string value.
pub const MAX_STRING_LEN: u64 = 1 << 30;
/// Most elements in one array.
pub const MAX_ARRAY_LEN: u64 = 1 << 32;
/// Deepest nesting of arrays inside arrays.
pub const MAX_NESTING: u32 = 8;
/// Most tensors in a file.
pub const MAX_TENSORS: u64 = 1 << 20;
/// Most metadata entries in a file.
pub const MAX_KV: u64 = 1 << 20;
