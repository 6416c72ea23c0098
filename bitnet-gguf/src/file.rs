//! An opened GGUF file: the parsed header plus zero-copy views of tensor data over either a
//! memory map or an owned aligned buffer.

use std::collections::HashMap;
use std::path::Path;

use crate::error::GgufError;
use crate::metadata::Metadata;
use crate::parse::{check_tensor_layout, parse_header};
use crate::storage::Storage;
use crate::tensor::TensorInfo;
use crate::types::Flavour;

/// How [`GgufFile::open`] gets at the bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LoadMode {
    /// Memory-map the file (fast start, pages shared with the page cache).
    Mmap,
    /// Read the file into an owned, 64-byte-aligned buffer (immune to the file changing).
    Read,
}

/// A parsed, validated GGUF file. Every tensor's bytes were checked to lie inside the file
/// and not to overlap another tensor's when it was opened.
#[derive(Debug)]
pub struct GgufFile {
    version: u32,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
    alignment: u64,
    header_len: u64,
    data_offset: u64,
    flavour: Flavour,
    storage: Storage,
}

impl GgufFile {
    /// Opens and validates the file at `path`.
    pub fn open(path: impl AsRef<Path>, mode: LoadMode) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let storage = match mode {
            LoadMode::Mmap => Storage::map(path)?,
            LoadMode::Read => Storage::read(path)?,
        };
        GgufFile::from_storage(storage)
    }

    /// Parses a file held in memory (copied into an aligned buffer). For tests and fuzzing.
    pub fn from_bytes(bytes: &[u8]) -> Result<GgufFile, GgufError> {
        GgufFile::from_storage(Storage::copy_of(bytes))
    }

    fn from_storage(storage: Storage) -> Result<GgufFile, GgufError> {
        let bytes = storage.bytes();
        let h = parse_header(bytes)?;
        let data_len = (bytes.len() as u64).saturating_sub(h.data_offset);
        check_tensor_layout(&h.tensors, data_len)?;
        let by_name = h
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            version: h.version,
            metadata: h.metadata,
            tensors: h.tensors,
            by_name,
            alignment: h.alignment,
            header_len: h.header_len,
            data_offset: h.data_offset,
            flavour: h.flavour,
            storage,
        })
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The key/value metadata, in file order.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Tensor infos in file (header) order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of `t`, exactly `t.n_bytes` long. `t` must come from this file (its range
    /// was checked at open); a foreign `TensorInfo` whose range does not fit gets an empty
    /// slice rather than a panic.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let start = self.data_offset.saturating_add(t.offset);
        let end = start.saturating_add(t.n_bytes);
        match (usize::try_from(start), usize::try_from(end)) {
            (Ok(s), Ok(e)) => self.storage.bytes().get(s..e).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// Lets the OS drop the pages of tensor `t` from this process's memory (a map only; a
    /// no-op for an owned buffer). For a tensor the caller has copied or repacked and will
    /// not read again: its source bytes then stop counting towards the resident set. A
    /// later read still sees the same bytes (they come back from the file), so this is a
    /// hint about memory, never about contents. Best effort: an OS that refuses is ignored.
    pub fn release_tensor_pages(&self, t: &TensorInfo) {
        let start = self.data_offset.saturating_add(t.offset);
        let end = start.saturating_add(t.n_bytes);
        if let (Ok(s), Ok(e)) = (usize::try_from(start), usize::try_from(end))
            && e <= self.storage.bytes().len()
            && s < e
        {
            self.storage.release(s..e);
        }
    }

    /// [`GgufFile::release_tensor_pages`] for any byte range of the file (clamped to it).
    pub fn release_pages(&self, range: std::ops::Range<usize>) {
        release_clamped(&self.storage, range);
    }

    /// Tells the OS that `range` of a map (clamped to the file) will be read a row here and
    /// there (an embedding looked up by token), not streamed: a read then brings in just
    /// the pages it touches (`MADV_RANDOM`: no read-around; `MADV_NOHUGEPAGE`: no 2 MiB
    /// mapping of a large page-cache folio), so the pages a run keeps resident stay close
    /// to the rows it read. A hint about memory, never about contents; a no-op for an owned
    /// buffer or where the OS refuses.
    pub fn advise_rows(&self, range: std::ops::Range<usize>) {
        advise_rows_clamped(&self.storage, range);
    }

    /// Keeps only the file's bytes, dropping the parsed header (every metadata value and
    /// tensor name): what a loaded model still reads once it has built what it needs from
    /// the header (a tokenizer's vocabulary alone is 128k strings, several MiB).
    pub fn into_data(self) -> FileData {
        FileData {
            storage: self.storage,
        }
    }

    /// The bytes of the tensor called `name`.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8], GgufError> {
        let t = self.tensor(name).ok_or_else(|| GgufError::TensorNotFound {
            name: name.to_owned(),
        })?;
        Ok(self.tensor_data(t))
    }

    /// The data alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute offset of the tensor data section (the header length rounded up to the
    /// alignment; may equal or exceed the file size in a file without tensors).
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Bytes of header (magic through the last tensor info), before the padding.
    pub fn header_len(&self) -> u64 {
        self.header_len
    }

    /// Size of the file in bytes.
    pub fn file_size(&self) -> u64 {
        self.storage.bytes().len() as u64
    }

    /// Whether the bytes are memory-mapped (`LoadMode::Mmap`).
    pub fn is_mmap(&self) -> bool {
        self.storage.is_mmap()
    }

    /// Which ggml fork's type ids the file was read with.
    pub fn flavour(&self) -> Flavour {
        self.flavour
    }

    /// The whole file's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// Whether the file ends padded to the alignment (after the last tensor, or after the
    /// header if there are none), as llama.cpp writes it; some writers omit that padding.
    /// Pass this to [`crate::WriteOptions::pad_tail`] to reproduce the file exactly.
    pub fn tail_padded(&self) -> bool {
        let end = self
            .tensors
            .iter()
            .map(|t| self.data_offset + t.end())
            .max()
            .unwrap_or(self.header_len);
        self.file_size() == end.next_multiple_of(self.alignment)
    }
}

/// The bytes of a GGUF file without its parsed header ([`GgufFile::into_data`]), with the
/// same memory hints as [`GgufFile`].
#[derive(Debug)]
pub struct FileData {
    storage: Storage,
}

impl FileData {
    /// The whole file's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// Whether the bytes are memory-mapped.
    pub fn is_mmap(&self) -> bool {
        self.storage.is_mmap()
    }

    /// See [`GgufFile::release_pages`].
    pub fn release_pages(&self, range: std::ops::Range<usize>) {
        release_clamped(&self.storage, range);
    }

    /// See [`GgufFile::advise_rows`].
    pub fn advise_rows(&self, range: std::ops::Range<usize>) {
        advise_rows_clamped(&self.storage, range);
    }
}

fn release_clamped(storage: &Storage, range: std::ops::Range<usize>) {
    let len = storage.bytes().len();
    let (s, e) = (range.start.min(len), range.end.min(len));
    if s < e {
        storage.release(s..e);
    }
}

fn advise_rows_clamped(storage: &Storage, range: std::ops::Range<usize>) {
    let len = storage.bytes().len();
    let (s, e) = (range.start.min(len), range.end.min(len));
    if s < e {
        storage.advise_rows(s..e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_is_shareable_across_threads() {
        fn check<T: Send + Sync>() {}
        check::<GgufFile>();
    }

    #[test]
    fn open_reports_the_path() {
        let e = GgufFile::open("/nonexistent/x.gguf", LoadMode::Read).unwrap_err();
        assert!(matches!(&e, GgufError::Io { path, .. } if path.ends_with("x.gguf")));
        assert!(e.to_string().contains("/nonexistent/x.gguf"));
        let e = GgufFile::open("/nonexistent/x.gguf", LoadMode::Mmap).unwrap_err();
        assert!(matches!(e, GgufError::Io { .. }));
    }
}
