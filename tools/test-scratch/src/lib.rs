//! Where the workspace's tests write their files.
//!
//! The suite writes models of up to a few hundred MB; a test binary that leaves them in the
//! temp directory fills the disk after a few runs (CI once failed with `No space left on
//! device` that way). Every file a test writes goes under one directory per test process,
//! and that directory is removed when the process exits, whether its tests passed or failed.
//! Many tests of one binary share a model built once, so a per-test guard would not do: the
//! removal is tied to the process's exit instead.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

static PROCESS_DIR: OnceLock<PathBuf> = OnceLock::new();

extern "C" fn remove_process_dir() {
    if let Some(dir) = PROCESS_DIR.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// This process's scratch directory, `<temp>/bitnet-tests-<pid>`: created on first use and
/// removed, with everything in it, when the process exits (the test harness exits through
/// `exit`, which runs `atexit` handlers, on success and on failure alike).
pub fn process_dir() -> &'static Path {
    PROCESS_DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("bitnet-tests-{}", std::process::id()));
        // A directory of the same name can only be left from a killed process whose pid was
        // reused: its contents are stale.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        // SAFETY: `atexit` is given a plain `extern "C"` function of no arguments, which
        // touches only the initialised `OnceLock` and the file system.
        let rc = unsafe { libc::atexit(remove_process_dir) };
        assert_eq!(rc, 0, "atexit refused the scratch cleanup");
        dir
    })
}

/// A new, empty directory under [`process_dir`], named after `tag` and unique within the
/// process.
pub fn fresh_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = process_dir().join(format!("{tag}-{}", N.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_dirs_are_distinct_empty_and_under_the_process_dir() {
        let a = fresh_dir("t");
        let b = fresh_dir("t");
        assert_ne!(a, b);
        for d in [&a, &b] {
            assert!(d.starts_with(process_dir()));
            assert_eq!(std::fs::read_dir(d).unwrap().count(), 0);
        }
    }

    #[test]
    fn the_process_dir_is_removed_at_exit() {
        // A child process (this test binary, running only the helper below) makes its
        // directory and exits; the directory must be gone afterwards.
        if std::env::var_os("BITNET_SCRATCH_CHILD").is_some() {
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "tests::child_writes_a_file", "--nocapture"])
            .env("BITNET_SCRATCH_CHILD", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let dir = stdout
            .lines()
            .find_map(|l| l.strip_prefix("scratch: "))
            .unwrap_or_else(|| panic!("the child printed no directory: {stdout}"));
        assert!(dir.contains("bitnet-tests-"), "{dir}");
        assert!(!Path::new(dir).exists(), "{dir} outlived its process");
    }

    #[test]
    fn child_writes_a_file() {
        if std::env::var_os("BITNET_SCRATCH_CHILD").is_none() {
            return;
        }
        let d = fresh_dir("child");
        std::fs::write(d.join("f"), b"x").unwrap();
        assert!(d.join("f").exists());
        println!("scratch: {}", process_dir().display());
    }
}
