//! Where a file's bytes live: a read-only memory map or an owned, 64-byte-aligned buffer.
//!
//! This is the crate's only `unsafe`: creating the map, and telling the OS it may drop the
//! pages of tensors already copied out. Everything else reads the bytes through an
//! ordinary `&[u8]`.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use memmap2::Mmap;

use crate::error::GgufError;

/// 64 bytes with 64-byte alignment: a `Vec` of these is an aligned byte buffer obtained
/// without `unsafe` (viewed as bytes through `bytemuck`).
#[derive(Copy, Clone, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
pub(crate) struct Line([u8; 64]);

const _: () = assert!(std::mem::size_of::<Line>() == 64 && std::mem::align_of::<Line>() == 64);

/// The bytes of a whole file.
pub(crate) enum Storage {
    Mmap(Mmap),
    Owned { lines: Vec<Line>, len: usize },
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Storage::Mmap(m) => write!(f, "Mmap({} bytes)", m.len()),
            Storage::Owned { len, .. } => write!(f, "Owned({len} bytes)"),
        }
    }
}

impl Storage {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mmap(m) => m,
            Storage::Owned { lines, len } => &bytemuck::cast_slice::<Line, u8>(lines)[..*len],
        }
    }

    /// A zeroed aligned buffer of `len` bytes; `None` if the memory cannot be had (reported
    /// as an error rather than aborting the process).
    fn try_zeroed(len: usize) -> Option<Storage> {
        let n = len.div_ceil(64);
        let mut lines = Vec::new();
        lines.try_reserve_exact(n).ok()?;
        lines.resize(n, Line([0; 64]));
        Some(Storage::Owned { lines, len })
    }

    /// A zeroed aligned buffer for bytes already held in memory (so the allocation is of a
    /// size the process already manages).
    fn zeroed(len: usize) -> Storage {
        Storage::Owned {
            lines: vec![Line([0; 64]); len.div_ceil(64)],
            len,
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Storage::Mmap(_) => &mut [],
            Storage::Owned { lines, len } => {
                &mut bytemuck::cast_slice_mut::<Line, u8>(lines)[..*len]
            }
        }
    }

    /// Copies `bytes` into an aligned buffer.
    pub(crate) fn copy_of(bytes: &[u8]) -> Storage {
        let mut s = Storage::zeroed(bytes.len());
        s.bytes_mut().copy_from_slice(bytes);
        s
    }

    /// Reads the whole file into an aligned buffer.
    pub(crate) fn read(path: &Path) -> Result<Storage, GgufError> {
        let io = |source| GgufError::Io {
            path: path.to_owned(),
            source,
        };
        check_regular_file(path).map_err(io)?;
        let mut file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let no_memory = || {
            io(std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!("cannot allocate {len} bytes to read the file; use LoadMode::Mmap"),
            ))
        };
        let len = usize::try_from(len).map_err(|_| no_memory())?;
        let mut s = Storage::try_zeroed(len).ok_or_else(no_memory)?;
        file.read_exact(s.bytes_mut()).map_err(io)?;
        Ok(s)
    }

    /// Maps the whole file read-only.
    #[allow(unsafe_code)]
    pub(crate) fn map(path: &Path) -> Result<Storage, GgufError> {
        let io = |source| GgufError::Io {
            path: path.to_owned(),
            source,
        };
        check_regular_file(path).map_err(io)?;
        let file = File::open(path).map_err(io)?;
        if file.metadata().map_err(io)?.len() == 0 {
            // Mapping an empty file fails on some platforms; the parser reports it properly.
            return Ok(Storage::zeroed(0));
        }
        // SAFETY: `Mmap::map` is unsafe because the mapped file may be changed or truncated
        // by another process while we hold the map, which would change bytes we treat as
        // immutable or fault on access. That is the mmap contract every mmap reader accepts
        // (ripgrep states the same): we map read-only, never write through the map, and
        // validate every offset against the map's length before slicing, so a file that
        // changes under us yields wrong values or SIGBUS, never an out-of-bounds read in
        // safe code. Callers who cannot accept that use `LoadMode::Read`.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Ok(Storage::Mmap(map))
    }

    /// `MADV_DONTNEED` on the pages of `range` of a map (see
    /// `GgufFile::release_tensor_pages`); nothing for an owned buffer.
    #[allow(unsafe_code)]
    pub(crate) fn release(&self, range: std::ops::Range<usize>) {
        #[cfg(unix)]
        if let Storage::Mmap(m) = self {
            // SAFETY: the map is a read-only shared mapping of a file (`Mmap::map`). Dropping
            // its pages with MADV_DONTNEED only discards this process's page-table entries:
            // the next access faults the same bytes back in from the file, so no reference
            // into the map ever observes different contents (beyond the file-changes caveat
            // stated where the map is made). memmap2 widens the range to whole pages; pages
            // shared with a neighbouring tensor come back on their next read the same way.
            let _ = unsafe {
                m.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    range.start,
                    range.len(),
                )
            };
        }
        // Windows has no such advice for a file mapping (`DiscardVirtualMemory` and
        // `OfferVirtualMemory` are for private pages): the pages stay in the working set
        // until Windows trims it, counted in the process's memory but reclaimed under
        // pressure (docs/windows.md).
        #[cfg(not(unix))]
        let _ = range;
    }

    /// `MADV_RANDOM` and `MADV_NOHUGEPAGE` on `range` of a map (see
    /// `GgufFile::advise_rows`); nothing for an owned buffer. Both only change how pages
    /// are brought in and mapped, never what a read returns.
    pub(crate) fn advise_rows(&self, range: std::ops::Range<usize>) {
        #[cfg(target_os = "linux")]
        if let Storage::Mmap(m) = self {
            for advice in [memmap2::Advice::Random, memmap2::Advice::NoHugePage] {
                let _ = m.advise_range(advice, range.start, range.len());
            }
        }
        // Elsewhere no advice: `MADV_NOHUGEPAGE` is Linux's, and Windows has no read
        // pattern hint for a mapped view (its prefetch call, PrefetchVirtualMemory, asks
        // for pages rather than fewer).
        #[cfg(not(target_os = "linux"))]
        let _ = range;
    }

    pub(crate) fn is_mmap(&self) -> bool {
        matches!(self, Storage::Mmap(_))
    }
}

/// Refuses what is not a regular file before it is opened: mapping a directory fails with a
/// baffling "No such device", and opening a FIFO blocks until some writer appears.
fn check_regular_file(path: &Path) -> std::io::Result<()> {
    let ty = std::fs::metadata(path)?.file_type();
    if ty.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "is a directory, not a GGUF file",
        ));
    }
    if !ty.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "is not a regular file (a FIFO, socket or device), not a GGUF file",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_copy_is_64_byte_aligned() {
        let data: Vec<u8> = (0..=200u8).collect();
        let s = Storage::copy_of(&data);
        assert_eq!(s.bytes(), &data[..]);
        assert_eq!(s.bytes().as_ptr() as usize % 64, 0);
        assert!(!s.is_mmap());
        assert!(Storage::copy_of(&[]).bytes().is_empty());
    }

    #[test]
    fn directories_are_refused_by_name() {
        let dir = std::env::temp_dir();
        for open in [Storage::map, Storage::read] {
            let err = open(&dir).unwrap_err().to_string();
            assert!(err.contains("is a directory"), "{err}");
        }
    }
}
