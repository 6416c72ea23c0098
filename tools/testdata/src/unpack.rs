//! Keeps an unpacked copy of `testdata/` current. The plain files are copied and every archive
//! extracted into a fresh directory beside the destination, which is then renamed into place:
//! test binaries started together never see a half-written tree, and whichever finishes first
//! wins. A stamp in the copy records the sources (path, size, modification time) and every file
//! written (path, size), so a changed source, or a copied file deleted or cut short, makes the
//! next caller unpack again.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::UNIX_EPOCH;

use crate::TestDataError;
use crate::ustar::{Extractor, Written};

/// The stamp's name inside the unpacked copy, and its first line (bumped when its meaning
/// changes, so an older copy is unpacked again).
const STAMP: &str = ".stamp";
const STAMP_FORMAT: &str = "bitnet-testdata stamp 1";

/// What [`unpack`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The copy was current; nothing was written.
    Current,
    /// The copy was missing or stale and was written anew, with this many files.
    Unpacked { files: usize },
}

/// Makes `dest` a current copy of `source` (a `testdata/` folder): its plain files copied and
/// its archives, `*.tar.xz` directly inside it, extracted in name order.
pub fn unpack(source: &Path, dest: &Path) -> Result<Outcome, TestDataError> {
    let sources = source_listing(source)?;
    if is_current(dest, &sources) {
        return Ok(Outcome::Current);
    }
    let tmp = sibling(dest, "tmp");
    let filled = fill(&tmp, source, &sources);
    let written = match filled {
        Ok(w) => w,
        Err(e) => {
            let _ = fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    let mut stamp = sources.text.clone();
    for w in &written {
        // Paths are written with `/` on every system, as the listing writes them.
        let _ = writeln!(stamp, "out {} {}", w.len, slash_path(&w.rel));
    }
    let stamp_path = tmp.join(STAMP);
    fs::write(&stamp_path, stamp).map_err(|e| TestDataError::io(&stamp_path, e))?;
    install(&tmp, dest, &sources)?;
    Ok(Outcome::Unpacked {
        files: written.len(),
    })
}

/// The files of `testdata/`: the stamp's `in` lines, and the archives among them.
#[derive(Debug)]
struct Sources {
    text: String,
    plain: Vec<PathBuf>,
    archives: Vec<PathBuf>,
}

fn source_listing(source: &Path) -> Result<Sources, TestDataError> {
    let mut files = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = source.join(&rel);
        let entries = fs::read_dir(&dir).map_err(|e| TestDataError::io(&dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| TestDataError::io(&dir, e))?;
            let rel = rel.join(entry.file_name());
            let kind = entry
                .file_type()
                .map_err(|e| TestDataError::io(&entry.path(), e))?;
            if kind.is_dir() {
                stack.push(rel);
            } else {
                files.push(rel);
            }
        }
    }
    files.sort();
    let mut sources = Sources {
        text: format!("{STAMP_FORMAT}\nsource {}\n", source.display()),
        plain: Vec::new(),
        archives: Vec::new(),
    };
    for rel in files {
        let path = source.join(&rel);
        let meta = fs::metadata(&path).map_err(|e| TestDataError::io(&path, e))?;
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let _ = writeln!(
            sources.text,
            "in {} {mtime} {}",
            meta.len(),
            slash_path(&rel)
        );
        let is_archive = rel.components().count() == 1 && slash_path(&rel).ends_with(".tar.xz");
        if is_archive {
            sources.archives.push(rel);
        } else {
            sources.plain.push(rel);
        }
    }
    if sources.archives.is_empty() {
        return Err(TestDataError::NoArchive(source.to_path_buf()));
    }
    Ok(sources)
}

/// The stamp matches the sources and every file it lists is there at its size.
fn is_current(dest: &Path, sources: &Sources) -> bool {
    let Ok(stamp) = fs::read_to_string(dest.join(STAMP)) else {
        return false;
    };
    let Some(outputs) = stamp.strip_prefix(&sources.text) else {
        return false;
    };
    outputs.lines().all(|line| {
        let mut parts = line.strip_prefix("out ").unwrap_or("").splitn(2, ' ');
        let (Some(len), Some(rel)) = (parts.next(), parts.next()) else {
            return false;
        };
        fs::metadata(dest.join(rel)).is_ok_and(|m| m.is_file() && len == m.len().to_string())
    })
}

/// Writes the copy into `tmp`: the plain files, then each archive's files.
fn fill(tmp: &Path, source: &Path, sources: &Sources) -> Result<Vec<Written>, TestDataError> {
    let _ = fs::remove_dir_all(tmp);
    fs::create_dir_all(tmp).map_err(|e| TestDataError::io(tmp, e))?;
    let mut written = Vec::new();
    for rel in &sources.plain {
        let to = tmp.join(rel);
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent).map_err(|e| TestDataError::io(parent, e))?;
        }
        let from = source.join(rel);
        let len = fs::copy(&from, &to).map_err(|e| TestDataError::io(&from, e))?;
        written.push(Written {
            rel: rel.clone(),
            len,
        });
    }
    for rel in &sources.archives {
        let archive = source.join(rel);
        let file = File::open(&archive).map_err(|e| TestDataError::io(&archive, e))?;
        let mut extractor = Extractor::new(tmp, &archive);
        let decoded =
            lzma_rs::xz_decompress(&mut BufReader::with_capacity(1 << 20, file), &mut extractor);
        written.extend(extractor.finish(decoded)?);
    }
    Ok(written)
}

/// Renames the finished `tmp` to `dest`, moving a stale `dest` aside first. Another process
/// may be doing the same: if a current copy appears at `dest` meanwhile, ours is dropped.
fn install(tmp: &Path, dest: &Path, sources: &Sources) -> Result<(), TestDataError> {
    let mut last_error = None;
    for _ in 0..10 {
        match fs::rename(tmp, dest) {
            Ok(()) => return Ok(()),
            Err(e) => last_error = Some(e),
        }
        if is_current(dest, sources) {
            let _ = fs::remove_dir_all(tmp);
            return Ok(());
        }
        let old = sibling(dest, "old");
        match fs::rename(dest, &old) {
            Ok(()) => {
                let _ = fs::remove_dir_all(&old);
            }
            // Another process moved it first; try again.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(TestDataError::io(dest, e)),
        }
    }
    let _ = fs::remove_dir_all(tmp);
    Err(TestDataError::io(
        dest,
        last_error.unwrap_or_else(|| std::io::Error::other("could not rename into place")),
    ))
}

/// A name beside `dest` that no other process or call uses: `.NAME.WHAT-PID-N`.
fn sibling(dest: &Path, what: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = dest
        .file_name()
        .map_or("testdata".into(), |n| n.to_string_lossy());
    let n = N.fetch_add(1, Ordering::Relaxed);
    dest.with_file_name(format!(".{name}.{what}-{}-{n}", std::process::id()))
}

fn slash_path(rel: &Path) -> String {
    let parts: Vec<_> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect();
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `testdata/` folder with one plain file and one archive holding `archived` (a tar of
    /// one file, written by hand: a ustar header, the data, padding, the end blocks).
    fn source_with(archived: &[u8]) -> PathBuf {
        let dir = bitnet_test_scratch::fresh_dir("testdata-src");
        fs::create_dir_all(dir.join("text")).unwrap();
        fs::write(dir.join("text/plain.txt"), "plain").unwrap();
        write_archive(&dir.join("data.tar.xz"), "bin/archived.bin", archived);
        dir
    }

    fn write_archive(path: &Path, name: &str, data: &[u8]) {
        let mut h = vec![0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
        h[156] = b'0';
        h[257..263].copy_from_slice(b"ustar\0");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        let mut tar = h;
        tar.extend_from_slice(data);
        tar.resize(tar.len().div_ceil(512) * 512 + 1024, 0);
        let mut xz = Vec::new();
        lzma_rs::xz_compress(&mut &tar[..], &mut xz).unwrap();
        fs::write(path, xz).unwrap();
    }

    #[test]
    fn unpacks_once_and_again_when_a_source_or_an_output_changes() {
        let src = source_with(b"first");
        let dest = bitnet_test_scratch::fresh_dir("testdata-dest").join("testdata");
        assert_eq!(unpack(&src, &dest).unwrap(), Outcome::Unpacked { files: 2 });
        assert_eq!(fs::read(dest.join("bin/archived.bin")).unwrap(), b"first");
        assert_eq!(fs::read(dest.join("text/plain.txt")).unwrap(), b"plain");
        assert_eq!(unpack(&src, &dest).unwrap(), Outcome::Current);

        write_archive(
            &src.join("data.tar.xz"),
            "bin/archived.bin",
            b"second, longer",
        );
        assert_eq!(unpack(&src, &dest).unwrap(), Outcome::Unpacked { files: 2 });
        assert_eq!(
            fs::read(dest.join("bin/archived.bin")).unwrap(),
            b"second, longer"
        );

        fs::remove_file(dest.join("text/plain.txt")).unwrap();
        assert_eq!(unpack(&src, &dest).unwrap(), Outcome::Unpacked { files: 2 });
        assert!(dest.join("text/plain.txt").is_file());

        // Nothing is left beside the copy.
        let beside = fs::read_dir(dest.parent().unwrap()).unwrap().count();
        assert_eq!(beside, 1);
    }

    #[test]
    fn a_missing_archive_or_a_file_both_plain_and_archived_is_an_error() {
        let src = source_with(b"x");
        let dest = bitnet_test_scratch::fresh_dir("testdata-dest").join("testdata");
        fs::create_dir_all(src.join("bin")).unwrap();
        fs::write(src.join("bin/archived.bin"), "plain too").unwrap();
        let err = unpack(&src, &dest).unwrap_err();
        assert!(matches!(err, TestDataError::Duplicate { .. }), "{err}");
        assert!(!dest.exists());

        fs::remove_file(src.join("data.tar.xz")).unwrap();
        let err = unpack(&src, &dest).unwrap_err();
        assert!(matches!(err, TestDataError::NoArchive(_)), "{err}");
    }
}
