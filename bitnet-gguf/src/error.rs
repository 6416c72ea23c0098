//! The crate's one error type. Every variant says what went wrong and where: the byte offset
//! in the file, the metadata key or the tensor name, so a broken or hostile file can be
//! diagnosed from the message alone.

use std::path::PathBuf;

use crate::types::TensorType;

/// Everything that can go wrong reading, querying or writing a GGUF file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// Opening, mapping or reading the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Writing to the output failed.
    #[error("writing GGUF: {0}")]
    Write(#[source] std::io::Error),

    // ---- header ----
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: it begins with {}, where a GGUF file begins with \"GGUF\"", show_bytes(.found))]
    BadMagic {
        /// The first bytes found (fewer than four if the file is that short).
        found: Vec<u8>,
    },
    /// A big-endian GGUF (only v3 allows these); this reader is little-endian only.
    #[error(
        "big-endian GGUF (version {version} byte-swapped) is not supported; convert it to little-endian"
    )]
    BigEndian {
        /// The version as read in big-endian order.
        version: u32,
    },
    /// A version other than 2 or 3 (v1 used 32-bit counts and is long obsolete).
    #[error("unsupported GGUF version {version} (supported: 2 and 3)")]
    UnsupportedVersion {
        /// The version field.
        version: u32,
    },

    // ---- structure ----
    /// The file ends (or a declared length runs) before the item being read.
    #[error("truncated file: {what} at byte {offset} needs {needed} bytes, only {available} left")]
    Truncated {
        /// What was being read.
        what: String,
        /// Byte offset where it starts.
        offset: u64,
        /// Bytes it needs (saturated for absurd counts).
        needed: u64,
        /// Bytes left in the file from `offset`.
        available: u64,
    },
    /// A count or length above this reader's sanity cap.
    #[error("{what} at byte {offset} is {value}, above the limit of {limit}")]
    LimitExceeded {
        /// What was being read (e.g. "tensor count", "string length of key \"x\"").
        what: String,
        /// Byte offset of the field.
        offset: u64,
        /// The value found.
        value: u64,
        /// The cap.
        limit: u64,
    },
    /// A string (key, value or tensor name) is not valid UTF-8.
    #[error("invalid UTF-8 in {what} at byte {offset}")]
    InvalidUtf8 {
        /// Which string.
        what: String,
        /// Byte offset of the string's bytes.
        offset: u64,
    },
    /// A metadata value type id that GGUF does not define.
    #[error("unknown value type {type_id} for key \"{key}\" at byte {offset}")]
    UnknownValueType {
        /// The key whose value it is.
        key: String,
        /// The type id found.
        type_id: u32,
        /// Byte offset of the type field.
        offset: u64,
    },
    /// A bool stored as something other than 0 or 1.
    #[error("invalid bool byte {byte} for key \"{key}\" at byte {offset}")]
    InvalidBool {
        /// The key.
        key: String,
        /// The byte found.
        byte: u8,
        /// Its offset.
        offset: u64,
    },
    /// Arrays nested deeper than [`crate::MAX_NESTING`].
    #[error("arrays nested deeper than {limit} for key \"{key}\" at byte {offset}")]
    NestingTooDeep {
        /// The key.
        key: String,
        /// Offset of the too-deep array.
        offset: u64,
        /// The cap.
        limit: u32,
    },
    /// The same metadata key twice.
    #[error("duplicate metadata key \"{key}\" at byte {offset}")]
    DuplicateKey {
        /// The key.
        key: String,
        /// Offset of the second occurrence.
        offset: u64,
    },
    /// `general.alignment` is zero, not a power of two, or absurdly large.
    #[error("invalid general.alignment {value}: must be a power of two between 1 and {limit}")]
    InvalidAlignment {
        /// The value found.
        value: u64,
        /// The cap.
        limit: u64,
    },

    // ---- tensors ----
    /// The same tensor name twice.
    #[error("duplicate tensor name \"{name}\" at byte {offset}")]
    DuplicateTensorName {
        /// The name.
        name: String,
        /// Offset of the second tensor info.
        offset: u64,
    },
    /// A tensor with no dimensions or more than [`crate::MAX_DIMS`].
    #[error("tensor \"{tensor}\" at byte {offset} has {n_dims} dimensions (allowed: 1..={limit})")]
    BadDimCount {
        /// The tensor.
        tensor: String,
        /// The count found.
        n_dims: u32,
        /// Offset of the tensor info.
        offset: u64,
        /// The cap.
        limit: u32,
    },
    /// A dimension of size zero.
    #[error("tensor \"{tensor}\" has a zero-sized dimension {index} (dims {dims:?})")]
    ZeroDim {
        /// The tensor.
        tensor: String,
        /// Which dimension.
        index: usize,
        /// All dims.
        dims: Vec<u64>,
    },
    /// The product of the dims (or the byte size) does not fit in 63 bits.
    #[error("tensor \"{tensor}\": element count or byte size of dims {dims:?} overflows")]
    SizeOverflow {
        /// The tensor.
        tensor: String,
        /// Its dims.
        dims: Vec<u64>,
    },
    /// A tensor type id that no known ggml flavour defines.
    #[error("tensor \"{tensor}\" at byte {offset} has unknown type id {id}")]
    UnknownTensorType {
        /// The tensor.
        tensor: String,
        /// The id.
        id: u32,
        /// Offset of the tensor info.
        offset: u64,
    },
    /// A known tensor type whose layout this crate deliberately does not read.
    #[error("tensor \"{tensor}\" has type id {id} ({name}), which is not supported: {reason}")]
    UnsupportedTensorType {
        /// The tensor.
        tensor: String,
        /// The id.
        id: u32,
        /// The type's name in the ecosystem that defines it.
        name: &'static str,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A type id whose meaning depends on which ggml fork wrote the file, and the file does
    /// not say which.
    #[error(
        "tensor \"{tensor}\" has type id {id}, which means {meanings}; the file's metadata does not tell which"
    )]
    AmbiguousTensorType {
        /// The tensor.
        tensor: String,
        /// The id.
        id: u32,
        /// The candidate meanings.
        meanings: &'static str,
    },
    /// The element count (or row length) is not a multiple of the type's block.
    #[error(
        "tensor \"{tensor}\" of type {ty:?}: {what} {value} is not a multiple of the block size {block}"
    )]
    NotBlockMultiple {
        /// The tensor (empty when sizing a bare element count).
        tensor: String,
        /// The type.
        ty: TensorType,
        /// "row length" or "element count".
        what: &'static str,
        /// The value.
        value: u64,
        /// The block size.
        block: u64,
    },
    /// A tensor's offset is not a multiple of the file's alignment.
    #[error("tensor \"{tensor}\" has offset {offset}, not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        /// The tensor.
        tensor: String,
        /// Its offset (relative to the data section).
        offset: u64,
        /// The alignment.
        alignment: u64,
    },
    /// A tensor's bytes extend past the end of the file.
    #[error(
        "tensor \"{tensor}\" (offset {offset}, {n_bytes} bytes) extends past the end of the data section ({data_len} bytes)"
    )]
    TensorOutOfBounds {
        /// The tensor.
        tensor: String,
        /// Its offset (relative to the data section).
        offset: u64,
        /// Its size.
        n_bytes: u64,
        /// The size of the data section.
        data_len: u64,
    },
    /// Two tensors' byte ranges overlap.
    #[error("tensors \"{first}\" and \"{second}\" overlap in the data section")]
    OverlappingTensors {
        /// The one at the lower offset.
        first: String,
        /// The one that starts inside it.
        second: String,
    },

    // ---- queries ----
    /// A required metadata key is absent.
    #[error("missing metadata key \"{key}\"")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A metadata value of another type than requested.
    #[error("metadata key \"{key}\": expected {expected}, found {found}")]
    WrongType {
        /// The key.
        key: String,
        /// The requested type.
        expected: &'static str,
        /// The stored type.
        found: &'static str,
    },
    /// An integer value that does not fit the requested integer type.
    #[error("metadata key \"{key}\": value {value} does not fit in {expected}")]
    IntOutOfRange {
        /// The key.
        key: String,
        /// The stored value.
        value: i128,
        /// The requested type.
        expected: &'static str,
    },
    /// No tensor of that name.
    #[error("no tensor named \"{name}\"")]
    TensorNotFound {
        /// The name.
        name: String,
    },

    // ---- writer ----
    /// Metadata the writer refuses because the reader would refuse the result.
    #[error("cannot write metadata key \"{key}\": {reason}")]
    InvalidMetadata {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// A tensor list the writer cannot lay out as asked.
    #[error("cannot write tensor \"{tensor}\": {reason}")]
    InvalidLayout {
        /// The tensor.
        tensor: String,
        /// Why.
        reason: String,
    },
    /// Tensor data handed to the writer does not match the declared sizes.
    #[error("tensor data for \"{tensor}\": {reason}")]
    TensorDataMismatch {
        /// The tensor (or `<none>` when all were already written).
        tensor: String,
        /// Why.
        reason: String,
    },
}

/// Bytes as a reader recognises them: the text they spell, with the hex values beside it
/// (`"# be" (0x23 0x20 0x62 0x65)`: a text file given as a model).
fn show_bytes(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "nothing (the file is empty)".to_owned();
    }
    let text: String = bytes.escape_ascii().to_string();
    let hex: Vec<String> = bytes.iter().map(|b| format!("0x{b:02x}")).collect();
    format!("\"{text}\" ({})", hex.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_magic_shows_the_text_and_the_bytes() {
        let e = GgufError::BadMagic {
            found: b"# be".to_vec(),
        };
        assert_eq!(
            e.to_string(),
            "not a GGUF file: it begins with \"# be\" (0x23 0x20 0x62 0x65), where a GGUF file \
             begins with \"GGUF\""
        );
        let e = GgufError::BadMagic {
            found: vec![0x00, 0xff],
        };
        assert!(e.to_string().contains(r#""\x00\xff" (0x00 0xff)"#), "{e}");
        let e = GgufError::BadMagic { found: vec![] };
        assert!(e.to_string().contains("the file is empty"), "{e}");
    }
}
