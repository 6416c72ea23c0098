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
//!
//! A cache with one K and one V format for every layer writes version 1, the formats in
//! the header's `k_type`, `v_type`, `k_rotated` and `v_rotated`. One whose layers differ
//! writes version 2 with a `layers` array of those four fields per layer: a build that
//! reads only version 1 refuses the file as made for another version instead of reading
//! rows in the wrong format (q8_0 and fp8 rows have the same size).

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::format::KvType;
use super::snapshot::{KvLayerLayout, KvLayout, KvSnapshot};
use crate::model::Model;

const MAGIC: &[u8; 8] = b"BITNETKV";
/// The version of a file whose layers share their formats.
const VERSION_UNIFORM: u32 = 1;
/// The version of a file with formats per layer (its header has `layers`).
const VERSION_PER_LAYER: u32 = 2;
/// A header is a few hundred bytes (a few KiB with formats per layer); anything near this
/// is not one of ours.
const MAX_HEADER: u32 = 64 << 10;
/// Far more layers than any model has: a header claiming more is not one of ours (its
/// layout would be a list that long before the file's size is checked).
const MAX_LAYERS: usize = 1 << 16;

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
    #[error(
        "{path}: saved KV format version {found}; this build reads versions \
         {VERSION_UNIFORM} to {VERSION_PER_LAYER}"
    )]
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
    /// Each layer's formats, when the layers differ (the four fields above then hold
    /// layer 0's); absent when every layer stores what the fields above say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    layers: Vec<LayerHeader>,
}

/// One layer's formats in a [`Header`].
#[derive(Serialize, Deserialize)]
struct LayerHeader {
    k_type: String,
    v_type: String,
    k_rotated: bool,
    v_rotated: bool,
}

impl LayerHeader {
    fn of(l: &KvLayerLayout) -> LayerHeader {
        LayerHeader {
            k_type: l.k_type.name().to_owned(),
            v_type: l.v_type.name().to_owned(),
            k_rotated: l.k_rotated,
            v_rotated: l.v_rotated,
        }
    }

    /// The layout it names (`None`: a type this build does not know).
    fn layout(&self) -> Option<KvLayerLayout> {
        Some(KvLayerLayout {
            k_type: KvType::parse(&self.k_type)?,
            v_type: KvType::parse(&self.v_type)?,
            k_rotated: self.k_rotated,
            v_rotated: self.v_rotated,
        })
    }
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
    // A uniform cache writes the header it always did (old readers, old seeds).
    let (version, layers) = match l.uniform() {
        Some(_) => (VERSION_UNIFORM, Vec::new()),
        None => (
            VERSION_PER_LAYER,
            l.layers.iter().map(LayerHeader::of).collect(),
        ),
    };
    // Every cache has a layer, and so has every file read (`header_layout`).
    let first = LayerHeader::of(&l.layers[0]);
    let header = serde_json::to_vec(&Header {
        key: key.clone(),
        k_type: first.k_type,
        v_type: first.v_type,
        k_rotated: first.k_rotated,
        v_rotated: first.v_rotated,
        n_layer: l.n_layer(),
        n_kv_heads: l.n_kv_heads,
        head_dim: l.head_dim,
        n_tokens: snap.len(),
        layers,
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
        out.write_all(&version.to_le_bytes())?;
        out.write_all(&(header.len() as u32).to_le_bytes())?;
        out.write_all(&header)?;
        for t in snap.tokens() {
            out.write_all(&t.to_le_bytes())?;
        }
        out.write_all(snap.side(true))?;
        out.write_all(snap.side(false))?;
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
    if !(VERSION_UNIFORM..=VERSION_PER_LAYER).contains(&version) {
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
    let layout = header_layout(&h, version).map_err(corrupt)?;
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

/// The layout a header names, checked against its version: a version 1 header has no
/// `layers` and its formats hold for all `n_layer` layers; a version 2 header has exactly
/// `n_layer` of them. `Err` says what is wrong.
fn header_layout(h: &Header, version: u32) -> Result<KvLayout, &'static str> {
    let uniform = LayerHeader {
        k_type: h.k_type.clone(),
        v_type: h.v_type.clone(),
        k_rotated: h.k_rotated,
        v_rotated: h.v_rotated,
    }
    .layout()
    .ok_or("KV type")?;
    let layers = match version {
        VERSION_UNIFORM if h.layers.is_empty() => {
            // Layers are counted before a list of them is made for the count (a cache has
            // at least one).
            if h.n_layer == 0 || h.n_layer > MAX_LAYERS {
                return Err("layer count");
            }
            vec![uniform; h.n_layer]
        }
        VERSION_PER_LAYER if h.layers.len() == h.n_layer => h
            .layers
            .iter()
            .map(LayerHeader::layout)
            .collect::<Option<Vec<_>>>()
            .ok_or("KV type")?,
        _ => return Err("per-layer formats"),
    };
    Ok(KvLayout {
        layers,
        n_kv_heads: h.n_kv_heads,
        head_dim: h.head_dim,
    })
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
        snapshot_of(n, &[(KvType::Q8_0, KvType::F16); 2])
    }

    /// A snapshot of `n` positions of a cache of one KV head of 32 whose layers store
    /// `layers`.
    fn snapshot_of(n: u32, layers: &[(KvType, KvType)]) -> KvSnapshot {
        let mut kv = KvManager::with_layers(1, 32, layers, 64, 8, Isa::Scalar).unwrap();
        let id = kv.new_sequence();
        kv.reserve(id, n as usize).unwrap();
        let bt = kv.block_tokens();
        for p in 0..n as usize {
            let b = kv.sequence(id).unwrap().blocks()[p / bt];
            for layer in 0..layers.len() {
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

    /// The header of the file at `path` as JSON, and its version.
    fn header_of(path: &Path) -> (u32, serde_json::Value) {
        let b = std::fs::read(path).unwrap();
        let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
        let len = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
        (version, serde_json::from_slice(&b[16..16 + len]).unwrap())
    }

    /// The file at `path` with its version and header replaced (checksum made again).
    fn rewritten(path: &Path, version: u32, header: &serde_json::Value) -> Vec<u8> {
        let b = std::fs::read(path).unwrap();
        let len = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
        let header = serde_json::to_vec(header).unwrap();
        let mut out = MAGIC.to_vec();
        out.extend(version.to_le_bytes());
        out.extend((header.len() as u32).to_le_bytes());
        out.extend(&header);
        out.extend(&b[16 + len..b.len() - 8]);
        let mut sum = Checksum::new();
        sum.update(&out);
        out.extend(sum.finish().to_le_bytes());
        out
    }

    #[test]
    fn a_cache_with_formats_per_layer_writes_version_2_and_reads_back_equal() {
        let dir = tempdir();
        let path = dir.join("mixed.bkv");
        let layers = [(KvType::Q8_0, KvType::F16), (KvType::F16, KvType::Q4_0)];
        let snap = snapshot_of(9, &layers);
        write_snapshot(&path, &key(), &snap).unwrap();
        let (version, header) = header_of(&path);
        assert_eq!(version, 2);
        assert_eq!(header["layers"].as_array().unwrap().len(), 2);
        assert_eq!(header["layers"][1]["v_type"], "q4_0");
        assert_eq!(read_snapshot(&path, &key(), 64).unwrap(), snap);
        // One pair for every layer writes the header it always did.
        let uniform = dir.join("uniform.bkv");
        write_snapshot(&uniform, &key(), &snapshot(9)).unwrap();
        let (version, header) = header_of(&uniform);
        assert_eq!(version, 1);
        assert!(header.get("layers").is_none(), "{header}");
        // Every damaged byte is refused here too.
        let good = std::fs::read(&path).unwrap();
        let bad = dir.join("bad.bkv");
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0x20;
            std::fs::write(&bad, &b).unwrap();
            assert!(read_snapshot(&bad, &key(), 64).is_err(), "byte {i} flipped");
        }
    }

    #[test]
    fn a_header_whose_layers_do_not_match_its_version_or_count_is_refused() {
        let dir = tempdir();
        let path = dir.join("mixed.bkv");
        let layers = [(KvType::Q8_0, KvType::F16), (KvType::F16, KvType::Q4_0)];
        write_snapshot(&path, &key(), &snapshot_of(5, &layers)).unwrap();
        let (_, header) = header_of(&path);
        let bad = dir.join("bad.bkv");
        let refused = |version: u32, h: &serde_json::Value| {
            std::fs::write(&bad, rewritten(&path, version, h)).unwrap();
            read_snapshot(&bad, &key(), 64).unwrap_err()
        };
        // The same header made again reads: the helper is sound.
        std::fs::write(&bad, rewritten(&path, 2, &header)).unwrap();
        read_snapshot(&bad, &key(), 64).unwrap();
        // Per-layer formats under version 1, and version 2 without them.
        let e = refused(1, &header);
        assert!(matches!(e, SnapshotError::Corrupt { .. }), "{e}");
        let mut plain = header.clone();
        plain.as_object_mut().unwrap().remove("layers");
        let e = refused(2, &plain);
        assert!(matches!(e, SnapshotError::Corrupt { .. }), "{e}");
        // A list of another length than the layer count, an unknown type.
        let mut short = header.clone();
        short["layers"].as_array_mut().unwrap().pop();
        assert!(matches!(refused(2, &short), SnapshotError::Corrupt { .. }));
        let mut unknown = header.clone();
        unknown["layers"][0]["k_type"] = "q3_x".into();
        assert!(matches!(
            refused(2, &unknown),
            SnapshotError::Corrupt { .. }
        ));
        // No layers at all, or absurdly many, under version 1.
        for n in [0, usize::MAX] {
            let mut h = plain.clone();
            h["n_layer"] = n.into();
            assert!(
                matches!(refused(1, &h), SnapshotError::Corrupt { .. }),
                "{n}"
            );
        }
        // A version this build does not know.
        let e = refused(3, &header);
        assert!(matches!(e, SnapshotError::Version { found: 3, .. }) && e.is_mismatch());
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
