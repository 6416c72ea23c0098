//! A [`KvSnapshot`] on disk: a server's persistent prefix cache and slot files, a chat
//! saved with its KV. A file is refused unless it was made for the same model file, the
//! same kernel set and model settings (which decide the rows' values) and holds intact
//! bytes; a refusal names what differs, and nothing of a refused file reaches a cache.
//!
//! Layout (little-endian): `BITNETKV`, version (u32), header length (u32), the header as
//! JSON (the [`SnapshotKey`], the [`KvLayout`], the token count), the tokens (u32 each),
//! the K rows then the V rows (`[layer][head][position]`, as the cache stores them), and a
//! 64-bit checksum of every byte before it. Files are written to a temporary name and
//! renamed, so a reader never sees half a file.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::format::KvType;
use super::snapshot::{KvLayout, KvSnapshot};
use crate::model::Model;

const MAGIC: &[u8; 8] = b"BITNETKV";
const VERSION: u32 = 1;
/// A header is a few hundred bytes; anything near this is not one of ours.
const MAX_HEADER: u32 = 64 << 10;

/// What rows were computed by: a file's rows are only valid for an equal key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotKey {
    /// [`model_file_digest`] of the model file.
    pub model: String,
    /// The kernel set (`avx512`, `scalar`, ...): sets may round differently.
    pub kernels: String,
    /// A digest of the model's settings as loaded (shape, rope, norms: overrides
    /// included).
    pub config: String,
}

impl SnapshotKey {
    /// The key of rows computed for `model`, loaded from `model_path`.
    pub fn new(model_path: &Path, model: &Model) -> std::io::Result<SnapshotKey> {
        let mut h = Checksum::new();
        h.update(format!("{:?}", model.config()).as_bytes());
        Ok(SnapshotKey {
            model: model_file_digest(model_path)?,
            kernels: model.isa().name().to_owned(),
            config: format!("{:016x}", h.finish()),
        })
    }
}

/// Why a snapshot file was not read or written.
#[derive(Debug, Error)]
pub enum SnapshotError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a saved KV file")]
    NotSnapshot { path: PathBuf },
    #[error("{path}: saved KV format version {found}; this build reads version {VERSION}")]
    Version { path: PathBuf, found: u32 },
    #[error("{path}: corrupt saved KV file ({why}); it was not loaded")]
    Corrupt { path: PathBuf, why: String },
    #[error("{path}: saved for another model file, not this one")]
    OtherModel { path: PathBuf },
    #[error("{path}: saved with the {file} kernels; this run uses {ours} (rows differ)")]
    OtherKernels {
        path: PathBuf,
        file: String,
        ours: String,
    },
    #[error("{path}: saved with other model settings (rope, norms or shape overrides)")]
    OtherSettings { path: PathBuf },
    #[error("{path}: the saved KV holds {n} positions, more than a sequence may hold ({max})")]
    TooLong { path: PathBuf, n: usize, max: usize },
}

impl SnapshotError {
    /// Whether the file was sound but made for something else (not damaged).
    pub fn is_mismatch(&self) -> bool {
        matches!(
            self,
            SnapshotError::OtherModel { .. }
                | SnapshotError::OtherKernels { .. }
                | SnapshotError::OtherSettings { .. }
                | SnapshotError::Version { .. }
        )
    }
}

#[derive(Serialize, Deserialize)]
struct Header {
    #[serde(flatten)]
    key: SnapshotKey,
    k_type: String,
    v_type: String,
    k_rotated: bool,
    v_rotated: bool,
    n_layer: usize,
    n_kv_heads: usize,
    head_dim: usize,
    n_tokens: usize,
}

/// Writes `snap` to `path` (through a temporary file in the same folder, then renamed);
/// returns the bytes written.
pub fn write_snapshot(
    path: &Path,
    key: &SnapshotKey,
    snap: &KvSnapshot,
) -> Result<u64, SnapshotError> {
    let io = |source| SnapshotError::Io {
        path: path.to_owned(),
        source,
    };
    let l = snap.layout();
    let header = serde_json::to_vec(&Header {
        key: key.clone(),
        k_type: l.k_type.name().to_owned(),
        v_type: l.v_type.name().to_owned(),
        k_rotated: l.k_rotated,
        v_rotated: l.v_rotated,
        n_layer: l.n_layer,
        n_kv_heads: l.n_kv_heads,
        head_dim: l.head_dim,
        n_tokens: snap.len(),
    })
    .expect("a header serializes");
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp_name);
    let written = (|| -> std::io::Result<u64> {
        let mut out = HashingWriter {
            inner: BufWriter::new(File::create(&tmp)?),
            sum: Checksum::new(),
            n: 0,
        };
        out.write_all(MAGIC)?;
        out.write_all(&VERSION.to_le_bytes())?;
        out.write_all(&(header.len() as u32).to_le_bytes())?;
        out.write_all(&header)?;
        for t in snap.tokens() {
            out.write_all(&t.to_le_bytes())?;
        }
        out.write_all(snap.side(true).0)?;
        out.write_all(snap.side(false).0)?;
        let sum = out.sum.finish();
        let n = out.n + 8;
        let mut inner = out.inner;
        inner.write_all(&sum.to_le_bytes())?;
        inner.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)?;
        Ok(n)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(io)
}

/// Reads the snapshot at `path`, refusing one made for another `key`, longer than
/// `max_tokens`, or damaged (every byte is checked before any is used).
pub fn read_snapshot(
    path: &Path,
    key: &SnapshotKey,
    max_tokens: usize,
) -> Result<KvSnapshot, SnapshotError> {
    let p = || path.to_owned();
    let corrupt = |why: &str| SnapshotError::Corrupt {
        path: p(),
        why: why.to_owned(),
    };
    let io = |source| SnapshotError::Io { path: p(), source };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(SnapshotError::NotSnapshot { path: p() });
    }
    let mut f = File::open(path).map_err(io)?;
    let mut fixed = [0u8; 16];
    if f.read_exact(&mut fixed).is_err() || &fixed[..8] != MAGIC {
        return Err(SnapshotError::NotSnapshot { path: p() });
    }
    let version = u32::from_le_bytes(fixed[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(SnapshotError::Version {
            path: p(),
            found: version,
        });
    }
    let header_len = u32::from_le_bytes(fixed[12..16].try_into().expect("4 bytes"));
    if header_len > MAX_HEADER || 16 + header_len as u64 > meta.len() {
        return Err(corrupt("header length"));
    }
    let mut header = vec![0u8; header_len as usize];
    f.read_exact(&mut header).map_err(io)?;
    let h: Header =
        serde_json::from_slice(&header).map_err(|e| corrupt(&format!("header: {e}")))?;
    if h.key.model != key.model {
        return Err(SnapshotError::OtherModel { path: p() });
    }
    if h.key.kernels != key.kernels {
        return Err(SnapshotError::OtherKernels {
            path: p(),
            file: h.key.kernels,
            ours: key.kernels.clone(),
        });
    }
    if h.key.config != key.config {
        return Err(SnapshotError::OtherSettings { path: p() });
    }
    let kv_type = |name: &str| KvType::parse(name).ok_or_else(|| corrupt("KV type"));
    let layout = KvLayout {
        k_type: kv_type(&h.k_type)?,
        v_type: kv_type(&h.v_type)?,
        k_rotated: h.k_rotated,
        v_rotated: h.v_rotated,
        n_layer: h.n_layer,
        n_kv_heads: h.n_kv_heads,
        head_dim: h.head_dim,
    };
    if h.n_tokens > max_tokens {
        return Err(SnapshotError::TooLong {
            path: p(),
            n: h.n_tokens,
            max: max_tokens,
        });
    }
    // The size the header promises, checked against the file before anything is read.
    let (kb, vb) = layout
        .side_bytes(h.n_tokens)
        .ok_or_else(|| corrupt("sizes"))?;
    let want = (16 + header_len as u64)
        .checked_add(h.n_tokens as u64 * 4)
        .and_then(|n| n.checked_add(kb as u64))
        .and_then(|n| n.checked_add(vb as u64))
        .and_then(|n| n.checked_add(8))
        .ok_or_else(|| corrupt("sizes"))?;
    if want != meta.len() {
        return Err(corrupt(&format!(
            "{} bytes where its header promises {want}",
            meta.len()
        )));
    }
    let mut sum = Checksum::new();
    sum.update(&fixed);
    sum.update(&header);
    let mut read = |n: usize| -> Result<Vec<u8>, SnapshotError> {
        let mut buf = vec![0u8; n];
        f.read_exact(&mut buf).map_err(io)?;
        sum.update(&buf);
        Ok(buf)
    };
    let token_bytes = read(h.n_tokens * 4)?;
    let k = read(kb)?;
    let v = read(vb)?;
    let mut stored = [0u8; 8];
    f.read_exact(&mut stored).map_err(io)?;
    if u64::from_le_bytes(stored) != sum.finish() {
        return Err(corrupt("checksum mismatch"));
    }
    let tokens = token_bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    KvSnapshot::from_parts(layout, tokens, k, v).ok_or_else(|| corrupt("sizes"))
}

/// A digest of a model file that tells files apart without reading all of it: its size,
/// its first MiB (header, metadata, tensor table), 64 spread samples of 4 KiB and its last
/// 64 KiB. Two different checkpoints or quantizations differ in the samples; the same
/// file copied elsewhere keeps its digest.
pub fn model_file_digest(path: &Path) -> std::io::Result<String> {
    let mut f = File::open(path)?;
    let size = f.metadata()?.len();
    let mut h = Checksum::new();
    h.update(&size.to_le_bytes());
    let mut take = |at: u64, n: u64, h: &mut Checksum| -> std::io::Result<()> {
        let n = n.min(size.saturating_sub(at));
        let mut buf = vec![0u8; n as usize];
        f.seek(SeekFrom::Start(at))?;
        f.read_exact(&mut buf)?;
        h.update(&buf);
        Ok(())
    };
    take(0, 1 << 20, &mut h)?;
    for i in 0..64u64 {
        take(size / 64 * i, 4096, &mut h)?;
    }
    take(size.saturating_sub(64 << 10), 64 << 10, &mut h)?;
    Ok(format!("{:016x}", h.finish()))
}

/// A writer that counts and checksums what passes through it.
struct HashingWriter<W: Write> {
    inner: W,
    sum: Checksum,
    n: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sum.update(&buf[..n]);
        self.n += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A fast 64-bit checksum (four multiply-rotate lanes over 8-byte words): it catches
/// damaged and truncated files, not a forger (a forged file still passes every size and
/// layout check, so it can give wrong rows but never unsafe reads).
struct Checksum {
    lanes: [u64; 4],
    /// Bytes not yet making a whole 32-byte stripe.
    tail: Vec<u8>,
    len: u64,
}

const PRIME1: u64 = 0x9E37_79B1_85EB_CA87;
const PRIME2: u64 = 0xC2B2_AE3D_27D4_EB4F;

impl Checksum {
    fn new() -> Checksum {
        Checksum {
            lanes: [PRIME1, PRIME2, !PRIME1, !PRIME2],
            tail: Vec::with_capacity(32),
            len: 0,
        }
    }

    fn stripe(lanes: &mut [u64; 4], s: &[u8]) {
        for (lane, w) in lanes.iter_mut().zip(s.chunks_exact(8)) {
            let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            *lane = (*lane ^ w.wrapping_mul(PRIME2))
                .rotate_left(31)
                .wrapping_mul(PRIME1);
        }
    }

    fn update(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if !self.tail.is_empty() {
            let need = (32 - self.tail.len()).min(data.len());
            self.tail.extend_from_slice(&data[..need]);
            data = &data[need..];
            if self.tail.len() < 32 {
                return;
            }
            let t = std::mem::take(&mut self.tail);
            Self::stripe(&mut self.lanes, &t);
            self.tail = t;
            self.tail.clear();
        }
        let mut stripes = data.chunks_exact(32);
        for s in &mut stripes {
            Self::stripe(&mut self.lanes, s);
        }
        self.tail.extend_from_slice(stripes.remainder());
    }

    fn finish(&self) -> u64 {
        let mut last = [0u8; 32];
        last[..self.tail.len()].copy_from_slice(&self.tail);
        let mut lanes = self.lanes;
        Self::stripe(&mut lanes, &last);
        let mut h = self.len.wrapping_mul(PRIME1);
        for (i, l) in lanes.iter().enumerate() {
            h = (h ^ l.rotate_left(7 * i as u32 + 1)).wrapping_mul(PRIME2);
            h ^= h >> 29;
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use bitnet_kernels::Isa;

    use super::*;
    use crate::kv::{KvManager, KvType};

    fn key() -> SnapshotKey {
        SnapshotKey {
            model: "0123456789abcdef".into(),
            kernels: "scalar".into(),
            config: "feedface00000000".into(),
        }
    }

    fn snapshot(n: u32) -> KvSnapshot {
        let mut kv =
            KvManager::new(2, 1, 32, (KvType::Q8_0, KvType::F16), 64, 8, Isa::Scalar).unwrap();
        let id = kv.new_sequence();
        kv.reserve(id, n as usize).unwrap();
        let bt = kv.block_tokens();
        for p in 0..n as usize {
            let b = kv.sequence(id).unwrap().blocks()[p / bt];
            for layer in 0..2 {
                let row: Vec<f32> = (0..32).map(|j| (p + j + layer) as f32 * 0.1).collect();
                kv.storage_mut().write_rows(layer, b, p % bt, &row, &row);
            }
        }
        let tokens: Vec<u32> = (0..n).collect();
        kv.commit(id, &tokens, |_| {}).unwrap();
        kv.export(id, usize::MAX).unwrap()
    }

    #[test]
    fn a_written_snapshot_reads_back_equal() {
        let dir = tempdir();
        let path = dir.join("a.bkv");
        let snap = snapshot(21);
        let n = write_snapshot(&path, &key(), &snap).unwrap();
        assert_eq!(n, std::fs::metadata(&path).unwrap().len());
        assert_eq!(read_snapshot(&path, &key(), 64).unwrap(), snap);
        // No temporary file left beside it.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let err = read_snapshot(&path, &key(), 20).unwrap_err();
        assert!(matches!(err, SnapshotError::TooLong { n: 21, .. }), "{err}");
    }

    #[test]
    fn every_damaged_byte_and_every_cut_is_refused() {
        let dir = tempdir();
        let path = dir.join("a.bkv");
        write_snapshot(&path, &key(), &snapshot(9)).unwrap();
        let good = std::fs::read(&path).unwrap();
        let bad = dir.join("bad.bkv");
        // Every byte flipped in turn: refused each time (never a panic, never rows).
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0x20;
            std::fs::write(&bad, &b).unwrap();
            assert!(read_snapshot(&bad, &key(), 64).is_err(), "byte {i} flipped");
        }
        for cut in [0, 5, 16, 40, good.len() / 2, good.len() - 1] {
            std::fs::write(&bad, &good[..cut]).unwrap();
            assert!(read_snapshot(&bad, &key(), 64).is_err(), "cut at {cut}");
        }
        let mut longer = good.clone();
        longer.push(0);
        std::fs::write(&bad, &longer).unwrap();
        let err = read_snapshot(&bad, &key(), 64).unwrap_err();
        assert!(matches!(err, SnapshotError::Corrupt { .. }), "{err}");
    }

    #[test]
    fn a_file_of_another_model_kernel_set_or_settings_is_refused_by_name() {
        let dir = tempdir();
        let path = dir.join("a.bkv");
        write_snapshot(&path, &key(), &snapshot(3)).unwrap();
        let mut k = key();
        k.model = "1111111111111111".into();
        let e = read_snapshot(&path, &k, 64).unwrap_err();
        assert!(matches!(e, SnapshotError::OtherModel { .. }) && e.is_mismatch());
        let mut k = key();
        k.kernels = "avx2".into();
        let e = read_snapshot(&path, &k, 64).unwrap_err();
        assert!(
            e.to_string().contains("scalar kernels; this run uses avx2"),
            "{e}"
        );
        let mut k = key();
        k.config = "0".into();
        assert!(matches!(
            read_snapshot(&path, &k, 64),
            Err(SnapshotError::OtherSettings { .. })
        ));
    }

    #[test]
    fn the_model_digest_tells_files_apart_and_ignores_where_they_are() {
        let dir = tempdir();
        let a = dir.join("a.gguf");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&a, &data).unwrap();
        let copy = dir.join("copy.gguf");
        std::fs::write(&copy, &data).unwrap();
        assert_eq!(
            model_file_digest(&a).unwrap(),
            model_file_digest(&copy).unwrap()
        );
        // One byte in the middle of the data (in a sample) changed.
        let mut other = data.clone();
        other[data.len() / 64 * 20 + 10] ^= 1;
        std::fs::write(&copy, &other).unwrap();
        assert_ne!(
            model_file_digest(&a).unwrap(),
            model_file_digest(&copy).unwrap()
        );
        // The checksum gives the same answer however the bytes arrive.
        let mut whole = Checksum::new();
        whole.update(&data[..1000]);
        let mut parts = Checksum::new();
        for c in data[..1000].chunks(7) {
            parts.update(c);
        }
        assert_eq!(whole.finish(), parts.finish());
    }

    fn tempdir() -> PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "bitnet-snapshot-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
