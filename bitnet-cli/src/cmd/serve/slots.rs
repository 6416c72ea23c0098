//! llama-server's slots, as far as a client sees them: `GET /slots` lists them and, with
//! `--slot-save-path DIR`, `POST /slots/{id}?action=save|restore|erase` (body
//! `{"filename": "NAME"}` for the first two) writes a slot's KV to `DIR/NAME`, puts it back
//! into the prefix cache, or forgets it. Our scheduler has no fixed slots (requests share
//! one paged cache), so a slot here is a record: each generation request is given one
//! (its `id_slot`, else the idle slot whose last tokens share the longest start with its
//! prompt, else the least recently used), and when it ends the slot holds its prompt and
//! answer. Saving writes the rows the prefix cache holds of those tokens; restoring puts a
//! file's rows in the cache and its tokens in the slot, so the next request that starts
//! with them reads only what follows. Files are refused by the checks of
//! `bitnet_core::kv::snapshot_file` (another model, kernel set or settings; damage).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bitnet_core::kv::snapshot_file::{SnapshotKey, read_snapshot, write_snapshot};
use bitnet_core::runtime::Handle;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::error::{ApiError, ApiResult};

/// The slots of one model; see the module docs.
#[derive(Debug)]
pub struct Slots {
    table: Mutex<Vec<Slot>>,
    clock: AtomicU64,
    /// `--slot-save-path`; `None`: save and restore are refused.
    dir: Option<PathBuf>,
    /// Set once the model is loaded (the key needs it).
    key: std::sync::OnceLock<SnapshotKey>,
}

#[derive(Debug, Default, Clone)]
struct Slot {
    /// The last request's prompt and answer (or a restored file's tokens).
    tokens: Vec<u32>,
    /// Requests on this slot now.
    processing: usize,
    last_used: u64,
}

/// A request's hold on a slot: the slot records its tokens when it ends, and is idle again
/// when this drops.
#[derive(Debug)]
pub struct SlotUse {
    slots: Arc<Slots>,
    pub id: usize,
}

impl SlotUse {
    /// The request ended with these tokens (prompt and answer).
    pub fn record(&self, tokens: Vec<u32>) {
        let mut t = self.slots.table.lock().expect("slots lock");
        t[self.id].tokens = tokens;
    }
}

impl Drop for SlotUse {
    fn drop(&mut self) {
        let mut t = self.slots.table.lock().expect("slots lock");
        t[self.id].processing -= 1;
    }
}

impl Slots {
    /// `n` slots (`--parallel`), files in `dir` when given.
    pub fn new(n: usize, dir: Option<PathBuf>) -> Arc<Slots> {
        Arc::new(Slots {
            table: Mutex::new(vec![Slot::default(); n.max(1)]),
            clock: AtomicU64::new(0),
            dir,
            key: std::sync::OnceLock::new(),
        })
    }

    /// The key of the model's rows (set when it has loaded).
    pub fn set_key(&self, key: SnapshotKey) {
        let _ = self.key.set(key);
    }

    fn len(&self) -> usize {
        self.table.lock().expect("slots lock").len()
    }

    /// A slot for a request with `prompt`: `id_slot` if given (400 past the last), else
    /// the idle slot sharing the longest start with the prompt, else the least recently
    /// used idle one, else the least recently used.
    pub fn take(self: &Arc<Self>, id_slot: Option<i64>, prompt: &[u32]) -> ApiResult<SlotUse> {
        let mut t = self.table.lock().expect("slots lock");
        let id = match id_slot {
            // llama-server's -1: any slot.
            Some(id) if id >= 0 => {
                let id = usize::try_from(id).unwrap_or(usize::MAX);
                if id >= t.len() {
                    return Err(slot_out_of_range(id, t.len(), "id_slot"));
                }
                id
            }
            _ => {
                let shared = |s: &Slot| {
                    s.tokens
                        .iter()
                        .zip(prompt)
                        .take_while(|(a, b)| a == b)
                        .count()
                };
                let idle = (0..t.len()).filter(|&i| t[i].processing == 0);
                match idle
                    .clone()
                    .max_by_key(|&i| (shared(&t[i]), std::cmp::Reverse(i)))
                {
                    Some(i) if shared(&t[i]) > 0 => i,
                    _ => idle.min_by_key(|&i| t[i].last_used).unwrap_or_else(|| {
                        (0..t.len()).min_by_key(|&i| t[i].last_used).unwrap_or(0)
                    }),
                }
            }
        };
        t[id].processing += 1;
        t[id].last_used = self.clock.fetch_add(1, Relaxed) + 1;
        Ok(SlotUse {
            slots: self.clone(),
            id,
        })
    }

    /// `GET /slots`: each slot's id, context, whether a request runs on it, and how many
    /// tokens it holds.
    pub fn list(&self, n_ctx: usize) -> Value {
        let t = self.table.lock().expect("slots lock");
        Value::Array(
            t.iter()
                .enumerate()
                .map(|(id, s)| {
                    json!({
                        "id": id,
                        "n_ctx": n_ctx,
                        "is_processing": s.processing > 0,
                        "n_tokens": s.tokens.len(),
                    })
                })
                .collect(),
        )
    }

    /// `POST /slots/{id}?action=...` with its body.
    pub async fn act(
        &self,
        engine: &Handle,
        id: &str,
        action: &str,
        body: &Value,
    ) -> ApiResult<Value> {
        let n = self.len();
        let id: usize = id.parse().map_err(|_| {
            ApiError::invalid(format!("slot id {id:?} is not a number"), Some("id_slot"))
        })?;
        if id >= n {
            return Err(slot_out_of_range(id, n, "id_slot"));
        }
        match action {
            "save" => self.save(engine, id, body).await,
            "restore" => self.restore(engine, id, body).await,
            "erase" => {
                let mut t = self.table.lock().expect("slots lock");
                let n_erased = std::mem::take(&mut t[id].tokens).len();
                Ok(json!({"id_slot": id, "n_erased": n_erased}))
            }
            other => Err(ApiError::invalid(
                format!("unknown slot action {other:?}: say save, restore or erase"),
                Some("action"),
            )),
        }
    }

    /// The file `body.filename` names in the save folder.
    fn file(&self, body: &Value) -> ApiResult<(PathBuf, String, SnapshotKey)> {
        let Some(dir) = &self.dir else {
            return Err(ApiError::not_supported(
                "slot save and restore need --slot-save-path DIR",
            ));
        };
        let name = body
            .get("filename")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::bad_field("filename", "a file name"))?;
        if !valid_file_name(name) {
            return Err(ApiError::invalid(
                format!("{name:?} is not a plain file name (no folders, no leading dot)"),
                Some("filename"),
            ));
        }
        let key = self
            .key
            .get()
            .cloned()
            .ok_or_else(|| ApiError::unavailable("Loading model", Some(1)))?;
        Ok((dir.join(name), name.to_owned(), key))
    }

    async fn save(&self, engine: &Handle, id: usize, body: &Value) -> ApiResult<Value> {
        let (path, name, key) = self.file(body)?;
        let tokens = self.table.lock().expect("slots lock")[id].tokens.clone();
        let t0 = Instant::now();
        let (tx, rx) = oneshot::channel();
        engine
            .export_cached(tokens, move |r| {
                let _ = tx.send(r);
            })
            .map_err(|_| ApiError::unavailable("the engine has stopped", None))?;
        let snap = rx
            .await
            .map_err(|_| ApiError::unavailable("the engine has stopped", None))?
            .map_err(|e| ApiError::internal(format!("taking the slot's rows: {e}")))?;
        let Some(snap) = snap else {
            return Err(ApiError::invalid(
                format!("slot {id} holds nothing the cache still has"),
                Some("id_slot"),
            ));
        };
        let n_saved = snap.len();
        let n_written = tokio::task::spawn_blocking(move || write_snapshot(&path, &key, &snap))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(|e| ApiError::internal(e.to_string()))?;
        Ok(json!({
            "id_slot": id,
            "filename": name,
            "n_saved": n_saved,
            "n_written": n_written,
            "timings": {"save_ms": t0.elapsed().as_secs_f64() * 1e3},
        }))
    }

    async fn restore(&self, engine: &Handle, id: usize, body: &Value) -> ApiResult<Value> {
        let (path, name, key) = self.file(body)?;
        let t0 = Instant::now();
        let n_read = std::fs::metadata(&path)
            .map(|m| m.len())
            .map_err(|e| ApiError::invalid(format!("{name}: {e}"), Some("filename")))?;
        let snap = tokio::task::spawn_blocking(move || read_snapshot(&path, &key, usize::MAX))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(|e| ApiError::invalid(e.to_string(), Some("filename")))?;
        let tokens = snap.tokens().to_vec();
        let (tx, rx) = oneshot::channel();
        engine
            .import_cached(snap, move |r| {
                let _ = tx.send(r);
            })
            .map_err(|_| ApiError::unavailable("the engine has stopped", None))?;
        let n_restored = rx
            .await
            .map_err(|_| ApiError::unavailable("the engine has stopped", None))?
            .map_err(|e| ApiError::invalid(format!("{name}: {e}"), Some("filename")))?;
        self.table.lock().expect("slots lock")[id].tokens = tokens;
        Ok(json!({
            "id_slot": id,
            "filename": name,
            "n_restored": n_restored,
            "n_read": n_read,
            "timings": {"restore_ms": t0.elapsed().as_secs_f64() * 1e3},
        }))
    }
}

fn slot_out_of_range(id: usize, n: usize, param: &str) -> ApiError {
    ApiError::invalid(
        format!("slot {id} does not exist: the server has {n} (--parallel)"),
        Some(param),
    )
}

/// A name that stays inside the save folder: no separators, no `..`, no leading dot, no
/// control characters, not too long.
fn valid_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && !name
            .chars()
            .any(|c| matches!(c, '/' | '\\' | ':') || c.is_control())
        && Path::new(name).file_name().is_some_and(|f| f == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_stay_in_the_folder() {
        for good in ["a.bin", "slot 1.kv", "x..y"] {
            assert!(valid_file_name(good), "{good}");
        }
        for bad in ["", "..", ".hidden", "../x", "a/b", "a\\b", "c:x", "a\nb"] {
            assert!(!valid_file_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn requests_take_the_slot_holding_their_start_else_the_least_recently_used() {
        let slots = Slots::new(3, None);
        let a = slots.take(None, &[1, 2, 3]).unwrap();
        assert_eq!(a.id, 0);
        a.record(vec![1, 2, 3, 4]);
        let b = slots.take(None, &[9]).unwrap();
        assert_eq!(b.id, 1, "slot 0 is busy");
        drop(a);
        drop(b);
        assert_eq!(slots.take(None, &[1, 2, 7]).unwrap().id, 0, "shares [1, 2]");
        assert_eq!(slots.take(None, &[5]).unwrap().id, 2, "never used");
        assert_eq!(slots.take(Some(1), &[5]).unwrap().id, 1);
        assert!(slots.take(Some(3), &[5]).is_err());
    }
}
