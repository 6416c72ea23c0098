//! `--prefix-cache-dir DIR`: the prefix cache kept on disk, so a restart or a deploy does
//! not read long system prompts and documents again. After each answered request the rows
//! the cache holds of its prompt and answer are written to `DIR/<model digest>-<tokens
//! digest>.bkv` by a writer thread (the engine thread only copies them), unless a file
//! already holds them; a file whose tokens the new one extends is replaced; past
//! `--prefix-cache-max-mib` the oldest files go. At start, after the warm-up and before the
//! server says it is ready, the model's files are put back into the prefix cache, newest
//! first, while free blocks last. A file of another model is never read (its name says
//! whose it is); one of another kernel set or settings is refused and one that is damaged
//! is reported and skipped, never loaded (see `bitnet_core::kv::snapshot_file`).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::{Context, Result};
use bitnet_core::kv::KvSnapshot;
use bitnet_core::kv::snapshot_file::{SnapshotKey, read_snapshot, write_snapshot};
use bitnet_core::runtime::Handle;
use bitnet_core::scheduler::Scheduler;

use crate::output::{count, note};

/// Prefixes shorter than this are not worth a file (one KV block of the default size).
const MIN_TOKENS: usize = 16;

/// One model's files in the folder; see the module docs.
#[derive(Debug)]
pub struct PrefixStore {
    dir: PathBuf,
    key: SnapshotKey,
    saved: Arc<Mutex<Vec<Saved>>>,
    writer: Mutex<Sender<KvSnapshot>>,
}

/// A file the store wrote or restored.
#[derive(Debug)]
struct Saved {
    path: PathBuf,
    tokens: Vec<u32>,
    bytes: u64,
}

/// What the start-up restore did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Restored {
    pub files: usize,
    pub tokens: usize,
    /// Files skipped, each with why (damaged, other settings, no room).
    pub skipped: Vec<String>,
}

impl PrefixStore {
    /// The store of the model whose rows `key` names, in `dir` (made if missing), keeping
    /// at most `max_bytes` of files.
    pub fn open(dir: &Path, key: SnapshotKey, max_bytes: u64) -> Result<Arc<PrefixStore>> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("making the prefix cache folder {}", dir.display()))?;
        let (tx, rx) = channel();
        let store = Arc::new(PrefixStore {
            dir: dir.to_owned(),
            key,
            saved: Arc::default(),
            writer: Mutex::new(tx),
        });
        let writer = Writer {
            dir: store.dir.clone(),
            key: store.key.clone(),
            max_bytes,
            saved: store.saved.clone(),
        };
        std::thread::Builder::new()
            .name("prefix-cache-writer".into())
            .spawn(move || writer.run(rx))
            .context("starting the prefix cache writer")?;
        Ok(store)
    }

    /// This model's files, newest first.
    fn own_files(&self) -> Vec<PathBuf> {
        let prefix = format!("{}-", self.key.model);
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut files: Vec<(SystemTime, PathBuf)> = dir
            .filter_map(|e| e.ok())
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.starts_with(&prefix) && name.ends_with(".bkv")
            })
            .filter_map(|e| {
                let t = e.metadata().ok()?.modified().ok()?;
                Some((t, e.path()))
            })
            .collect();
        files.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        files.into_iter().map(|(_, p)| p).collect()
    }

    /// Puts this model's files into the prefix cache of `sched` (idle, just warmed up),
    /// newest first, while the pool has free blocks for them (restored rows never evict
    /// each other).
    pub fn restore(&self, sched: &mut Scheduler) -> Restored {
        let mut done = Restored::default();
        let max = sched.max_seq_len();
        for path in self.own_files() {
            let snap = match read_snapshot(&path, &self.key, max) {
                Ok(s) => s,
                Err(e) => {
                    done.skipped.push(e.to_string());
                    continue;
                }
            };
            let engine = sched.engine();
            let need = snap.len().div_ceil(engine.kv().block_tokens());
            if need > engine.pool_stats().free {
                done.skipped.push(format!(
                    "{}: no free room left in the KV cache for its {} (raise -c)",
                    path.display(),
                    count(snap.len(), "token")
                ));
                continue;
            }
            match sched.import_cached(&snap) {
                Ok(n) => {
                    done.files += 1;
                    done.tokens += n;
                    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
                    let mut saved = self.saved.lock().expect("prefix store lock");
                    saved.push(Saved {
                        path,
                        tokens: snap.tokens().to_vec(),
                        bytes,
                    });
                }
                Err(e) => done.skipped.push(format!("{}: {e}", path.display())),
            }
        }
        done
    }

    /// After a request ended: has the engine copy the rows its cache holds of `tokens`
    /// (prompt and answer) for the writer, unless a file already holds them all or they
    /// are too few to be worth one.
    pub fn save_after(&self, engine: &Handle, tokens: Vec<u32>) {
        if tokens.len() < MIN_TOKENS || self.holds(&tokens) {
            return;
        }
        let tx = self.writer.lock().expect("prefix store lock").clone();
        let _ = engine.export_cached(tokens, move |rows| match rows {
            Ok(Some(snap)) if snap.len() >= MIN_TOKENS => {
                let _ = tx.send(snap);
            }
            Ok(_) => {}
            Err(e) => note!("warning: prefix cache: taking rows to save: {e}"),
        });
    }

    /// Whether a file holds every one of `tokens` (and maybe more).
    fn holds(&self, tokens: &[u32]) -> bool {
        let saved = self.saved.lock().expect("prefix store lock");
        saved.iter().any(|s| s.tokens.starts_with(tokens))
    }
}

/// The writer thread's side: files written, replaced and aged out.
struct Writer {
    dir: PathBuf,
    key: SnapshotKey,
    max_bytes: u64,
    saved: Arc<Mutex<Vec<Saved>>>,
}

impl Writer {
    fn run(self, rx: Receiver<KvSnapshot>) {
        for snap in rx {
            if let Err(e) = self.write(&snap) {
                note!("warning: prefix cache: {e:#}");
            }
        }
    }

    fn write(&self, snap: &KvSnapshot) -> Result<()> {
        if self
            .saved
            .lock()
            .expect("prefix store lock")
            .iter()
            .any(|s| s.tokens.starts_with(snap.tokens()))
        {
            return Ok(());
        }
        let mut h = DefaultHasher::new();
        snap.tokens().hash(&mut h);
        let path = self
            .dir
            .join(format!("{}-{:016x}.bkv", self.key.model, h.finish()));
        let bytes = write_snapshot(&path, &self.key, snap)?;
        let mut saved = self.saved.lock().expect("prefix store lock");
        // Files the new one extends hold nothing it does not.
        saved.retain(|s| {
            let covered = s.path != path && snap.tokens().starts_with(&s.tokens);
            if covered {
                let _ = std::fs::remove_file(&s.path);
            }
            !covered && s.path != path
        });
        saved.push(Saved {
            path,
            tokens: snap.tokens().to_vec(),
            bytes,
        });
        let mut total: u64 = saved.iter().map(|s| s.bytes).sum();
        while total > self.max_bytes && saved.len() > 1 {
            let old = saved.remove(0);
            let _ = std::fs::remove_file(&old.path);
            total -= old.bytes;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_files_are_found_by_the_models_digest() {
        let dir = std::env::temp_dir().join(format!("bitnet-prefix-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let key = SnapshotKey {
            model: "00ff".into(),
            kernels: "scalar".into(),
            config: "1".into(),
        };
        let store = PrefixStore::open(&dir, key, 1 << 20).unwrap();
        for name in ["00ff-1.bkv", "00ff-2.bkv", "abcd-1.bkv", "00ff-3.txt"] {
            std::fs::write(dir.join(name), b"x").unwrap();
        }
        let mut names: Vec<String> = store
            .own_files()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["00ff-1.bkv", "00ff-2.bkv"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
