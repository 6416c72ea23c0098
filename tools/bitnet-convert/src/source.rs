//! The checkpoint's tensors: one `model.safetensors`, the shards an index names
//! (`model.safetensors.index.json`), or every `*.safetensors` in the directory. Each file
//! is memory-mapped and its header parsed by the `safetensors` crate, which checks that the
//! offsets are contiguous and cover the file exactly; we add the file (and, for a
//! truncated file, the first tensor that runs past its end) to its error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensorError, SafeTensors};

use crate::error::ConvertError;
use crate::mmap::MappedFile;

// The shard index is named with the other checkpoint files (`files.rs` lists them all).
pub use crate::files::INDEX_FILE;

/// Where one tensor lives.
#[derive(Clone, Debug)]
pub struct TensorRef {
    /// Index into [`Sources::files`].
    pub file: usize,
    /// Its name in the checkpoint.
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Shape (row-major, outermost first).
    pub shape: Vec<usize>,
    /// Absolute byte range in the file.
    pub start: usize,
    /// End of the range (exclusive).
    pub end: usize,
}

impl TensorRef {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// One open safetensors file.
#[derive(Debug)]
pub struct SourceFile {
    /// Its path.
    pub path: PathBuf,
    map: MappedFile,
}

/// Every tensor of the checkpoint, by name.
#[derive(Debug)]
pub struct Sources {
    /// The open files.
    pub files: Vec<SourceFile>,
    /// The shard index, if the files came from one.
    pub index: Option<PathBuf>,
    /// Tensors by name.
    pub tensors: BTreeMap<String, TensorRef>,
}

impl Sources {
    /// Opens the safetensors files of the checkpoint in `dir`.
    pub fn open(dir: &Path) -> Result<Sources, ConvertError> {
        let index_path = dir.join(INDEX_FILE);
        let single = dir.join("model.safetensors");
        // `is_present` rather than `is_file`: a directory or FIFO under one of these names
        // is reported as what it is, not as "no weights".
        let (paths, index) = if crate::files::is_present(&index_path)? {
            let index = read_index(&index_path)?;
            let mut files: Vec<&String> = index.values().collect();
            files.sort();
            files.dedup();
            (
                files.into_iter().map(|f| dir.join(f)).collect(),
                Some((index_path, index)),
            )
        } else if crate::files::is_present(&single)? {
            (vec![single], None)
        } else {
            let mut found = Vec::new();
            let rd = std::fs::read_dir(dir).map_err(ConvertError::io(dir))?;
            for e in rd {
                let p = e.map_err(ConvertError::io(dir))?.path();
                if p.extension().is_some_and(|x| x == "safetensors")
                    && crate::files::is_present(&p)?
                {
                    found.push(p);
                }
            }
            found.sort();
            (found, None)
        };
        if paths.is_empty() {
            return Err(ConvertError::NoWeights {
                dir: dir.to_owned(),
            });
        }
        let mut files = Vec::with_capacity(paths.len());
        let mut tensors: BTreeMap<String, TensorRef> = BTreeMap::new();
        for path in paths {
            let (file, list) = open_file(&path)?;
            let idx = files.len();
            for mut t in list {
                if let Some(prev) = tensors.get(&t.name) {
                    return Err(ConvertError::Safetensors {
                        path: path.clone(),
                        reason: format!(
                            "tensor {} is also in {}",
                            t.name,
                            files_path(&files, prev.file).display()
                        ),
                    });
                }
                t.file = idx;
                tensors.insert(t.name.clone(), t);
            }
            files.push(SourceFile { path, map: file });
        }
        if let Some((index_path, index)) = &index {
            for (name, file) in index {
                match tensors.get(name) {
                    Some(t) if files[t.file].path == dir.join(file) => {}
                    Some(t) => {
                        return Err(ConvertError::Safetensors {
                            path: index_path.clone(),
                            reason: format!(
                                "the index puts tensor {name} in {file}, but it is in {}",
                                files[t.file].path.display()
                            ),
                        });
                    }
                    None => {
                        return Err(ConvertError::Safetensors {
                            path: index_path.clone(),
                            reason: format!(
                                "the index lists tensor {name} in {file}, which does not hold it"
                            ),
                        });
                    }
                }
            }
        }
        Ok(Sources {
            files,
            index: index.map(|(p, _)| p),
            tensors,
        })
    }

    /// The bytes of a tensor.
    pub fn data(&self, t: &TensorRef) -> &[u8] {
        &self.files[t.file].map.bytes()[t.start..t.end]
    }

    /// The path of the file holding `t`.
    pub fn path(&self, t: &TensorRef) -> &Path {
        &self.files[t.file].path
    }

    /// Drops the resident pages of a tensor already converted.
    pub fn release(&self, t: &TensorRef) {
        self.files[t.file].map.release(t.start, t.end);
    }

    /// Drops the resident pages of `start..end` (absolute offsets) in the file of `t`.
    pub fn files_release(&self, t: &TensorRef, start: usize, end: usize) {
        self.files[t.file].map.release(start, end);
    }

    /// Total bytes of tensor data.
    pub fn total_bytes(&self) -> u64 {
        self.tensors
            .values()
            .map(|t| (t.end - t.start) as u64)
            .sum()
    }
}

fn files_path(files: &[SourceFile], i: usize) -> &Path {
    files.get(i).map_or(Path::new("?"), |f| f.path.as_path())
}

/// `weight_map` of the index: tensor name -> file name (a plain name in the same directory).
fn read_index(path: &Path) -> Result<BTreeMap<String, String>, ConvertError> {
    let v = crate::hf::read_json(path)?;
    let bad = |reason: String| ConvertError::Safetensors {
        path: path.to_owned(),
        reason,
    };
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad("no \"weight_map\" object".into()))?;
    let mut out = BTreeMap::new();
    for (name, file) in map {
        let file = file
            .as_str()
            .ok_or_else(|| bad(format!("weight_map entry {name} is not a file name")))?;
        // Shards live beside the index; a path elsewhere is refused rather than followed,
        // and "." (the directory itself) is no shard either.
        if file.contains('/')
            || file.contains('\\')
            || file == "."
            || file == ".."
            || file.is_empty()
        {
            return Err(bad(format!(
                "weight_map entry {name} names {file:?}, not a file in the same directory"
            )));
        }
        out.insert(name.clone(), file.to_owned());
    }
    if out.is_empty() {
        return Err(bad("the weight_map is empty".into()));
    }
    Ok(out)
}

/// Maps one file and lists its tensors (with `file` = 0; the caller sets it).
fn open_file(path: &Path) -> Result<(MappedFile, Vec<TensorRef>), ConvertError> {
    let map = MappedFile::open(path)?;
    let bytes = map.bytes();
    let (header_len, meta) = match SafeTensors::read_metadata(bytes) {
        Ok(x) => x,
        Err(e) => {
            return Err(ConvertError::Safetensors {
                path: path.to_owned(),
                reason: explain(&e, bytes),
            });
        }
    };
    let base = 8 + header_len;
    let mut list = Vec::new();
    for (name, info) in meta.tensors() {
        let (s, e) = info.data_offsets;
        list.push(TensorRef {
            file: 0,
            name,
            dtype: info.dtype,
            shape: info.shape.clone(),
            start: base + s,
            end: base + e,
        });
    }
    list.sort_by_key(|t| t.start);
    Ok((map, list))
}

/// The crate's error in words, naming the tensor where it can be found: for a truncated
/// file, the first tensor whose data runs past the end.
fn explain(e: &SafeTensorError, bytes: &[u8]) -> String {
    match e {
        SafeTensorError::MetadataIncompleteBuffer => {
            let at = first_tensor_past_end(bytes);
            match at {
                Some((name, end, have)) => format!(
                    "truncated or padded: tensor {name} ends at data byte {end} but the file holds {have} data bytes"
                ),
                None => "the data section is not exactly the size the header describes (truncated or trailing bytes)".into(),
            }
        }
        SafeTensorError::InvalidOffset(name) => format!(
            "tensor {name}: data_offsets do not follow the previous tensor (the header lies about offsets)"
        ),
        SafeTensorError::TensorInvalidInfo => {
            "a tensor's data_offsets do not match its shape and dtype".into()
        }
        SafeTensorError::HeaderTooSmall | SafeTensorError::InvalidHeaderLength => {
            "the file is shorter than its header length says".into()
        }
        SafeTensorError::HeaderTooLarge => "the header length is implausibly large".into(),
        other => other.to_string(),
    }
}

/// For an inconsistent file: `(tensor, end offset, data bytes present)` of the first
/// tensor (in offset order) that ends beyond the data present.
fn first_tensor_past_end(bytes: &[u8]) -> Option<(String, usize, usize)> {
    let n = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?) as usize;
    let header = bytes.get(8..8usize.checked_add(n)?)?;
    let v: serde_json::Value = serde_json::from_slice(header).ok()?;
    let have = bytes.len() - 8 - n;
    let mut ends: Vec<(usize, String)> = v
        .as_object()?
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .filter_map(|(k, t)| {
            let off = t.get("data_offsets")?.as_array()?;
            Some((off.get(1)?.as_u64()? as usize, k.clone()))
        })
        .collect();
    ends.sort();
    ends.into_iter()
        .find(|(end, _)| *end > have)
        .map(|(end, name)| (name, end, have))
}
