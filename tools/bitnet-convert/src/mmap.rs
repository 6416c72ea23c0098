//! The two `unsafe` operations of the converter, fenced here: mapping a safetensors file
//! read-only, and telling the kernel it may drop the pages of a tensor we are done with.
//!
//! Dropping pages is what keeps the converter's resident memory at about one tensor: a
//! file-backed map counts every page it touched in RSS until the kernel reclaims it, so
//! without the advice a 5 GiB checkpoint would show 5 GiB resident after one pass.

#![allow(unsafe_code)]

use std::path::Path;

use memmap2::Mmap;
#[cfg(unix)]
use memmap2::UncheckedAdvice;

use crate::error::ConvertError;

/// A read-only map of a whole file.
#[derive(Debug)]
pub struct MappedFile {
    map: Mmap,
}

impl MappedFile {
    /// Maps `path` read-only.
    pub fn open(path: &Path) -> Result<MappedFile, ConvertError> {
        // Not a plain open: a FIFO would block it, and a directory maps as ENODEV.
        let file = crate::files::open_regular(path)?;
        // SAFETY: the map is read-only and private to this process. Its contract is that
        // the file is not truncated or modified while mapped; a checkpoint being rewritten
        // under a running conversion is outside what we can guard against (a truncation
        // would raise SIGBUS, as for any mmap reader such as safetensors' own loaders). We
        // never hand out the map beyond the lifetime of `MappedFile`.
        let map = unsafe { Mmap::map(&file) }.map_err(ConvertError::io(path))?;
        Ok(MappedFile { map })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Lets the kernel drop the resident pages of `start..end` (a tensor already
    /// converted). Failure only costs memory, so it is ignored. Windows has no such advice
    /// for a file map (its `DiscardVirtualMemory` is for private pages): there the pages stay
    /// in the working set until Windows trims it, so RSS grows with the file read; it is
    /// memory Windows reclaims under pressure, not memory the conversion needs.
    #[cfg(not(unix))]
    pub fn release(&self, start: usize, end: usize) {
        let _ = (start, end);
    }

    /// Lets the kernel drop the resident pages of `start..end` (a tensor already
    /// converted). Failure only costs memory, so it is ignored.
    #[cfg(unix)]
    pub fn release(&self, start: usize, end: usize) {
        let end = end.min(self.map.len());
        if start >= end {
            return;
        }
        // SAFETY: MADV_DONTNEED on a read-only, file-backed mapping discards the cached
        // pages; later reads fault them back in from the file with the same contents (the
        // zero-fill behaviour that makes the advice unsafe applies to anonymous or
        // privately written pages, and this map is never written). No reference into the
        // range is invalidated because the bytes observed stay the same.
        let _ = unsafe {
            self.map
                .unchecked_advise_range(UncheckedAdvice::DontNeed, start, end - start)
        };
    }
}
