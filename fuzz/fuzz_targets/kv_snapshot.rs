//! Fuzz target: saved KV files (a server's `--prefix-cache-dir` and slot files, a chat's
//! `FILE.kv`), read back. Any bytes must give a snapshot or a typed error (damaged, another
//! model, sizes that do not add up), never a panic or an allocation the file does not
//! justify; a snapshot read must hold what its header promises.
#![no_main]

use std::sync::OnceLock;

use bitnet_core::kv::snapshot_file::{SnapshotKey, read_snapshot};
use libfuzzer_sys::fuzz_target;

mod shipped;

/// The shipped model's key, so that seeds saved by `bitnet chat` (`/save F` writes `F.kv`)
/// get past the key check into the sizes and rows.
fn key() -> &'static SnapshotKey {
    static KEY: OnceLock<SnapshotKey> = OnceLock::new();
    KEY.get_or_init(|| {
        SnapshotKey::new(shipped::PATH.as_ref(), shipped::model()).expect("its digest")
    })
}

fuzz_target!(|data: &[u8]| {
    let key = key();
    let path = std::env::temp_dir().join(format!("bitnet-fuzz-kv-{}.bkv", std::process::id()));
    std::fs::write(&path, data).expect("a scratch file");
    if let Ok(snap) = read_snapshot(&path, key, 1 << 16) {
        let (k, v) = snap
            .layout()
            .side_bytes(snap.len())
            .expect("sizes the reader checked");
        assert_eq!(k + v, snap.row_bytes());
    }
});
