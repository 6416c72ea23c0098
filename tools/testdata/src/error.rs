//! What can go wrong while unpacking the test data, with the file it went wrong on.

use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TestDataError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: no archive (*.tar.xz) in it: the checkout is incomplete (`git checkout -- testdata`)", .0.display())]
    NoArchive(PathBuf),
    #[error("{}: xz: {reason}", archive.display())]
    Xz { archive: PathBuf, reason: String },
    #[error("{}: tar, at byte {offset}: {reason}", archive.display())]
    Tar {
        archive: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error(
        "{} is in the test data twice (again in {}): each file is plain or in one archive",
        rel.display(),
        archive.display()
    )]
    Duplicate { rel: PathBuf, archive: PathBuf },
}

impl TestDataError {
    pub(crate) fn io(path: &Path, source: io::Error) -> Self {
        TestDataError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
