//! Embeddings quantized for storage, with sentence-transformers' `quantize_embeddings`
//! conventions (the ones vector databases read): `int8` and `uint8` map each dimension's
//! `[min, max]` over a set of embeddings onto 256 steps; `ubinary` keeps the sign bit of each
//! value (`x > 0`), packed eight a byte, first value in the top bit; `binary` is `ubinary`'s
//! byte minus 128 as an i8. BitNet-embedding's own 8/4/2/1-bit output scheme has no
//! published code, so it is not offered.

use crate::error::CoreError;

/// A storage precision of an embedding.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Precision {
    Float32,
    Int8,
    Uint8,
    Binary,
    Ubinary,
}

impl Precision {
    pub fn from_name(s: &str) -> Option<Precision> {
        match s {
            "float32" | "f32" | "float" => Some(Precision::Float32),
            "int8" => Some(Precision::Int8),
            "uint8" => Some(Precision::Uint8),
            "binary" => Some(Precision::Binary),
            "ubinary" => Some(Precision::Ubinary),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::Float32 => "float32",
            Precision::Int8 => "int8",
            Precision::Uint8 => "uint8",
            Precision::Binary => "binary",
            Precision::Ubinary => "ubinary",
        }
    }
}

/// One embedding at a precision: its values as the integers (or floats) stored.
#[derive(Clone, Debug, PartialEq)]
pub enum Quantized {
    Float32(Vec<f32>),
    Int8(Vec<i8>),
    Uint8(Vec<u8>),
}

/// `x > 0` of each value, eight a byte, value 0 in bit 7 of byte 0 (numpy's `packbits`); the
/// last byte's unused bits are 0.
pub fn sign_bits(v: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; v.len().div_ceil(8)];
    for (i, &x) in v.iter().enumerate() {
        if x > 0.0 {
            out[i / 8] |= 0x80 >> (i % 8);
        }
    }
    out
}

/// Every embedding of `set` (all of one width) at `precision`. `int8` and `uint8` take each
/// dimension's range over `set` itself (sentence-transformers' behaviour without calibration
/// embeddings), so they need at least two embeddings that differ in every dimension; a value
/// truncates toward zero as numpy's `astype` does, clamped to the type's range (numpy would
/// wrap, which only a calibration range narrower than the data can reach).
pub fn quantize(set: &[Vec<f32>], precision: Precision) -> Result<Vec<Quantized>, CoreError> {
    let d = set.first().map_or(0, Vec::len);
    if set.iter().any(|v| v.len() != d) {
        return Err(CoreError::InvalidOption {
            option: "output-precision",
            reason: "the embeddings differ in width".into(),
        });
    }
    match precision {
        Precision::Float32 => Ok(set.iter().map(|v| Quantized::Float32(v.clone())).collect()),
        Precision::Ubinary => Ok(set.iter().map(|v| Quantized::Uint8(sign_bits(v))).collect()),
        Precision::Binary => Ok(set
            .iter()
            .map(|v| {
                Quantized::Int8(
                    sign_bits(v)
                        .iter()
                        .map(|&b| (i16::from(b) - 128) as i8)
                        .collect(),
                )
            })
            .collect()),
        Precision::Int8 | Precision::Uint8 => {
            let mut lo = vec![f32::INFINITY; d];
            let mut hi = vec![f32::NEG_INFINITY; d];
            for v in set {
                for (j, &x) in v.iter().enumerate() {
                    lo[j] = lo[j].min(x);
                    hi[j] = hi[j].max(x);
                }
            }
            // A NaN range counts as none.
            if let Some(j) =
                (0..d).find(|&j| hi[j].partial_cmp(&lo[j]) != Some(std::cmp::Ordering::Greater))
            {
                return Err(CoreError::InvalidOption {
                    option: "output-precision",
                    reason: format!(
                        "{} maps each dimension's range over the inputs onto 256 steps, and \
                         dimension {j} has none: give at least two inputs",
                        precision.name()
                    ),
                });
            }
            let step: Vec<f32> = lo.iter().zip(&hi).map(|(l, h)| (h - l) / 255.0).collect();
            // Truncated after the offset, as `((E - starts) / steps - 128).astype(int8)`.
            let level = |j: usize, x: f32, offset: f32| ((x - lo[j]) / step[j] - offset).trunc();
            Ok(set
                .iter()
                .map(|v| {
                    if precision == Precision::Uint8 {
                        Quantized::Uint8(
                            v.iter()
                                .enumerate()
                                .map(|(j, &x)| level(j, x, 0.0).clamp(0.0, 255.0) as u8)
                                .collect(),
                        )
                    } else {
                        Quantized::Int8(
                            v.iter()
                                .enumerate()
                                .map(|(j, &x)| level(j, x, 128.0).clamp(-128.0, 127.0) as i8)
                                .collect(),
                        )
                    }
                })
                .collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_packs_signs_first_value_in_the_top_bit() {
        let v = [0.5, -1.0, 0.0, 2.0, 1.0, -0.1, -3.0, 0.2, 7.0];
        assert_eq!(sign_bits(&v), vec![0b1001_1001, 0b1000_0000]);
        // 153 - 128 and 128 - 128.
        let q = quantize(&[v.to_vec()], Precision::Binary).unwrap();
        assert_eq!(q, vec![Quantized::Int8(vec![25, 0])]);
        let q = quantize(&[v.to_vec()], Precision::Ubinary).unwrap();
        assert_eq!(q, vec![Quantized::Uint8(vec![0b1001_1001, 0b1000_0000])]);
    }

    #[test]
    fn int8_and_uint8_span_each_dimension_of_the_set() {
        // Ranges of 255 and 510: steps of exactly 1 and 2.
        let set = vec![vec![0.0, -255.0], vec![255.0, 255.0], vec![127.5, 0.0]];
        let u = quantize(&set, Precision::Uint8).unwrap();
        assert_eq!(u[0], Quantized::Uint8(vec![0, 0]));
        assert_eq!(u[1], Quantized::Uint8(vec![255, 255]));
        // 127.5 truncates to 127.
        assert_eq!(u[2], Quantized::Uint8(vec![127, 127]));
        let i = quantize(&set, Precision::Int8).unwrap();
        assert_eq!(i[0], Quantized::Int8(vec![-128, -128]));
        assert_eq!(i[1], Quantized::Int8(vec![127, 127]));
        // 127.5 - 128 = -0.5 truncates toward zero.
        assert_eq!(i[2], Quantized::Int8(vec![0, 0]));
        // One input has no range to map.
        let e = quantize(&set[..1], Precision::Int8).unwrap_err();
        assert!(e.to_string().contains("two inputs"), "{e}");
        assert!(quantize(&[vec![1.0], vec![1.0, 2.0]], Precision::Float32).is_err());
    }
}
