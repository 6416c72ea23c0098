//! SentencePiece `tokenizer.model`: a protobuf `ModelProto`, read with a minimal wire-format
//! parser (no protobuf dependency for four fields).
//!
//! Fields read (sentencepiece `sentencepiece_model.proto`):
//! - `ModelProto.pieces = 1` (repeated `SentencePiece`: `piece = 1` string, `score = 2`
//!   float, `type = 3` enum NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, BYTE 6,
//!   UNUSED 5, the same numbers GGUF's `token_type` uses);
//! - `ModelProto.trainer_spec = 2`: `model_type = 3` (UNIGRAM 1, BPE 2, WORD 3, CHAR 4),
//!   `unk_id = 40`, `bos_id = 41`, `eos_id = 42`, `pad_id = 43` (int32, -1 = none);
//! - `ModelProto.normalizer_spec = 3`: `add_dummy_prefix = 3` (default true).
//!
//! Every length is checked against the bytes left, so a corrupt file gives an error naming
//! the byte offset, never a panic.

use std::path::Path;

use crate::error::ConvertError;

/// Most pieces accepted.
const MAX_PIECES: usize = 1 << 24;

/// One vocabulary entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    /// The text (with `▁` for spaces).
    pub text: String,
    /// Merge priority.
    pub score: f32,
    /// SentencePiece type (1..=6).
    pub ty: i32,
}

/// What a `tokenizer.model` holds that GGUF needs.
#[derive(Clone, Debug, PartialEq)]
pub struct SpmModel {
    /// The pieces, by id.
    pub pieces: Vec<Piece>,
    /// `trainer_spec.model_type` (2 = BPE).
    pub model_type: i32,
    /// Special ids (`None` when -1 or absent and the default does not apply).
    pub unk_id: Option<u32>,
    /// Beginning of sequence.
    pub bos_id: Option<u32>,
    /// End of sequence.
    pub eos_id: Option<u32>,
    /// Padding.
    pub pad_id: Option<u32>,
    /// `normalizer_spec.add_dummy_prefix`.
    pub add_dummy_prefix: bool,
}

/// A protobuf field value.
enum Field<'a> {
    Varint(u64),
    /// A 64-bit fixed value (no field we read has this wire type).
    Fixed64,
    Bytes(&'a [u8]),
    Fixed32(u32),
}

struct Wire<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf[0]` in the file, for errors.
    base: usize,
}

impl<'a> Wire<'a> {
    fn new(buf: &'a [u8], base: usize) -> Self {
        Wire { buf, pos: 0, base }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(format!(
                    "varint runs past the end at byte {}",
                    self.base + self.pos
                ));
            };
            self.pos += 1;
            if shift == 63 && b > 1 {
                return Err(format!(
                    "varint overflows at byte {}",
                    self.base + self.pos - 1
                ));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(format!(
            "varint longer than 10 bytes at byte {}",
            self.base + self.pos
        ))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(format!(
                "field of {n} bytes at byte {} runs past the end of its message",
                self.base + self.pos
            ));
        };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next `(field number, value, offset of the value)`, or `None` at the end.
    fn next(&mut self) -> Result<Option<(u64, Field<'a>, usize)>, String> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let at = self.base + self.pos;
        let v = match key & 7 {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Field::Fixed64
            }
            2 => {
                let n =
                    usize::try_from(self.varint()?).map_err(|_| "length overflow".to_string())?;
                Field::Bytes(self.take(n)?)
            }
            5 => Field::Fixed32(u32::from_le_bytes(
                self.take(4)?.try_into().map_err(|_| "short")?,
            )),
            w => return Err(format!("unsupported wire type {w} at byte {}", at)),
        };
        Ok(Some((key >> 3, v, at)))
    }
}

/// Parses the bytes of a `tokenizer.model`.
pub fn parse(bytes: &[u8]) -> Result<SpmModel, String> {
    let mut m = SpmModel {
        pieces: Vec::new(),
        model_type: 1,
        unk_id: Some(0),
        bos_id: Some(1),
        eos_id: Some(2),
        pad_id: None,
        add_dummy_prefix: true,
    };
    let mut w = Wire::new(bytes, 0);
    while let Some((field, v, at)) = w.next()? {
        match (field, v) {
            (1, Field::Bytes(b)) => {
                if m.pieces.len() >= MAX_PIECES {
                    return Err(format!("more than {MAX_PIECES} pieces"));
                }
                m.pieces.push(parse_piece(b, at, m.pieces.len())?);
            }
            (2, Field::Bytes(b)) => parse_trainer(b, at, &mut m)?,
            (3, Field::Bytes(b)) => parse_normalizer(b, at, &mut m)?,
            (1..=3, _) => {
                return Err(format!(
                    "field {field} at byte {at} has the wrong wire type"
                ));
            }
            _ => {}
        }
    }
    if m.pieces.is_empty() {
        return Err("no pieces: not a SentencePiece model".into());
    }
    Ok(m)
}

fn parse_piece(b: &[u8], base: usize, id: usize) -> Result<Piece, String> {
    let mut p = Piece {
        text: String::new(),
        score: 0.0,
        ty: 1,
    };
    let mut w = Wire::new(b, base);
    while let Some((field, v, at)) = w.next()? {
        match (field, v) {
            (1, Field::Bytes(s)) => {
                p.text = std::str::from_utf8(s)
                    .map_err(|_| format!("piece {id} at byte {at} is not UTF-8"))?
                    .to_owned();
            }
            (2, Field::Fixed32(x)) => p.score = f32::from_bits(x),
            (3, Field::Varint(x)) => {
                p.ty = i32::try_from(x)
                    .ok()
                    .filter(|t| (1..=6).contains(t))
                    .ok_or_else(|| format!("piece {id} has unknown type {x}"))?;
            }
            (1..=3, _) => return Err(format!("piece {id}: field {field} has the wrong wire type")),
            _ => {}
        }
    }
    if !p.score.is_finite() {
        return Err(format!("piece {id} ({:?}) has a non-finite score", p.text));
    }
    Ok(p)
}

/// An int32 id field: -1 (sign-extended to 64 bits) means none.
fn id_of(x: u64) -> Option<u32> {
    let v = x as i64;
    u32::try_from(v).ok()
}

fn parse_trainer(b: &[u8], base: usize, m: &mut SpmModel) -> Result<(), String> {
    let mut w = Wire::new(b, base);
    while let Some((field, v, _)) = w.next()? {
        if let Field::Varint(x) = v {
            match field {
                3 => m.model_type = x as i32,
                40 => m.unk_id = id_of(x),
                41 => m.bos_id = id_of(x),
                42 => m.eos_id = id_of(x),
                43 => m.pad_id = id_of(x),
                _ => {}
            }
        }
    }
    Ok(())
}

fn parse_normalizer(b: &[u8], base: usize, m: &mut SpmModel) -> Result<(), String> {
    let mut w = Wire::new(b, base);
    while let Some((field, v, _)) = w.next()? {
        if let (3, Field::Varint(x)) = (field, v) {
            m.add_dummy_prefix = x != 0;
        }
    }
    Ok(())
}

/// Largest `tokenizer.model` we read (Gemma's 256k-piece model is about 4 MB).
const MAX_MODEL_BYTES: u64 = 256 << 20;

/// Reads and parses `path`.
pub fn read(path: &Path) -> Result<SpmModel, ConvertError> {
    let bytes = crate::files::read_capped(path, MAX_MODEL_BYTES)?;
    let m = parse(&bytes).map_err(|reason| ConvertError::Tokenizer {
        path: path.to_owned(),
        reason: format!("not a valid SentencePiece model: {reason}"),
    })?;
    if m.model_type != 2 {
        return Err(ConvertError::Tokenizer {
            path: path.to_owned(),
            reason: format!(
                "SentencePiece model type {} ({}); only BPE (2) models map to GGUF's llama tokenizer",
                m.model_type,
                match m.model_type {
                    1 => "unigram",
                    3 => "word",
                    4 => "char",
                    _ => "unknown",
                }
            ),
        });
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes_field(field: u64, data: &[u8], out: &mut Vec<u8>) {
        varint(field << 3 | 2, out);
        varint(data.len() as u64, out);
        out.extend_from_slice(data);
    }

    fn piece(text: &str, score: f32, ty: u64) -> Vec<u8> {
        let mut p = Vec::new();
        bytes_field(1, text.as_bytes(), &mut p);
        varint(2 << 3 | 5, &mut p);
        p.extend_from_slice(&score.to_le_bytes());
        varint(3 << 3, &mut p);
        varint(ty, &mut p);
        p
    }

    fn model() -> Vec<u8> {
        let mut m = Vec::new();
        bytes_field(1, &piece("<unk>", 0.0, 2), &mut m);
        bytes_field(1, &piece("<s>", 0.0, 3), &mut m);
        bytes_field(1, &piece("\u{2581}a", -1.5, 1), &mut m);
        let mut t = Vec::new();
        varint(3 << 3, &mut t);
        varint(2, &mut t);
        varint(43 << 3, &mut t);
        varint(u64::MAX, &mut t); // pad_id = -1
        bytes_field(2, &t, &mut m);
        let mut n = Vec::new();
        varint(3 << 3, &mut n);
        varint(0, &mut n);
        bytes_field(3, &n, &mut m);
        m
    }

    #[test]
    fn parses_pieces_and_specs() {
        let m = parse(&model()).unwrap();
        assert_eq!(m.pieces.len(), 3);
        assert_eq!(m.pieces[2].text, "\u{2581}a");
        assert_eq!(m.pieces[2].score, -1.5);
        assert_eq!(m.pieces[1].ty, 3);
        assert_eq!(m.model_type, 2);
        assert_eq!(m.pad_id, None);
        assert!(!m.add_dummy_prefix);
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let m = model();
        for n in 0..m.len() {
            // Any prefix either parses (ends on a field boundary) or errors.
            let _ = parse(&m[..n]);
        }
        assert!(parse(&m[..5]).is_err());
        assert!(parse(b"").is_err());
        assert!(parse(&[0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
    }
}
