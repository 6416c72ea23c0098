//! The KV rows a `/save FILE` writes beside the conversation (`FILE.kv`) and `/load FILE`
//! puts back, so a long conversation loaded later is not read again. The conversation file
//! stays plain JSON messages; the rows are a file of their own, refused on load (the
//! conversation is then read afresh) when they were saved for another model file, kernel
//! set or cache settings, or are damaged.

use std::path::{Path, PathBuf};

use anyhow::Result;
use bitnet_core::chat::ChatSession;
use bitnet_core::kv::KvSnapshot;
use bitnet_core::kv::snapshot_file::{SnapshotKey, read_snapshot, write_snapshot};

use crate::output::count;

/// Where the rows of the conversation saved at `path` go.
pub fn rows_file(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".kv");
    PathBuf::from(p)
}

/// Saves and loads rows for the chat's model file.
#[derive(Debug)]
pub struct SavedKv {
    model: PathBuf,
    key: Option<SnapshotKey>,
}

impl SavedKv {
    pub fn new(model: &Path) -> SavedKv {
        SavedKv {
            model: model.to_owned(),
            key: None,
        }
    }

    /// Read once, at the first save or load (the model file's digest reads a few MiB).
    fn key(&mut self, chat: &ChatSession) -> Result<&SnapshotKey> {
        if self.key.is_none() {
            self.key = Some(SnapshotKey::new(&self.model, chat.model())?);
        }
        Ok(self.key.as_ref().expect("set above"))
    }

    /// After the conversation was written to `path`: writes its rows beside it (or, with
    /// `with_kv` false or nothing read yet, removes rows an earlier save left there, which
    /// no longer match). Returns what to tell the user.
    pub fn save(&mut self, chat: &ChatSession, path: &Path, with_kv: bool) -> Result<String> {
        let rows = rows_file(path);
        let snap = if with_kv { chat.export_kv() } else { Ok(None) };
        let snap = match snap {
            Ok(Some(s)) => s,
            Ok(None) => {
                remove_stale(&rows)?;
                return Ok(String::new());
            }
            Err(e) => {
                remove_stale(&rows)?;
                return Ok(format!("; KV not saved: {e}"));
            }
        };
        let key = self.key(chat)?.clone();
        let bytes = write_snapshot(&rows, &key, &snap)?;
        Ok(format!(
            "; KV of {} in {} ({:.1} MiB)",
            count(snap.len(), "token"),
            rows.display(),
            bytes as f64 / (1 << 20) as f64
        ))
    }

    /// The rows saved beside the conversation at `path`, if there are usable ones; else
    /// why not (`Err` with the text to show; nothing when there is no rows file).
    pub fn load(&mut self, chat: &ChatSession, path: &Path) -> Result<Option<KvSnapshot>, String> {
        let rows = rows_file(path);
        if !rows.exists() {
            return Ok(None);
        }
        let key = self.key(chat).map_err(|e| format!("{e:#}"))?.clone();
        read_snapshot(&rows, &key, chat.context_size())
            .map(Some)
            .map_err(|e| e.to_string())
    }
}

fn remove_stale(rows: &Path) -> Result<()> {
    match std::fs::remove_file(rows) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(anyhow::Error::new(e).context(format!("removing {}", rows.display())))
        }
        _ => Ok(()),
    }
}
