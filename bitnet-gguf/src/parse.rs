//! The header parser: bytes in, metadata and validated tensor infos out.
//!
//! Everything here treats the input as hostile. Each read checks the bytes left first; each
//! count or length is checked against a sanity cap and against the bytes left in the file
//! (times the smallest encoding of one item) before anything is allocated; recursion into
//! nested arrays is bounded. Errors carry the byte offset and the key or tensor concerned.

use std::collections::HashSet;

use crate::error::GgufError;
use crate::metadata::Metadata;
use crate::tensor::{MAX_DIMS, TensorInfo, sizes};
use crate::types::{Flavour, TensorType};
use crate::value::{Array, Value, ValueType};
use crate::{
    DEFAULT_ALIGNMENT, MAX_ALIGNMENT, MAX_KEY_LEN, MAX_NESTING, MAX_STRING_LEN, MAX_TENSORS,
};

/// The GGUF magic, "GGUF" as bytes.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// Everything the header says, checked for internal consistency; the tensor byte ranges are
/// checked against the file by the caller, which knows the file's size.
#[derive(Debug)]
pub(crate) struct Header {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Bytes of header before the padding to the data section.
    pub header_len: u64,
    pub data_offset: u64,
    pub flavour: Flavour,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn left(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'a [u8], GgufError> {
        if n > self.left() {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.offset(),
                needed: n,
                available: self.left(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(
        &mut self,
        what: impl FnOnce() -> String,
    ) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: impl FnOnce() -> String) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A u64 count of items of at least `min_size` bytes each: capped, and checked against
    /// the bytes left so that an absurd count fails before any allocation.
    fn count(
        &mut self,
        what: &dyn Fn() -> String,
        min_size: u64,
        limit: u64,
    ) -> Result<usize, GgufError> {
        let at = self.offset();
        let n = self.u64(what)?;
        if n > limit {
            return Err(GgufError::LimitExceeded {
                what: what(),
                offset: at,
                value: n,
                limit,
            });
        }
        let needed = n.saturating_mul(min_size);
        if needed > self.left() {
            return Err(GgufError::Truncated {
                what: format!("{} items of {}", n, what()),
                offset: self.offset(),
                needed,
                available: self.left(),
            });
        }
        Ok(n as usize)
    }

    /// A length-prefixed UTF-8 string.
    fn string(&mut self, what: &dyn Fn() -> String, limit: u64) -> Result<String, GgufError> {
        let len = self.count(&|| format!("length of {}", what()), 1, limit)?;
        let at = self.offset();
        let bytes = self.take(len as u64, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::InvalidUtf8 {
                what: what(),
                offset: at,
            }),
        }
    }
}

/// Parses the header of a GGUF file held entirely in `buf`.
pub(crate) fn parse_header(buf: &[u8]) -> Result<Header, GgufError> {
    let mut c = Cursor { buf, pos: 0 };
    if buf.len() < 4 || buf[..4] != MAGIC {
        return Err(GgufError::BadMagic {
            found: buf[..buf.len().min(4)].to_vec(),
        });
    }
    c.pos = 4;
    let version = c.u32(|| "version".into())?;
    if !(2..=3).contains(&version) {
        // A big-endian file has the version's low bytes last: 3 reads as 0x0300_0000.
        let swapped = version.swap_bytes();
        if version & 0xffff == 0 && (1..=3).contains(&swapped) {
            return Err(GgufError::BigEndian { version: swapped });
        }
        return Err(GgufError::UnsupportedVersion { version });
    }
    // Each tensor info is at least: name length (8), n_dims (4), one dim (8), type (4),
    // offset (8). Each key/value at least: key length (8), type (4), a 1-byte value.
    let n_tensors = c.count(&|| "tensor count".into(), 32, MAX_TENSORS)?;
    let n_kv = c.count(&|| "metadata key/value count".into(), 13, crate::MAX_KV)?;

    let mut metadata = Metadata::new();
    for i in 0..n_kv {
        let key_at = c.offset();
        let key = c.string(&|| format!("key of metadata entry {i}"), MAX_KEY_LEN)?;
        if metadata.contains(&key) {
            return Err(GgufError::DuplicateKey {
                key,
                offset: key_at,
            });
        }
        let type_at = c.offset();
        let type_id = c.u32(|| format!("value type of key \"{key}\""))?;
        let ty = ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
            key: key.clone(),
            type_id,
            offset: type_at,
        })?;
        let v = read_value(&mut c, ty, &key, 0)?;
        metadata.insert(key, v);
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => {
            let a = v.as_int().ok_or_else(|| GgufError::WrongType {
                key: "general.alignment".into(),
                expected: "u32",
                found: v.type_name(),
            })?;
            match u64::try_from(a) {
                Ok(a) if a.is_power_of_two() && a <= MAX_ALIGNMENT => a,
                _ => {
                    return Err(GgufError::InvalidAlignment {
                        value: a.clamp(0, u64::MAX as i128) as u64,
                        limit: MAX_ALIGNMENT,
                    });
                }
            }
        }
    };

    struct Raw {
        name: String,
        dims: Vec<u64>,
        type_id: u32,
        offset: u64,
        at: u64,
    }
    let mut raw = Vec::with_capacity(n_tensors);
    let mut names = HashSet::with_capacity(n_tensors);
    for i in 0..n_tensors {
        let at = c.offset();
        let name = c.string(
            &|| format!("name of tensor {i}"),
            crate::MAX_TENSOR_NAME_LEN,
        )?;
        if !names.insert(name.clone()) {
            return Err(GgufError::DuplicateTensorName { name, offset: at });
        }
        let n_dims = c.u32(|| format!("dimension count of tensor \"{name}\""))?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(GgufError::BadDimCount {
                tensor: name,
                n_dims,
                offset: at,
                limit: MAX_DIMS,
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            dims.push(c.u64(|| format!("dimension {d} of tensor \"{name}\""))?);
        }
        let type_id = c.u32(|| format!("type of tensor \"{name}\""))?;
        let offset = c.u64(|| format!("offset of tensor \"{name}\""))?;
        raw.push(Raw {
            name,
            dims,
            type_id,
            offset,
            at,
        });
    }
    let header_len = c.offset();
    let data_offset = header_len.next_multiple_of(alignment);

    let flavour = Flavour::detect(
        metadata.get("general.architecture").and_then(Value::as_str),
        raw.iter().map(|r| r.type_id),
    );
    let mut tensors = Vec::with_capacity(raw.len());
    for r in raw {
        let ty = TensorType::from_id(r.type_id, flavour, &r.name).map_err(|e| match e {
            GgufError::UnknownTensorType { tensor, id, .. } => GgufError::UnknownTensorType {
                tensor,
                id,
                offset: r.at,
            },
            other => other,
        })?;
        let (n_elements, n_bytes) = sizes(&r.name, &r.dims, ty)?;
        if !r.offset.is_multiple_of(alignment) {
            return Err(GgufError::MisalignedTensor {
                tensor: r.name,
                offset: r.offset,
                alignment,
            });
        }
        tensors.push(TensorInfo {
            name: r.name,
            dims: r.dims,
            ty,
            offset: r.offset,
            n_elements,
            n_bytes,
        });
    }

    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        header_len,
        data_offset,
        flavour,
    })
}

/// Checks that every tensor lies inside a data section of `data_len` bytes and that no two
/// overlap.
pub(crate) fn check_tensor_layout(tensors: &[TensorInfo], data_len: u64) -> Result<(), GgufError> {
    for t in tensors {
        match t.offset.checked_add(t.n_bytes) {
            Some(end) if end <= data_len => {}
            _ => {
                return Err(GgufError::TensorOutOfBounds {
                    tensor: t.name.clone(),
                    offset: t.offset,
                    n_bytes: t.n_bytes,
                    data_len,
                });
            }
        }
    }
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| t.offset);
    for pair in order.windows(2) {
        if pair[0].end() > pair[1].offset {
            return Err(GgufError::OverlappingTensors {
                first: pair[0].name.clone(),
                second: pair[1].name.clone(),
            });
        }
    }
    Ok(())
}

fn read_value(
    c: &mut Cursor<'_>,
    ty: ValueType,
    key: &str,
    depth: u32,
) -> Result<Value, GgufError> {
    let what = || format!("value of key \"{key}\"");
    Ok(match ty {
        ValueType::U8 => Value::U8(c.array::<1>(what)?[0]),
        ValueType::I8 => Value::I8(i8::from_le_bytes(c.array(what)?)),
        ValueType::U16 => Value::U16(u16::from_le_bytes(c.array(what)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(c.array(what)?)),
        ValueType::U32 => Value::U32(u32::from_le_bytes(c.array(what)?)),
        ValueType::I32 => Value::I32(i32::from_le_bytes(c.array(what)?)),
        ValueType::U64 => Value::U64(u64::from_le_bytes(c.array(what)?)),
        ValueType::I64 => Value::I64(i64::from_le_bytes(c.array(what)?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(c.array(what)?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(c.array(what)?)),
        ValueType::Bool => Value::Bool(read_bool(c, key)?),
        ValueType::String => Value::String(c.string(&what, MAX_STRING_LEN)?),
        ValueType::Array => Value::Array(read_array(c, key, depth)?),
    })
}

fn read_bool(c: &mut Cursor<'_>, key: &str) -> Result<bool, GgufError> {
    let at = c.offset();
    match c.array::<1>(|| format!("bool of key \"{key}\""))?[0] {
        0 => Ok(false),
        1 => Ok(true),
        byte => Err(GgufError::InvalidBool {
            key: key.to_owned(),
            byte,
            offset: at,
        }),
    }
}

fn read_array(c: &mut Cursor<'_>, key: &str, depth: u32) -> Result<Array, GgufError> {
    let at = c.offset();
    if depth >= MAX_NESTING {
        return Err(GgufError::NestingTooDeep {
            key: key.to_owned(),
            offset: at,
            limit: MAX_NESTING,
        });
    }
    let type_id = c.u32(|| format!("element type of array \"{key}\""))?;
    let ty = ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
        key: key.to_owned(),
        type_id,
        offset: at,
    })?;
    let what = || format!("array \"{key}\"");
    let n = c.count(&what, ty.min_size(), crate::MAX_ARRAY_LEN)?;

    fn fixed<const N: usize, T>(
        c: &mut Cursor<'_>,
        n: usize,
        key: &str,
        f: impl Fn([u8; N]) -> T,
    ) -> Result<Vec<T>, GgufError> {
        // `count` has already checked that n * N bytes are present.
        let bytes = c.take((n * N) as u64, || format!("array \"{key}\""))?;
        Ok(bytes
            .chunks_exact(N)
            .map(|ch| {
                let mut a = [0u8; N];
                a.copy_from_slice(ch);
                f(a)
            })
            .collect())
    }

    Ok(match ty {
        ValueType::U8 => Array::U8(fixed(c, n, key, |[b]: [u8; 1]| b)?),
        ValueType::I8 => Array::I8(fixed(c, n, key, i8::from_le_bytes)?),
        ValueType::U16 => Array::U16(fixed(c, n, key, u16::from_le_bytes)?),
        ValueType::I16 => Array::I16(fixed(c, n, key, i16::from_le_bytes)?),
        ValueType::U32 => Array::U32(fixed(c, n, key, u32::from_le_bytes)?),
        ValueType::I32 => Array::I32(fixed(c, n, key, i32::from_le_bytes)?),
        ValueType::U64 => Array::U64(fixed(c, n, key, u64::from_le_bytes)?),
        ValueType::I64 => Array::I64(fixed(c, n, key, i64::from_le_bytes)?),
        ValueType::F32 => Array::F32(fixed(c, n, key, f32::from_le_bytes)?),
        ValueType::F64 => Array::F64(fixed(c, n, key, f64::from_le_bytes)?),
        ValueType::Bool => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(read_bool(c, key)?);
            }
            Array::Bool(v)
        }
        ValueType::String => {
            let mut v = Vec::with_capacity(n);
            for i in 0..n {
                v.push(c.string(
                    &|| format!("element {i} of array \"{key}\""),
                    MAX_STRING_LEN,
                )?);
            }
            Array::String(v)
        }
        ValueType::Array => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(read_array(c, key, depth + 1)?);
            }
            Array::Array(v)
        }
    })
}
