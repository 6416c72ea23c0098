//! Every file the CLI writes (`gen-model -o`, `logits -o`, `bench --json-report`) goes
//! through [`OutputFile`], so a bad destination is refused before any work and a run that
//! fails half way never leaves a truncated file or a stray temporary behind:
//!
//! - the destination is checked first: its directory must exist; it must be absent, a
//!   regular file, or a symlink to a regular file (followed on purpose: the file it points
//!   to is replaced and the link kept). Directories, FIFOs, devices and sockets are refused,
//!   so `-o /dev/null` can never replace `/dev/null`;
//! - data goes to a temporary file created beside the real target (same directory, so the
//!   final rename is atomic and never crosses file systems);
//! - [`OutputFile::commit`] syncs and renames it over the target; dropping an uncommitted
//!   file (an error, a `?`) removes the temporary;
//! - Ctrl-C or SIGTERM removes every registered temporary before the process exits with
//!   status 130.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::interrupt::pending_temporaries;

/// A file being written: see the module docs.
#[derive(Debug)]
pub struct OutputFile {
    /// The path as the user gave it (for messages).
    shown: PathBuf,
    /// The file that will be replaced or created (a symlink's destination).
    target: PathBuf,
    temp: PathBuf,
    file: File,
    committed: bool,
}

impl OutputFile {
    /// Checks the destination and creates the temporary file beside it. Call it before the
    /// expensive work, so a bad path costs nothing.
    pub fn create(path: &Path) -> Result<OutputFile> {
        let target = resolve_destination(path)?;
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        };
        let name = target
            .file_name()
            .with_context(|| format!("{}: not a file name", path.display()))?
            .to_string_lossy()
            .into_owned();
        crate::interrupt::install();
        let mut pending = pending_temporaries();
        // A unique name (the pid and a counter), created exclusively, so an existing file of
        // the user's is never truncated by mistake.
        let mut attempt = 0u32;
        let (temp, file) = loop {
            let temp = dir.join(format!(".{name}.{}.{attempt}.tmp", std::process::id()));
            match OpenOptions::new().write(true).create_new(true).open(&temp) {
                Ok(f) => break (temp, f),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 1000 => {
                    attempt += 1;
                }
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "cannot write {}: creating a file in {} failed",
                            path.display(),
                            dir.display()
                        )
                    });
                }
            }
        };
        pending.push(temp.clone());
        drop(pending);
        // A replaced file keeps its permissions.
        if let Ok(meta) = fs::metadata(&target) {
            let _ = fs::set_permissions(&temp, meta.permissions());
        }
        Ok(OutputFile {
            shown: path.to_owned(),
            target,
            temp,
            file,
            committed: false,
        })
    }

    /// The open temporary file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The path as given on the command line.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// The temporary file's path (what errors while writing should name).
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// Flushes the data to disk and renames the temporary over the target.
    pub fn commit(mut self) -> Result<()> {
        self.file
            .sync_all()
            .with_context(|| format!("writing {}", self.shown.display()))?;
        // Under the lock, so an interrupt sees the file either pending or committed.
        let mut pending = pending_temporaries();
        // A failure leaves `committed` false: dropping `self` removes the temporary.
        fs::rename(&self.temp, &self.target).with_context(|| {
            format!(
                "renaming {} to {}{}",
                self.temp.display(),
                self.target.display(),
                REPLACE_HINT
            )
        })?;
        pending.retain(|p| p != &self.temp);
        self.committed = true;
        Ok(())
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if !self.committed {
            let mut pending = pending_temporaries();
            let _ = fs::remove_file(&self.temp);
            pending.retain(|p| p != &self.temp);
        }
    }
}

/// Why a rename over the target may fail where Unix would succeed.
#[cfg(windows)]
const REPLACE_HINT: &str = " (Windows refuses to replace a file another process has mapped \
                            or opened without sharing it, such as a model a running bitnet \
                            is using)";
#[cfg(not(windows))]
const REPLACE_HINT: &str = "";

/// Windows' reserved device names (`NUL`, `CON`, `COM1`...), with any extension and in any
/// directory: the counterpart of `/dev/null`, which must never be replaced either.
#[cfg(windows)]
fn is_windows_device_name(path: &Path) -> bool {
    let Some(stem) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let stem = stem
        .split('.')
        .next()
        .unwrap_or("")
        .trim_end()
        .to_ascii_uppercase();
    matches!(
        stem.as_str(),
        "CON" | "PRN" | "AUX" | "NUL" | "CONIN$" | "CONOUT$"
    ) || ((stem.starts_with("COM") || stem.starts_with("LPT"))
        && stem.len() == 4
        && stem.as_bytes()[3].is_ascii_digit())
}

/// The file an output path will replace or create, or why it must not be written.
fn resolve_destination(path: &Path) -> Result<PathBuf> {
    if path.as_os_str().is_empty() {
        bail!("the output path is empty");
    }
    #[cfg(windows)]
    if is_windows_device_name(path) {
        bail!(
            "refusing to write {}: it is a Windows device name, not a regular file",
            path.display()
        );
    }
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dir = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            return match fs::metadata(dir) {
                Ok(m) if m.is_dir() => Ok(path.to_owned()),
                Ok(_) => bail!(
                    "cannot write {}: {} is not a directory",
                    path.display(),
                    dir.display()
                ),
                Err(e) => Err(e).with_context(|| {
                    format!(
                        "cannot write {}: its directory {} does not exist",
                        path.display(),
                        dir.display()
                    )
                }),
            };
        }
        Err(e) => return Err(e).with_context(|| format!("checking {}", path.display())),
    };
    if meta.file_type().is_symlink() {
        let real = fs::canonicalize(path).with_context(|| {
            let dest = fs::read_link(path).unwrap_or_default();
            format!(
                "cannot write {}: it is a symlink to {}, which does not exist",
                path.display(),
                dest.display()
            )
        })?;
        let real_meta =
            fs::metadata(&real).with_context(|| format!("checking {}", real.display()))?;
        if !real_meta.is_file() {
            bail!(
                "refusing to write {}: it is a symlink to {}, which is {}",
                path.display(),
                real.display(),
                describe(&real_meta)
            );
        }
        return Ok(real);
    }
    if !meta.is_file() {
        bail!(
            "refusing to write {}: it is {}, not a regular file",
            path.display(),
            describe(&meta)
        );
    }
    Ok(path.to_owned())
}

/// "a directory", "a FIFO", ...: what a non-regular file is, for refusals.
fn describe(meta: &fs::Metadata) -> &'static str {
    let ty = meta.file_type();
    if ty.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ty.is_fifo() {
            return "a FIFO";
        }
        if ty.is_char_device() || ty.is_block_device() {
            return "a device";
        }
        if ty.is_socket() {
            return "a socket";
        }
    }
    if ty.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn scratch(name: &str) -> PathBuf {
        bitnet_test_scratch::fresh_dir(name)
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[cfg(windows)]
    #[test]
    fn windows_device_names_are_refused() {
        for name in ["NUL", "nul.gguf", "dir/CON", "COM1.txt", "lpt9", "CONOUT$"] {
            assert!(is_windows_device_name(Path::new(name)), "{name}");
            assert!(resolve_destination(Path::new(name)).is_err(), "{name}");
        }
        for name in ["null.gguf", "COM10", "console", "model.gguf"] {
            assert!(!is_windows_device_name(Path::new(name)), "{name}");
        }
    }

    #[test]
    fn commit_replaces_and_drop_cleans_up() {
        let d = scratch("commit");
        let p = d.join("out.bin");
        fs::write(&p, b"old").unwrap();
        let out = OutputFile::create(&p).unwrap();
        out.file().write_all(b"new").unwrap();
        assert_eq!(
            fs::read(&p).unwrap(),
            b"old",
            "target untouched until commit"
        );
        out.commit().unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(entries(&d), ["out.bin"]);

        let out = OutputFile::create(&p).unwrap();
        out.file().write_all(b"half").unwrap();
        drop(out);
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(entries(&d), ["out.bin"], "temporary removed");
        assert!(!pending_temporaries().iter().any(|t| t.starts_with(&d)));
    }

    #[test]
    fn bad_destinations_are_refused_before_anything_is_created() {
        let d = scratch("refuse");
        let err = OutputFile::create(&d).unwrap_err().to_string();
        assert!(err.contains("a directory"), "{err}");
        let err = OutputFile::create(&d.join("missing/out.bin"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not exist"), "{err}");
        assert!(OutputFile::create(Path::new("")).is_err());
        assert!(entries(&d).is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_to_files_are_followed_and_kept() {
        let d = scratch("symlink");
        let real = d.join("real.bin");
        fs::write(&real, b"old").unwrap();
        let link = d.join("link.bin");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let out = OutputFile::create(&link).unwrap();
        out.file().write_all(b"new").unwrap();
        out.commit().unwrap();
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read(&real).unwrap(), b"new");
        let dangling = d.join("dangling.bin");
        std::os::unix::fs::symlink(d.join("nowhere"), &dangling).unwrap();
        let err = OutputFile::create(&dangling).unwrap_err().to_string();
        assert!(err.contains("does not exist"), "{err}");
    }
}
