//! Tensor descriptions: name, ggml-order dims, type, offset and the exact byte size derived
//! from them with overflow checks.

use crate::error::GgufError;
use crate::types::TensorType;

/// Most dimensions a ggml tensor has.
pub const MAX_DIMS: u32 = 4;

/// One tensor's header entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// ggml order: `dims[0]` (ne0) is the row length, the fastest-varying dimension.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: TensorType,
    /// Byte offset relative to the start of the data section.
    pub offset: u64,
    /// Product of the dims.
    pub n_elements: u64,
    /// Exact bytes of data (for I2_S including its 32-byte tail).
    pub n_bytes: u64,
}

impl TensorInfo {
    /// A tensor at offset 0 (the writer assigns offsets); checks dims (1..=4 of them, none
    /// zero), the row length against the type's block, and overflow of the sizes.
    pub fn new(
        name: impl Into<String>,
        dims: Vec<u64>,
        ty: TensorType,
    ) -> Result<TensorInfo, GgufError> {
        let name = name.into();
        let (n_elements, n_bytes) = sizes(&name, &dims, ty)?;
        Ok(TensorInfo {
            name,
            dims,
            ty,
            offset: 0,
            n_elements,
            n_bytes,
        })
    }

    /// Number of rows: the product of `dims[1..]` (1 for a vector).
    pub fn rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }

    /// Row length, `dims[0]`.
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(0)
    }

    /// One past the last byte, relative to the data section (saturating).
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.n_bytes)
    }
}

/// Element count and byte size of a tensor, with every check a header entry needs.
pub(crate) fn sizes(name: &str, dims: &[u64], ty: TensorType) -> Result<(u64, u64), GgufError> {
    if dims.is_empty() || dims.len() > MAX_DIMS as usize {
        return Err(GgufError::BadDimCount {
            tensor: name.to_owned(),
            n_dims: u32::try_from(dims.len()).unwrap_or(u32::MAX),
            offset: 0,
            limit: MAX_DIMS,
        });
    }
    if let Some(index) = dims.iter().position(|&d| d == 0) {
        return Err(GgufError::ZeroDim {
            tensor: name.to_owned(),
            index,
            dims: dims.to_vec(),
        });
    }
    let overflow = || GgufError::SizeOverflow {
        tensor: name.to_owned(),
        dims: dims.to_vec(),
    };
    let n = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(overflow)?;
    // ggml quantizes row by row, so the row length must fill whole blocks. I2_S packs the
    // whole tensor as one stream, so only the total count matters there.
    let (what, value) = match ty {
        TensorType::I2_S => ("element count", n),
        _ => ("row length", dims[0]),
    };
    let block = ty.block_len();
    if !value.is_multiple_of(block) {
        return Err(GgufError::NotBlockMultiple {
            tensor: name.to_owned(),
            ty,
            what,
            value,
            block,
        });
    }
    let bytes = ty.bytes_for(n).map_err(|e| match e {
        GgufError::SizeOverflow { .. } => overflow(),
        other => other,
    })?;
    Ok((n, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_computes_sizes() {
        let t = TensorInfo::new("w", vec![256, 3], TensorType::TQ2_0).unwrap();
        assert_eq!(
            (t.n_elements, t.n_bytes, t.rows(), t.row_len()),
            (768, 198, 3, 256)
        );
        let t = TensorInfo::new("s", vec![256, 128], TensorType::I2_S).unwrap();
        assert_eq!(t.n_bytes, 8224);
        let t = TensorInfo::new("v", vec![5], TensorType::F32).unwrap();
        assert_eq!((t.rows(), t.n_bytes), (1, 20));
    }

    #[test]
    fn new_rejects_bad_shapes() {
        assert!(matches!(
            TensorInfo::new("w", vec![], TensorType::F32),
            Err(GgufError::BadDimCount { n_dims: 0, .. })
        ));
        assert!(matches!(
            TensorInfo::new("w", vec![1; 5], TensorType::F32),
            Err(GgufError::BadDimCount { n_dims: 5, .. })
        ));
        assert!(matches!(
            TensorInfo::new("w", vec![4, 0], TensorType::F32),
            Err(GgufError::ZeroDim { index: 1, .. })
        ));
        assert!(matches!(
            TensorInfo::new("w", vec![1 << 32, 1 << 32], TensorType::F32),
            Err(GgufError::SizeOverflow { .. })
        ));
        assert!(matches!(
            TensorInfo::new("w", vec![1 << 31, 1 << 31], TensorType::F64),
            Err(GgufError::SizeOverflow { .. })
        ));
        assert!(matches!(
            TensorInfo::new("w", vec![128, 2], TensorType::TQ2_0),
            Err(GgufError::NotBlockMultiple {
                what: "row length",
                value: 128,
                ..
            })
        ));
    }
}
