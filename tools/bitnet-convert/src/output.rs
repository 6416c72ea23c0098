//! Writing the output file safely: the destination is checked before any work, data goes
//! to a temporary file beside the target, and only a complete file is renamed into place.
//! The temporary file is removed on every failure path: on error (`Drop`), and on Ctrl-C
//! (the binary installs [`install_interrupt_cleanup`]).
//!
//! Kept self-contained so that it can be replaced by a shared helper later.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::ConvertError;

/// Temporary files currently being written, removed by the interrupt handler.
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn refuse(path: &Path, reason: impl Into<String>) -> ConvertError {
    ConvertError::Output {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// Checks that `path` can receive the output and returns the file to replace: `path`
/// itself, or the regular file a symlink at `path` points to. The parent directory must
/// exist; an existing destination must be a regular file (or a link to one).
pub fn check_destination(path: &Path) -> Result<PathBuf, ConvertError> {
    if path.as_os_str().is_empty() {
        return Err(refuse(path, "empty path"));
    }
    let target = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => path.to_owned(),
        Err(e) => return Err(refuse(path, e.to_string())),
        Ok(m) if m.file_type().is_symlink() => {
            let real = std::fs::canonicalize(path)
                .map_err(|e| refuse(path, format!("symlink to nothing usable ({e})")))?;
            let rm = std::fs::metadata(&real).map_err(|e| refuse(path, e.to_string()))?;
            if !rm.is_file() {
                return Err(refuse(
                    path,
                    format!("symlink to {}, which is not a regular file", real.display()),
                ));
            }
            real
        }
        Ok(m) if m.is_file() => path.to_owned(),
        Ok(m) if m.is_dir() => return Err(refuse(path, "is a directory")),
        Ok(_) => return Err(refuse(path, "exists and is not a regular file")),
    };
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(refuse(
            path,
            format!("directory {} does not exist", parent.display()),
        ));
    }
    Ok(target)
}

/// A temporary file that becomes `target` on [`OutputFile::commit`] and disappears
/// otherwise.
#[derive(Debug)]
pub struct OutputFile {
    target: PathBuf,
    temp: PathBuf,
    file: Option<File>,
}

impl OutputFile {
    /// Creates the temporary file beside `target` (already checked).
    pub fn create(target: &Path) -> Result<OutputFile, ConvertError> {
        let name = target
            .file_name()
            .ok_or_else(|| refuse(target, "no file name"))?
            .to_string_lossy()
            .into_owned();
        let dir = target
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let temp = dir.join(format!(".{name}.{}.partial", std::process::id()));
        // Registered and created under the lock, so the interrupt handler either sees the
        // path of a file that exists or runs before the file is made.
        let mut pending = PENDING.lock().unwrap_or_else(|p| p.into_inner());
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(ConvertError::io(&temp))?;
        pending.push(temp.clone());
        Ok(OutputFile {
            target: target.to_owned(),
            temp,
            file: Some(file),
        })
    }

    /// The open temporary file.
    pub fn file(&mut self) -> &mut File {
        self.file
            .as_mut()
            .expect("file is open until commit or drop")
    }

    /// The temporary path.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// Flushes to disk and renames the temporary file onto the target.
    pub fn commit(mut self) -> Result<(), ConvertError> {
        if let Some(f) = self.file.take() {
            f.sync_all().map_err(ConvertError::io(&self.temp))?;
        }
        // A failed rename (on Windows: the target open or mapped by another process, which
        // Windows will not replace) must not leave the temporary behind: the file handle is
        // already gone, so `Drop` would not remove it.
        if let Err(e) = std::fs::rename(&self.temp, &self.target) {
            let _ = std::fs::remove_file(&self.temp);
            unregister(&self.temp);
            return Err(ConvertError::io(&self.target)(e));
        }
        unregister(&self.temp);
        Ok(())
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        // Still holding the file means commit() never ran: this run failed.
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.temp);
            unregister(&self.temp);
        }
    }
}

fn unregister(path: &Path) {
    let mut pending = PENDING.lock().unwrap_or_else(|p| p.into_inner());
    pending.retain(|p| p != path);
}

/// Removes every temporary file still being written (for an interrupt handler).
pub fn remove_pending() {
    let pending = PENDING.lock().unwrap_or_else(|p| p.into_inner());
    for p in pending.iter() {
        let _ = std::fs::remove_file(p);
    }
}

/// On Ctrl-C (SIGINT): remove the temporary files and exit with status 130.
pub fn install_interrupt_cleanup() -> Result<(), ctrlc::Error> {
    ctrlc::set_handler(|| {
        remove_pending();
        eprintln!("\ninterrupted: partial output removed");
        std::process::exit(130);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        bitnet_test_scratch::fresh_dir(tag)
    }

    #[test]
    fn destination_rules() {
        let d = tmp("dest");
        assert!(check_destination(&d).is_err(), "a directory is refused");
        assert!(check_destination(&d.join("no/such/dir/x.gguf")).is_err());
        assert_eq!(
            check_destination(&d.join("new.gguf")).unwrap(),
            d.join("new.gguf")
        );
        let f = d.join("old.gguf");
        std::fs::write(&f, b"x").unwrap();
        assert_eq!(check_destination(&f).unwrap(), f);
        // Symlinks need a privilege (or developer mode) on Windows.
        #[cfg(unix)]
        symlink_rules(&d, &f);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[cfg(unix)]
    fn symlink_rules(d: &std::path::Path, f: &std::path::Path) {
        let link = d.join("link.gguf");
        std::os::unix::fs::symlink(f, &link).unwrap();
        assert_eq!(
            check_destination(&link).unwrap(),
            std::fs::canonicalize(f).unwrap()
        );
        let dangling = d.join("dangling.gguf");
        std::os::unix::fs::symlink(d.join("missing"), &dangling).unwrap();
        assert!(check_destination(&dangling).is_err());
        let to_dir = d.join("todir.gguf");
        std::os::unix::fs::symlink(d, &to_dir).unwrap();
        assert!(check_destination(&to_dir).is_err());
    }

    #[test]
    fn temp_file_is_removed_unless_committed() {
        let d = tmp("temp");
        let target = d.join("m.gguf");
        let o = OutputFile::create(&target).unwrap();
        let temp = o.temp_path().to_owned();
        assert!(temp.exists());
        drop(o);
        assert!(!temp.exists() && !target.exists());

        let mut o = OutputFile::create(&target).unwrap();
        use std::io::Write;
        o.file().write_all(b"done").unwrap();
        o.commit().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"done");
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            1,
            "no temp file left"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
