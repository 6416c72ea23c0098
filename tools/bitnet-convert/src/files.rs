//! Opening the checkpoint's files safely, and telling whether two paths are one file.
//!
//! A checkpoint directory is user input like any other: `config.json` may be a symlink to
//! `/dev/zero` (its length reads as 0, its content never ends), a shard may be a FIFO (open
//! blocks until a writer appears) or a directory. So every input is checked to be a regular
//! file before it is opened, checked again on the open handle (the path may have been
//! replaced in between), and read with a size cap that holds even if the file grows.

use std::fs::{File, Metadata};
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use crate::error::ConvertError;

/// What kind of file `m` describes, for an error message (`None`: a regular file).
fn not_regular(m: &Metadata) -> Option<&'static str> {
    if m.is_file() {
        return None;
    }
    if m.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = m.file_type();
        if t.is_fifo() {
            return Some("a FIFO (named pipe)");
        }
        if t.is_char_device() {
            return Some("a character device");
        }
        if t.is_block_device() {
            return Some("a block device");
        }
        if t.is_socket() {
            return Some("a socket");
        }
    }
    Some("a special file")
}

fn refuse(path: &Path, kind: &'static str) -> ConvertError {
    ConvertError::NotRegularFile {
        path: path.to_owned(),
        kind,
    }
}

/// Whether the optional input `path` exists: `Ok(false)` if nothing is there (or a
/// symlink to nothing), `Ok(true)` for a regular file (after following symlinks), and an
/// error for anything else, so that a directory or FIFO where a file belongs is reported
/// as such instead of as a missing file.
pub(crate) fn is_present(path: &Path) -> Result<bool, ConvertError> {
    match std::fs::metadata(path) {
        Ok(m) => match not_regular(&m) {
            None => Ok(true),
            Some(kind) => Err(refuse(path, kind)),
        },
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(ConvertError::Io {
            path: path.to_owned(),
            source: e,
        }),
    }
}

/// Opens `path` for reading, refusing anything but a regular file.
pub(crate) fn open_regular(path: &Path) -> Result<File, ConvertError> {
    // Checked before opening: opening a FIFO blocks until something writes to it.
    let m = std::fs::metadata(path).map_err(ConvertError::io(path))?;
    if let Some(kind) = not_regular(&m) {
        return Err(refuse(path, kind));
    }
    let file = open_nonblocking(path).map_err(ConvertError::io(path))?;
    // And on the handle: the path may have been replaced since the check.
    let m = file.metadata().map_err(ConvertError::io(path))?;
    if let Some(kind) = not_regular(&m) {
        return Err(refuse(path, kind));
    }
    Ok(file)
}

/// Opens for reading without blocking: a path swapped for a FIFO between the type check and
/// the open would otherwise block the open until a writer came. On a regular file the flag
/// changes nothing (its reads never block), and anything else is refused on the handle.
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    // Windows has no FIFOs among files (its named pipes live under \\.\pipe\, which is
    // not a regular file and is refused by the type check before this open).
    options.open(path)
}

/// Reads a whole regular file of at most `cap` bytes.
pub(crate) fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, ConvertError> {
    let file = open_regular(path)?;
    let too_large = || ConvertError::TooLarge {
        path: path.to_owned(),
        limit: cap,
    };
    let len = file.metadata().map_err(ConvertError::io(path))?.len();
    if len > cap {
        return Err(too_large());
    }
    // The length is only a hint: reading through `take` bounds a file that grows while
    // it is read (one byte past the cap tells it apart from one exactly at the cap).
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(ConvertError::io(path))?;
    if bytes.len() as u64 > cap {
        return Err(too_large());
    }
    Ok(bytes)
}

/// The identity of an existing file: device and inode on Unix, volume serial number and file
/// index on Windows, so that hard links and symlinks to one file compare equal; the
/// canonical path elsewhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileId(
    #[cfg(any(unix, windows))] (u64, u64),
    #[cfg(not(any(unix, windows)))] PathBuf,
);

impl FileId {
    /// The identity of the file `path` names (symlinks followed), `None` if there is none.
    pub(crate) fn of(path: &Path) -> Option<FileId> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(path).ok()?;
            Some(FileId((m.dev(), m.ino())))
        }
        // Read on an open handle (winapi-util's safe GetFileInformationByHandle): std keeps
        // these two numbers behind an unstable feature.
        #[cfg(windows)]
        {
            let file = File::open(path).ok()?;
            let info = winapi_util::file::information(&file).ok()?;
            Some(FileId((info.volume_serial_number(), info.file_index())))
        }
        #[cfg(not(any(unix, windows)))]
        {
            std::fs::canonicalize(path).ok().map(FileId)
        }
    }
}

/// Name of the shard index.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// Files of a Hugging Face checkpoint directory beside the weights. The conversion reads
/// only some of them (`tokenizer.model` wins over `tokenizer.json`), but replacing any one
/// with the output would still destroy part of the checkpoint.
pub(crate) const SIDE_FILES: &[&str] = &[
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "modules.json",
    "config_sentence_transformers.json",
    INDEX_FILE,
];

/// Paths under `dir` that are checkpoint files: [`SIDE_FILES`] and `*.safetensors`, as far
/// as they exist (a directory that cannot be listed only loses the `*.safetensors` part;
/// the files actually read are protected separately).
pub(crate) fn checkpoint_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = SIDE_FILES.iter().map(|f| dir.join(f)).collect();
    if let Ok(rd) = std::fs::read_dir(dir) {
        out.extend(
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "safetensors")),
        );
    }
    out.retain(|p| p.exists());
    out
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The open itself never waits for a FIFO's writer: the race between the type check and
    /// the open cannot hang the converter, and the handle check then names the FIFO.
    #[test]
    fn a_fifo_opens_without_blocking_and_the_handle_names_it() {
        let dir = bitnet_test_scratch::fresh_dir("convert-fifo-open");
        let fifo = dir.join("config.json");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || {
            let kind = open_nonblocking(&path)
                .and_then(|f| f.metadata())
                .map(|m| not_regular(&m));
            let _ = tx.send(kind);
        });
        let kind = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("opening a FIFO blocked")
            .expect("open and stat");
        assert_eq!(kind, Some("a FIFO (named pipe)"));
        // And through the public entry point, refused by name.
        let err = open_regular(&fifo).unwrap_err().to_string();
        assert!(err.contains("FIFO"), "{err}");
    }
}
