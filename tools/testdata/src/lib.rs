//! The repository's test data, for the workspace's tests and tools.
//!
//! `testdata/` at the repository root holds it (see its README.md): small text files plain,
//! the large binaries (GGUF files, logits, a checkpoint) in `*.tar.xz` archives. A test asks
//! for a file by its path under `testdata/` ([`path`]); the first ask in a process makes sure
//! an unpacked copy of the whole tree is current in `<target dir>/testdata/` (or in
//! `$BITNET_TESTDATA`) and answers from there, so plain `cargo test` works in a fresh clone
//! with no script and no download. A file that is not there panics with a message naming it:
//! a test that needs data fails without it, it never passes by skipping.
//!
//! `cargo run -p bitnet-testdata` does the same unpacking for scripts and prints the folder.

mod error;
mod unpack;
mod ustar;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use error::TestDataError;
pub use unpack::{Outcome, unpack};

/// The variable naming the folder to unpack into, instead of `<target dir>/testdata`.
pub const DEST_VAR: &str = "BITNET_TESTDATA";

/// The checkout's `testdata/` folder.
pub fn source_dir() -> PathBuf {
    // This crate lives at tools/testdata, two levels below the repository root.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .unwrap_or(manifest)
        .join("testdata")
}

/// Where the unpacked copy lives: `$BITNET_TESTDATA` if set, else `testdata/` in the cargo
/// target directory this program was built into.
pub fn default_dest() -> PathBuf {
    match std::env::var_os(DEST_VAR) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => target_dir().join("testdata"),
    }
}

/// The cargo target directory: the nearest folder above this executable holding cargo's
/// `CACHEDIR.TAG` (test binaries sit in `<target>/[<triple>/]<profile>/deps/`, whatever
/// `CARGO_TARGET_DIR` was), else `target/` in the repository.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().ok();
    let tagged = exe
        .iter()
        .flat_map(|e| e.ancestors().skip(1))
        .find(|dir| dir.join("CACHEDIR.TAG").is_file());
    match tagged {
        Some(dir) => dir.to_path_buf(),
        None => source_dir().with_file_name("target"),
    }
}

/// The unpacked copy of `testdata/`, made current on the first call in a process.
///
/// # Panics
/// If it cannot be unpacked (the message says why and where).
pub fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let (source, dest) = (source_dir(), default_dest());
        if let Err(e) = unpack(&source, &dest) {
            panic!(
                "test data: cannot unpack {} into {}: {e}",
                source.display(),
                dest.display()
            );
        }
        dest
    })
}

/// The test data file `rel` (a path under `testdata/`, e.g. `vocab/ggml-vocab-gpt-2.gguf`),
/// from the unpacked copy.
///
/// # Panics
/// If there is no such file: a test that needs it must fail, not skip.
pub fn path(rel: &str) -> PathBuf {
    let p = dir().join(rel);
    assert!(
        p.exists(),
        "test data missing: {rel} is not in {} (unpacked from {}); testdata/README.md lists \
         every file and where it comes from",
        dir().display(),
        source_dir().display()
    );
    p
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_listed_file_is_found() {
        let inp = super::path("vocab/ggml-vocab-gpt-2.gguf.inp");
        assert!(
            std::fs::read_to_string(inp)
                .unwrap()
                .contains("__ggml_vocab_test__")
        );
        assert!(super::path("vocab/ggml-vocab-gpt-2.gguf").is_file());
    }

    #[test]
    #[should_panic(expected = "test data missing: vocab/no-such.gguf is not in")]
    fn a_missing_file_fails_naming_it() {
        super::path("vocab/no-such.gguf");
    }
}
