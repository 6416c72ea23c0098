//! A streaming extractor of the ustar archives in `testdata/`: the xz decoder writes the tar
//! stream into it as it decodes, and files come out under a root directory, so no archive is
//! ever held in memory whole. Only what `tar --format=ustar` writes for plain files and
//! directories is accepted; links, devices and paths that would leave the root are refused.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Component, Path, PathBuf};

use crate::TestDataError;

const BLOCK: usize = 512;

/// A file the extractor wrote, with its size (the unpacked tree's stamp checks it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Written {
    pub rel: PathBuf,
    pub len: u64,
}

/// The file whose data is being written.
#[derive(Debug)]
struct Entry {
    path: PathBuf,
    out: BufWriter<File>,
    left: u64,
}

/// Takes a tar stream through [`Write`] and writes its files under `root`.
#[derive(Debug)]
pub(crate) struct Extractor {
    root: PathBuf,
    /// The archive's path, for error messages.
    archive: PathBuf,
    header: Box<[u8; BLOCK]>,
    header_filled: usize,
    entry: Option<Entry>,
    /// Padding still to skip after the current entry's data, to the next 512-byte block.
    padding: u64,
    /// Bytes of the tar stream consumed so far.
    offset: u64,
    ended: bool,
    written: Vec<Written>,
    /// The first error: the decoder only sees an `io::Error`, this keeps the typed one.
    error: Option<TestDataError>,
}

impl Extractor {
    pub fn new(root: &Path, archive: &Path) -> Self {
        Extractor {
            root: root.to_path_buf(),
            archive: archive.to_path_buf(),
            header: Box::new([0; BLOCK]),
            header_filled: 0,
            entry: None,
            padding: 0,
            offset: 0,
            ended: false,
            written: Vec::new(),
            error: None,
        }
    }

    /// The files written, once the stream has ended; an error if the stream failed or stopped
    /// before its end-of-archive block.
    pub fn finish(
        mut self,
        decoded: Result<(), lzma_rs::error::Error>,
    ) -> Result<Vec<Written>, TestDataError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        decoded.map_err(|e| TestDataError::Xz {
            archive: self.archive.clone(),
            reason: e.to_string(),
        })?;
        if !self.ended {
            return Err(self.bad(
                self.offset,
                "the archive ends before its end-of-archive block",
            ));
        }
        Ok(self.written)
    }

    fn bad(&self, offset: u64, reason: impl Into<String>) -> TestDataError {
        TestDataError::Tar {
            archive: self.archive.clone(),
            offset,
            reason: reason.into(),
        }
    }

    fn consume(&mut self, mut buf: &[u8]) -> Result<(), TestDataError> {
        while !buf.is_empty() {
            if self.ended {
                // The zero blocks that pad the archive to its record size.
                self.offset += buf.len() as u64;
                return Ok(());
            }
            let n = if let Some(entry) = &mut self.entry {
                let n = buf
                    .len()
                    .min(usize::try_from(entry.left).unwrap_or(usize::MAX));
                entry
                    .out
                    .write_all(&buf[..n])
                    .map_err(|e| TestDataError::io(&entry.path, e))?;
                entry.left -= n as u64;
                if entry.left == 0 {
                    self.close_entry()?;
                }
                n
            } else if self.padding > 0 {
                let n = buf
                    .len()
                    .min(usize::try_from(self.padding).unwrap_or(usize::MAX));
                self.padding -= n as u64;
                n
            } else {
                let n = buf.len().min(BLOCK - self.header_filled);
                self.header[self.header_filled..self.header_filled + n].copy_from_slice(&buf[..n]);
                self.header_filled += n;
                n
            };
            buf = &buf[n..];
            self.offset += n as u64;
            if self.header_filled == BLOCK {
                self.header_filled = 0;
                self.start_entry()?;
            }
        }
        Ok(())
    }

    fn close_entry(&mut self) -> Result<(), TestDataError> {
        if let Some(entry) = self.entry.take() {
            let path = entry.path;
            entry
                .out
                .into_inner()
                .map_err(|e| TestDataError::io(&path, e.into_error()))?;
        }
        Ok(())
    }

    /// Reads the header block just filled and opens its entry.
    fn start_entry(&mut self) -> Result<(), TestDataError> {
        let at = self.offset - BLOCK as u64;
        let h = &*self.header;
        if h.iter().all(|&b| b == 0) {
            self.ended = true;
            return Ok(());
        }
        let sum: u64 = h
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    u64::from(b' ')
                } else {
                    u64::from(b)
                }
            })
            .sum();
        if octal(&h[148..156]) != Some(sum) {
            return Err(self.bad(at, "header checksum mismatch"));
        }
        if &h[257..262] != b"ustar" {
            return Err(self.bad(at, "not a ustar header"));
        }
        let (name, prefix) = (text(&h[..100]), text(&h[345..500]));
        let name = match (name, prefix) {
            (Some(n), Some("")) => n.to_string(),
            (Some(n), Some(p)) => format!("{p}/{n}"),
            _ => return Err(self.bad(at, "entry name is not UTF-8")),
        };
        let Some(rel) = inside_root(&name) else {
            return Err(self.bad(at, format!("entry {name:?} would leave the directory")));
        };
        let Some(size) = octal(&h[124..136]) else {
            return Err(self.bad(at, format!("entry {name:?}: unreadable size")));
        };
        let path = self.root.join(&rel);
        match h[156] {
            b'0' | 0 => {
                if let Some(parent) = path.parent() {
                    fs::create_dir_all(parent).map_err(|e| TestDataError::io(parent, e))?;
                }
                let file = File::create_new(&path).map_err(|e| match e.kind() {
                    io::ErrorKind::AlreadyExists => TestDataError::Duplicate {
                        rel: rel.clone(),
                        archive: self.archive.clone(),
                    },
                    _ => TestDataError::io(&path, e),
                })?;
                self.written.push(Written { rel, len: size });
                self.entry = Some(Entry {
                    path,
                    out: BufWriter::with_capacity(1 << 20, file),
                    left: size,
                });
                if size == 0 {
                    self.close_entry()?;
                }
                self.padding = (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64;
            }
            b'5' => fs::create_dir_all(&path).map_err(|e| TestDataError::io(&path, e))?,
            t => {
                return Err(self.bad(
                    at,
                    format!(
                        "entry {name:?} has type {:?}: only files and directories",
                        t as char
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl Write for Extractor {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.error.is_some() {
            return Err(io::Error::other("the archive was already refused"));
        }
        match self.consume(buf) {
            Ok(()) => Ok(buf.len()),
            Err(e) => {
                let message = e.to_string();
                self.error = Some(e);
                Err(io::Error::other(message))
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.entry {
            Some(entry) => entry.out.flush(),
            None => Ok(()),
        }
    }
}

/// A NUL-terminated header field as text.
fn text(field: &[u8]) -> Option<&str> {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    std::str::from_utf8(&field[..end]).ok()
}

/// A header's octal number (NUL- or space-terminated); `None` for anything else, including
/// GNU's base-256 form, which no file of test data needs.
fn octal(field: &[u8]) -> Option<u64> {
    let digits = text(field)?.trim_matches(|c| c == ' ' || c == '\0');
    if digits.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(digits, 8).ok()
}

/// `name` as a relative path of plain components (a trailing `/` of a directory allowed).
fn inside_root(name: &str) -> Option<PathBuf> {
    let rel = Path::new(name);
    let plain = rel
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    (plain && rel.components().any(|c| matches!(c, Component::Normal(_))))
        .then(|| rel.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One ustar header as `tar --format=ustar` writes it.
    fn header(name: &str, size: usize, kind: u8) -> Vec<u8> {
        let mut h = vec![0u8; BLOCK];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..107].copy_from_slice(b"0000644");
        h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
        h[136..147].copy_from_slice(b"00000000000");
        h[156] = kind;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        h
    }

    fn tar(entries: &[(&str, &[u8], u8)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, data, kind) in entries {
            out.extend(header(name, data.len(), *kind));
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
        }
        out.resize(out.len() + 2 * BLOCK, 0);
        out
    }

    /// Feeds `bytes` in pieces of `piece` bytes, as a decoder might.
    fn extract(bytes: &[u8], piece: usize) -> (PathBuf, Result<Vec<Written>, TestDataError>) {
        let root = bitnet_test_scratch::fresh_dir("ustar");
        let mut x = Extractor::new(&root, Path::new("test.tar"));
        let fed = bytes.chunks(piece).try_for_each(|c| x.write_all(c));
        let result = x.finish(fed.map_err(lzma_rs::error::Error::IoError));
        (root, result)
    }

    #[test]
    fn files_and_directories_come_out_whatever_the_piece_size() {
        let big: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        let bytes = tar(&[
            ("d/", b"", b'5'),
            ("d/big.bin", &big, b'0'),
            ("d/e/empty", b"", b'0'),
            ("top.txt", b"hello", b'0'),
        ]);
        for piece in [1, 7, 512, 4096, bytes.len()] {
            let (root, result) = extract(&bytes, piece);
            let written = result.unwrap();
            assert_eq!(
                written,
                [("d/big.bin", 3000), ("d/e/empty", 0), ("top.txt", 5)].map(|(rel, len)| Written {
                    rel: rel.into(),
                    len
                })
            );
            assert_eq!(fs::read(root.join("d/big.bin")).unwrap(), big);
            assert_eq!(fs::read(root.join("top.txt")).unwrap(), b"hello");
            assert!(root.join("d/e/empty").is_file());
        }
    }

    #[test]
    fn paths_out_of_the_root_links_and_corruption_are_refused() {
        let refused = |bytes: Vec<u8>, want: &str| {
            let err = extract(&bytes, 100).1.unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        };
        refused(tar(&[("../x", b"1", b'0')]), "would leave the directory");
        refused(tar(&[("/etc/x", b"1", b'0')]), "would leave the directory");
        refused(tar(&[("link", b"", b'2')]), "only files and directories");
        let mut bytes = tar(&[("a", b"1", b'0')]);
        bytes[0] = b'b';
        refused(bytes, "checksum");
        let bytes = tar(&[("a", b"1", b'0')]);
        refused(bytes[..BLOCK].to_vec(), "ends before");
        refused(tar(&[("a", b"1", b'0'), ("a", b"2", b'0')]), "twice");
    }
}
