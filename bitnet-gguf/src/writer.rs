//! The streaming writer: the whole header (with every tensor's offset) goes out first, then
//! each tensor's bytes in order with zero padding to the alignment, so a converter never
//! holds more than one tensor in memory.
//!
//! The byte layout matches llama.cpp's `gguf_write_to_file`: header, zero padding to the
//! alignment, tensors each starting on an aligned offset, zero padding after the last one.
//! Files read with [`crate::GgufFile`] and written back with `keep_offsets` and the file's
//! [`crate::GgufFile::tail_padded`] come out byte-identical.

use std::collections::HashSet;
use std::io::Write;

use crate::error::GgufError;
use crate::metadata::Metadata;
use crate::parse::MAGIC;
use crate::tensor::{TensorInfo, sizes};
use crate::value::{Array, Value};
use crate::{
    DEFAULT_ALIGNMENT, MAX_ALIGNMENT, MAX_ARRAY_LEN, MAX_KEY_LEN, MAX_KV, MAX_NESTING,
    MAX_STRING_LEN, MAX_TENSOR_NAME_LEN, MAX_TENSORS,
};

/// Layout choices for [`GgufWriter::with_options`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct WriteOptions {
    /// Use each `TensorInfo::offset` as given (after checking it is aligned, in ascending
    /// file order and non-overlapping) instead of packing the tensors.
    pub keep_offsets: bool,
    /// Pad the end of the file to the alignment (llama.cpp does; some vocab-only files were
    /// written without it).
    pub pad_tail: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            keep_offsets: false,
            pad_tail: true,
        }
    }
}

struct Slot {
    name: String,
    offset: u64,
    n_bytes: u64,
}

/// Writes one GGUF file to `W`. See the module docs for the order of calls.
pub struct GgufWriter<W: Write> {
    out: W,
    slots: Vec<Slot>,
    alignment: u64,
    pad_tail: bool,
    header_len: u64,
    /// Bytes written after the header (padding included).
    written: u64,
    /// Index of the tensor being written and how many of its bytes are out.
    current: usize,
    current_done: u64,
}

impl<W: Write> std::fmt::Debug for GgufWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufWriter")
            .field("tensors", &self.slots.len())
            .field("current", &self.current)
            .field("alignment", &self.alignment)
            .finish_non_exhaustive()
    }
}

impl<W: Write> GgufWriter<W> {
    /// Writes the header (magic, version, counts, metadata, tensor infos). Offsets are
    /// packed in order, each aligned, unless `keep_offsets` (then each `TensorInfo::offset`
    /// is checked and kept). Pads the end of the file as llama.cpp does.
    pub fn new(
        out: W,
        version: u32,
        metadata: &Metadata,
        tensors: &[TensorInfo],
        keep_offsets: bool,
    ) -> Result<Self, GgufError> {
        let opts = WriteOptions {
            keep_offsets,
            ..WriteOptions::default()
        };
        Self::with_options(out, version, metadata, tensors, opts)
    }

    /// [`GgufWriter::new`] with every layout choice explicit.
    pub fn with_options(
        mut out: W,
        version: u32,
        metadata: &Metadata,
        tensors: &[TensorInfo],
        opts: WriteOptions,
    ) -> Result<Self, GgufError> {
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion { version });
        }
        let alignment = alignment_of(metadata)?;
        // Refuse what the reader would refuse, so every file we write can be read back.
        if tensors.len() as u64 > MAX_TENSORS {
            return Err(GgufError::InvalidLayout {
                tensor: String::new(),
                reason: format!("{} tensors, more than {MAX_TENSORS}", tensors.len()),
            });
        }
        if metadata.len() as u64 > MAX_KV {
            return Err(GgufError::InvalidMetadata {
                key: String::new(),
                reason: format!("{} entries, more than {MAX_KV}", metadata.len()),
            });
        }
        let slots = layout(tensors, alignment, opts.keep_offsets)?;

        let mut h = Vec::new();
        h.extend_from_slice(&MAGIC);
        h.extend_from_slice(&version.to_le_bytes());
        h.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        h.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
        for (key, v) in metadata.iter() {
            if key.len() as u64 > MAX_KEY_LEN {
                return Err(GgufError::InvalidMetadata {
                    key: key.to_owned(),
                    reason: format!("key longer than {MAX_KEY_LEN} bytes"),
                });
            }
            put_str(&mut h, key);
            h.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
            put_value(&mut h, key, v)?;
        }
        for (t, slot) in tensors.iter().zip(&slots) {
            put_str(&mut h, &t.name);
            h.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                h.extend_from_slice(&d.to_le_bytes());
            }
            h.extend_from_slice(&t.ty.id().to_le_bytes());
            h.extend_from_slice(&slot.offset.to_le_bytes());
        }
        out.write_all(&h).map_err(GgufError::Write)?;
        Ok(GgufWriter {
            out,
            slots,
            alignment,
            pad_tail: opts.pad_tail,
            header_len: h.len() as u64,
            written: 0,
            current: 0,
            current_done: 0,
        })
    }

    /// Appends bytes to the next tensor, in header order. A tensor may arrive in several
    /// chunks, but one call never spans two tensors: a chunk longer than what is left of
    /// the current tensor is refused (`TensorDataMismatch`) and nothing of it is written.
    pub fn write_tensor_data(&mut self, data: &[u8]) -> Result<(), GgufError> {
        let Some(slot) = self.slots.get(self.current) else {
            return Err(GgufError::TensorDataMismatch {
                tensor: "<none>".into(),
                reason: format!("all {} tensors were already written", self.slots.len()),
            });
        };
        let (offset, n_bytes) = (slot.offset, slot.n_bytes);
        let left = n_bytes - self.current_done;
        if data.len() as u64 > left {
            return Err(GgufError::TensorDataMismatch {
                tensor: slot.name.clone(),
                reason: format!(
                    "got {} bytes but only {left} remain of its {}",
                    data.len(),
                    slot.n_bytes
                ),
            });
        }
        if data.is_empty() {
            return Ok(());
        }
        if self.current_done == 0 {
            // Header padding plus the gap up to this tensor's offset.
            let target = self.data_start() - self.header_len + offset;
            self.pad_to(target)?;
        }
        self.out.write_all(data).map_err(GgufError::Write)?;
        self.written += data.len() as u64;
        self.current_done += data.len() as u64;
        if self.current_done == n_bytes {
            self.current += 1;
            self.current_done = 0;
        }
        Ok(())
    }

    /// Checks every tensor was written in full, pads the tail, flushes, and returns the
    /// output.
    pub fn finish(mut self) -> Result<W, GgufError> {
        if let Some(slot) = self.slots.get(self.current) {
            return Err(GgufError::TensorDataMismatch {
                tensor: slot.name.clone(),
                reason: format!(
                    "finish() called after {} of its {} bytes ({} of {} tensors complete)",
                    self.current_done,
                    slot.n_bytes,
                    self.current,
                    self.slots.len()
                ),
            });
        }
        if self.pad_tail {
            let end = (self.header_len + self.written).next_multiple_of(self.alignment);
            self.pad_to(end - self.header_len)?;
        }
        self.out.flush().map_err(GgufError::Write)?;
        Ok(self.out)
    }

    /// Absolute offset of the data section.
    pub fn data_start(&self) -> u64 {
        self.header_len.next_multiple_of(self.alignment)
    }

    /// The offsets the tensors were given, relative to the data section, in order.
    pub fn offsets(&self) -> impl Iterator<Item = (&str, u64)> {
        self.slots.iter().map(|s| (s.name.as_str(), s.offset))
    }

    fn pad_to(&mut self, target: u64) -> Result<(), GgufError> {
        const ZEROS: [u8; 256] = [0; 256];
        while self.written < target {
            let n = (target - self.written).min(ZEROS.len() as u64) as usize;
            self.out.write_all(&ZEROS[..n]).map_err(GgufError::Write)?;
            self.written += n as u64;
        }
        Ok(())
    }
}

/// Writes a complete file into memory: a convenience for tests and small tools.
pub fn write_to_vec(
    version: u32,
    metadata: &Metadata,
    tensors: &[(TensorInfo, &[u8])],
) -> Result<Vec<u8>, GgufError> {
    let infos: Vec<TensorInfo> = tensors.iter().map(|(t, _)| t.clone()).collect();
    let mut w = GgufWriter::new(Vec::new(), version, metadata, &infos, false)?;
    for (t, data) in tensors {
        if data.len() as u64 != t.n_bytes {
            return Err(GgufError::TensorDataMismatch {
                tensor: t.name.clone(),
                reason: format!("{} bytes given, {} expected", data.len(), t.n_bytes),
            });
        }
        w.write_tensor_data(data)?;
    }
    w.finish()
}

fn alignment_of(metadata: &Metadata) -> Result<u64, GgufError> {
    let Some(a) = metadata.get_opt_u64("general.alignment")? else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    if !a.is_power_of_two() || a > MAX_ALIGNMENT {
        return Err(GgufError::InvalidAlignment {
            value: a,
            limit: MAX_ALIGNMENT,
        });
    }
    Ok(a)
}

fn layout(tensors: &[TensorInfo], alignment: u64, keep: bool) -> Result<Vec<Slot>, GgufError> {
    let mut names = HashSet::new();
    let mut slots: Vec<Slot> = Vec::with_capacity(tensors.len());
    let mut end = 0u64;
    for t in tensors {
        let bad = |reason: String| GgufError::InvalidLayout {
            tensor: t.name.clone(),
            reason,
        };
        if !names.insert(t.name.as_str()) {
            return Err(bad("duplicate tensor name".into()));
        }
        if t.name.len() as u64 > MAX_TENSOR_NAME_LEN {
            return Err(bad(format!("name longer than {MAX_TENSOR_NAME_LEN} bytes")));
        }
        let (n_elements, n_bytes) = sizes(&t.name, &t.dims, t.ty)?;
        if (n_elements, n_bytes) != (t.n_elements, t.n_bytes) {
            return Err(bad(format!(
                "n_elements/n_bytes {}/{} disagree with dims {:?} of type {} ({n_elements}/{n_bytes})",
                t.n_elements,
                t.n_bytes,
                t.dims,
                t.ty.name()
            )));
        }
        let offset = if keep {
            if !t.offset.is_multiple_of(alignment) {
                return Err(bad(format!(
                    "offset {} is not a multiple of the alignment {alignment}",
                    t.offset
                )));
            }
            if t.offset < end {
                return Err(bad(format!(
                    "offset {} overlaps or precedes the previous tensor (which ends at {end}); \
                     a streaming writer needs ascending offsets",
                    t.offset
                )));
            }
            t.offset
        } else {
            end.next_multiple_of(alignment)
        };
        end = offset
            .checked_add(n_bytes)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(|| bad("data section larger than 2^63 bytes".into()))?;
        slots.push(Slot {
            name: t.name.clone(),
            offset,
            n_bytes,
        });
    }
    Ok(slots)
}

fn check_len(key: &str, what: &str, len: usize, limit: u64) -> Result<(), GgufError> {
    if len as u64 > limit {
        return Err(GgufError::InvalidMetadata {
            key: key.to_owned(),
            reason: format!("{what} of {len} elements/bytes, more than {limit}"),
        });
    }
    Ok(())
}

fn put_str(h: &mut Vec<u8>, s: &str) {
    h.extend_from_slice(&(s.len() as u64).to_le_bytes());
    h.extend_from_slice(s.as_bytes());
}

fn put_value(h: &mut Vec<u8>, key: &str, v: &Value) -> Result<(), GgufError> {
    match v {
        Value::U8(x) => h.push(*x),
        Value::I8(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => h.push(u8::from(*x)),
        Value::String(s) => {
            check_len(key, "string", s.len(), MAX_STRING_LEN)?;
            put_str(h, s)
        }
        Value::Array(a) => put_array(h, key, a, 0)?,
    }
    Ok(())
}

fn put_array(h: &mut Vec<u8>, key: &str, a: &Array, depth: u32) -> Result<(), GgufError> {
    if depth >= MAX_NESTING {
        return Err(GgufError::InvalidMetadata {
            key: key.to_owned(),
            reason: format!("arrays nested deeper than {MAX_NESTING}"),
        });
    }
    check_len(key, "array", a.len(), MAX_ARRAY_LEN)?;
    h.extend_from_slice(&(a.elem_type() as u32).to_le_bytes());
    h.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                h.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => h.extend_from_slice(v),
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::F64(v) => each!(v),
        Array::Bool(v) => h.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => {
            for s in v {
                check_len(key, "string", s.len(), MAX_STRING_LEN)?;
                put_str(h, s);
            }
        }
        Array::Array(v) => {
            for inner in v {
                put_array(h, key, inner, depth + 1)?;
            }
        }
    }
    Ok(())
}
