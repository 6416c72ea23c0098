//! Tensor element types: ids, names and exact on-disk sizes.
//!
//! The sizes are ggml's `type_traits[]` (`blck_size`, `type_size`) checked against
//! `ggml/src/ggml-common.h` block structs. Ids 0..=35 mean the same in every ggml fork.
//! Above that the forks disagree:
//!
//! | id | upstream ggml (ggml-org) | bitnet.cpp fork |
//! |----|--------------------------|-----------------|
//! | 36 | (IQ4_NL_4_4, removed, never in files) | I2_S |
//! | 37 | (IQ4_NL_4_8, removed) | I8_S |
//! | 38 | (IQ4_NL_8_8, removed) | TL1 |
//! | 39 | MXFP4 | TL2 |
//! | 40 | NVFP4 | - |
//! | 41 | Q1_0 | - |
//! | 42 | Q2_0 | - |
//!
//! So 36 is always I2_S, 37/38 are bitnet.cpp-only (refused: I8_S is an activation type and
//! TL1's layout depends on the kernel configuration it was converted for), and 39 is resolved
//! through [`Flavour`], which the reader derives from the file's metadata and other tensors.

use crate::error::GgufError;

/// Which ggml fork's id table applies to a file. Derived by [`Flavour::detect`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Flavour {
    /// ggml-org/ggml and llama.cpp.
    Upstream,
    /// microsoft/BitNet's llama.cpp fork (ids 36..=39 = I2_S, I8_S, TL1, TL2).
    BitnetCpp,
    /// Nothing in the file tells; ids whose meaning differs are refused.
    Unknown,
}

impl Flavour {
    /// Decides the flavour from the architecture name and the raw type ids of all tensors.
    ///
    /// The tensor ids decide first: an id in 36..=38 (which upstream never writes) means
    /// bitnet.cpp, an id in 40..=42 (which bitnet.cpp never defined) means upstream, both means
    /// [`Flavour::Unknown`]. With neither, the architecture decides: `bitnet-25` and
    /// `bitnet-b1.58` exist only in bitnet.cpp, `bitnet` (or none) in both, anything else is
    /// taken as upstream's.
    pub fn detect(architecture: Option<&str>, type_ids: impl IntoIterator<Item = u32>) -> Flavour {
        let (mut fork, mut upstream) = (false, false);
        for id in type_ids {
            fork |= (36..=38).contains(&id);
            upstream |= (40..=42).contains(&id);
        }
        match (fork, upstream) {
            (true, false) => Flavour::BitnetCpp,
            (false, true) => Flavour::Upstream,
            (true, true) => Flavour::Unknown,
            (false, false) => match architecture {
                Some("bitnet-25" | "bitnet-b1.58") => Flavour::BitnetCpp,
                Some("bitnet") | None => Flavour::Unknown,
                Some(_) => Flavour::Upstream,
            },
        }
    }
}

macro_rules! tensor_types {
    ($( $(#[$doc:meta])* $var:ident = $id:literal, $name:literal, $blk:literal, $size:literal; )*) => {
        /// A tensor's element type. Names and ids follow ggml (see the module docs for the ids
        /// that differ between ggml forks).
        #[allow(non_camel_case_types)]
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum TensorType {
            $( $(#[$doc])* $var, )*
        }

        impl TensorType {
            /// Every type this crate can size, in id order.
            pub const ALL: &'static [TensorType] = &[ $( TensorType::$var, )* ];

            /// The id written in the file.
            pub fn id(self) -> u32 {
                match self { $( TensorType::$var => $id, )* }
            }

            /// ggml's name for the type (upper case, as gguf-py spells it).
            pub fn name(self) -> &'static str {
                match self { $( TensorType::$var => $name, )* }
            }

            /// Elements per block. I2_S: 4 (one byte of codes), plus a per-tensor tail; see
            /// [`TensorType::bytes_for`].
            pub fn block_len(self) -> u64 {
                match self { $( TensorType::$var => $blk, )* }
            }

            /// Bytes per block (I2_S: 1, not counting the 32-byte per-tensor tail).
            pub fn block_bytes(self) -> u64 {
                match self { $( TensorType::$var => $size, )* }
            }

            fn from_plain_id(id: u32) -> Option<TensorType> {
                match id { $( $id => Some(TensorType::$var), )* _ => None }
            }
        }
    };
}

tensor_types! {
    /// IEEE binary32.
    F32 = 0, "F32", 1, 4;
    /// IEEE binary16.
    F16 = 1, "F16", 1, 2;
    /// 32 weights: f16 scale + 16 bytes of nibbles.
    Q4_0 = 2, "Q4_0", 32, 18;
    /// 32 weights: f16 scale, f16 min + 16 bytes of nibbles.
    Q4_1 = 3, "Q4_1", 32, 20;
    /// 32 weights: f16 scale, 4 bytes of high bits, 16 bytes of nibbles.
    Q5_0 = 6, "Q5_0", 32, 22;
    /// 32 weights: f16 scale, f16 min, 4 bytes of high bits, 16 bytes of nibbles.
    Q5_1 = 7, "Q5_1", 32, 24;
    /// 32 weights: f16 scale + 32 int8.
    Q8_0 = 8, "Q8_0", 32, 34;
    /// 32 weights: f16 scale, f16 scaled sum + 32 int8.
    Q8_1 = 9, "Q8_1", 32, 36;
    /// 256 weights: 16 scale bytes, 64 bytes of 2-bit quants, f16 d, f16 dmin.
    Q2_K = 10, "Q2_K", 256, 84;
    /// 256 weights: 32 bytes high bits, 64 bytes low bits, 12 scale bytes, f16 d.
    Q3_K = 11, "Q3_K", 256, 110;
    /// 256 weights: f16 d, f16 dmin, 12 scale bytes, 128 bytes of nibbles.
    Q4_K = 12, "Q4_K", 256, 144;
    /// 256 weights: f16 d, f16 dmin, 12 scale bytes, 32 bytes high bits, 128 bytes nibbles.
    Q5_K = 13, "Q5_K", 256, 176;
    /// 256 weights: 128 bytes low 4 bits, 64 bytes high 2 bits, 16 int8 scales, f16 d.
    Q6_K = 14, "Q6_K", 256, 210;
    /// 256 weights: f32 d, 256 int8, 16 i16 group sums (an activation type).
    Q8_K = 15, "Q8_K", 256, 292;
    /// 256 weights: f16 d + 32 u16 grid indices.
    IQ2_XXS = 16, "IQ2_XXS", 256, 66;
    /// 256 weights: f16 d, 32 u16, 8 scale bytes.
    IQ2_XS = 17, "IQ2_XS", 256, 74;
    /// 256 weights: f16 d + 96 bytes.
    IQ3_XXS = 18, "IQ3_XXS", 256, 98;
    /// 256 weights: f16 d, 32 bytes, 8 u16.
    IQ1_S = 19, "IQ1_S", 256, 50;
    /// 32 weights: f16 d + 16 bytes of non-linear nibbles.
    IQ4_NL = 20, "IQ4_NL", 32, 18;
    /// 256 weights: f16 d, 64 qs, 8 qh, 32 signs, 4 scales.
    IQ3_S = 21, "IQ3_S", 256, 110;
    /// 256 weights: f16 d, 64 qs, 8 qh, 8 scales.
    IQ2_S = 22, "IQ2_S", 256, 82;
    /// 256 weights: f16 d, u16 high scales, 4 low scale bytes, 128 bytes nibbles.
    IQ4_XS = 23, "IQ4_XS", 256, 136;
    /// int8.
    I8 = 24, "I8", 1, 1;
    /// int16.
    I16 = 25, "I16", 1, 2;
    /// int32.
    I32 = 26, "I32", 1, 4;
    /// int64.
    I64 = 27, "I64", 1, 8;
    /// IEEE binary64.
    F64 = 28, "F64", 1, 8;
    /// 256 weights: 32 qs, 16 qh, 8 scale bytes (the f16 scale is spread over them).
    IQ1_M = 29, "IQ1_M", 256, 56;
    /// bfloat16.
    BF16 = 30, "BF16", 1, 2;
    /// Ternary, 256 weights: 48 bytes of 5 trits each, 4 bytes of 4 trits each, f16 d.
    TQ1_0 = 34, "TQ1_0", 256, 54;
    /// Ternary, 256 weights: 64 bytes of 2-bit codes (0,1,2 = -1,0,+1), f16 d.
    TQ2_0 = 35, "TQ2_0", 256, 66;
    /// bitnet.cpp's ternary type: the whole tensor is `n/4` bytes of 2-bit codes
    /// (0,1,2 = -1,0,+1; x86 layout: in each 32-byte group of 128 weights, weight `j` sits in
    /// byte `j % 32` at bits `6 - 2*(j / 32)`), then a 32-byte tail whose first 4 bytes are
    /// the tensor's one f32 scale. See [`i2s_scale`].
    I2_S = 36, "I2_S", 4, 1;
    /// Upstream's OCP microscaling FP4, 32 weights: E8M0 scale byte + 16 bytes of E2M1.
    MXFP4 = 39, "MXFP4", 32, 17;
    /// Upstream's NVFP4, 64 weights: 4 UE4M3 scale bytes (one per 16) + 32 bytes of E2M1.
    NVFP4 = 40, "NVFP4", 64, 36;
    /// Upstream ggml's sign-only 1-bit type (`GGML_TYPE_Q1_0 = 41`, `block_q1_0`), the
    /// crate's type for binary (+-1) weights. 128 weights per 18-byte block:
    ///
    /// ```text
    /// bytes 0..2   d: f16 scale (ggml's reference quantizer stores mean |w| of the block)
    /// bytes 2..18  qs[16]: weight j of the block is bit (j % 8) of qs[j / 8];
    ///              bit 1 -> +d, bit 0 -> -d (w >= 0 encodes as 1)
    /// ```
    ///
    /// Early PrismML forks numbered a 32-weight variant 40 and this 128-weight layout 41
    /// (`Q1_0_g128`); upstream kept only the 128-weight layout, as id 41, so such files read
    /// correctly here except for their id-40 tensors (which upstream calls NVFP4).
    Q1_0 = 41, "Q1_0", 128, 18;
    /// Upstream's 2-bit type, 64 weights: f16 scale + 16 bytes of 2-bit codes.
    Q2_0 = 42, "Q2_0", 64, 18;
}

/// Bytes in I2_S's per-tensor tail (the scale and padding).
pub const I2S_TAIL_BYTES: u64 = 32;

impl TensorType {
    /// Resolves a file's type id, using `flavour` for the ids the forks disagree on.
    /// `tensor` names the tensor in the error.
    pub fn from_id(id: u32, flavour: Flavour, tensor: &str) -> Result<TensorType, GgufError> {
        let unsupported = |name, reason| GgufError::UnsupportedTensorType {
            tensor: tensor.to_owned(),
            id,
            name,
            reason,
        };
        match id {
            37 => Err(unsupported(
                "I8_S (bitnet.cpp)",
                "an activation type of bitnet.cpp, not a weight storage format",
            )),
            38 => Err(unsupported(
                "TL1 (bitnet.cpp)",
                "its layout depends on the kernel tiling it was converted for; convert to I2_S or TQ2_0",
            )),
            39 => match flavour {
                Flavour::Upstream => Ok(TensorType::MXFP4),
                Flavour::BitnetCpp => Err(unsupported(
                    "TL2 (bitnet.cpp)",
                    "its layout depends on the kernel tiling it was converted for; convert to I2_S or TQ2_0",
                )),
                Flavour::Unknown => Err(GgufError::AmbiguousTensorType {
                    tensor: tensor.to_owned(),
                    id,
                    meanings: "MXFP4 in upstream ggml but TL2 in bitnet.cpp",
                }),
            },
            _ => TensorType::from_plain_id(id).ok_or_else(|| GgufError::UnknownTensorType {
                tensor: tensor.to_owned(),
                id,
                offset: 0,
            }),
        }
    }

    /// Looks a type up by its name, case-insensitively (`"tq2_0"`, `"I2_S"`).
    pub fn from_name(name: &str) -> Option<TensorType> {
        TensorType::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Exact bytes of `n_elements` values, including I2_S's 32-byte tail. Errors if
    /// `n_elements` is not a multiple of the block or the size overflows.
    pub fn bytes_for(self, n_elements: u64) -> Result<u64, GgufError> {
        let block = self.block_len();
        if !n_elements.is_multiple_of(block) {
            return Err(GgufError::NotBlockMultiple {
                tensor: String::new(),
                ty: self,
                what: "element count",
                value: n_elements,
                block,
            });
        }
        let body = (n_elements / block).checked_mul(self.block_bytes());
        let total = match self {
            TensorType::I2_S => body.and_then(|b| b.checked_add(I2S_TAIL_BYTES)),
            _ => body,
        };
        total
            .filter(|&t| t <= i64::MAX as u64)
            .ok_or_else(|| GgufError::SizeOverflow {
                tensor: String::new(),
                dims: vec![n_elements],
            })
    }

    /// Storage bits per weight, ignoring I2_S's fixed 32-byte tail.
    pub fn bits_per_weight(self) -> f64 {
        (self.block_bytes() * 8) as f64 / self.block_len() as f64
    }

    /// Weights restricted to {-1, 0, +1} times a scale.
    pub fn is_ternary(self) -> bool {
        matches!(
            self,
            TensorType::TQ1_0 | TensorType::TQ2_0 | TensorType::I2_S
        )
    }

    /// Anything other than plain float or integer elements.
    pub fn is_quantized(self) -> bool {
        !matches!(
            self,
            TensorType::F32
                | TensorType::F16
                | TensorType::BF16
                | TensorType::F64
                | TensorType::I8
                | TensorType::I16
                | TensorType::I32
                | TensorType::I64
        )
    }
}

/// Splits an I2_S tensor's bytes into the packed codes (`n_elements / 4` bytes) and the
/// per-tensor f32 scale stored in the first 4 bytes of the tail. `None` if `data` is not
/// exactly the size [`TensorType::bytes_for`] gives.
pub fn i2s_scale(data: &[u8], n_elements: u64) -> Option<(&[u8], f32)> {
    let expected = TensorType::I2_S.bytes_for(n_elements).ok()?;
    if data.len() as u64 != expected {
        return None;
    }
    let (codes, tail) = data.split_at((n_elements / 4) as usize);
    let scale = f32::from_le_bytes(tail.get(..4)?.try_into().ok()?);
    Some((codes, scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for &t in TensorType::ALL {
            assert!(seen.insert(t.id()), "duplicate id {}", t.id());
            let back = TensorType::from_id(t.id(), Flavour::Upstream, "x");
            if t == TensorType::I2_S {
                assert_eq!(back.unwrap(), t);
            } else {
                assert_eq!(back.unwrap(), t, "{}", t.name());
            }
            assert_eq!(TensorType::from_name(&t.name().to_lowercase()), Some(t));
        }
    }

    #[test]
    fn exact_sizes() {
        assert_eq!(TensorType::TQ1_0.bytes_for(512).unwrap(), 108);
        assert_eq!(TensorType::TQ2_0.bytes_for(256).unwrap(), 66);
        assert_eq!(TensorType::Q1_0.bytes_for(256).unwrap(), 36);
        assert_eq!(TensorType::I2_S.bytes_for(256 * 128).unwrap(), 8192 + 32);
        assert_eq!(TensorType::F16.bytes_for(3).unwrap(), 6);
        assert_eq!(TensorType::Q6_K.bytes_for(256).unwrap(), 210);
        assert!(matches!(
            TensorType::TQ2_0.bytes_for(100),
            Err(GgufError::NotBlockMultiple { block: 256, .. })
        ));
        assert!(matches!(
            TensorType::F64.bytes_for(u64::MAX / 2),
            Err(GgufError::SizeOverflow { .. })
        ));
        assert_eq!(TensorType::TQ2_0.bits_per_weight(), 2.0625);
        assert!(TensorType::I2_S.is_ternary() && !TensorType::Q1_0.is_ternary());
        assert!(TensorType::Q1_0.is_quantized() && !TensorType::BF16.is_quantized());
    }

    #[test]
    fn fork_ids_resolve_by_flavour() {
        assert_eq!(
            TensorType::from_id(39, Flavour::Upstream, "t").unwrap(),
            TensorType::MXFP4
        );
        assert!(matches!(
            TensorType::from_id(39, Flavour::BitnetCpp, "t"),
            Err(GgufError::UnsupportedTensorType { id: 39, .. })
        ));
        assert!(matches!(
            TensorType::from_id(39, Flavour::Unknown, "t"),
            Err(GgufError::AmbiguousTensorType { id: 39, .. })
        ));
        assert!(matches!(
            TensorType::from_id(38, Flavour::Upstream, "t"),
            Err(GgufError::UnsupportedTensorType { .. })
        ));
        assert!(matches!(
            TensorType::from_id(4, Flavour::Upstream, "t"),
            Err(GgufError::UnknownTensorType { id: 4, .. })
        ));
        assert_eq!(Flavour::detect(Some("bitnet-25"), [0]), Flavour::BitnetCpp);
        assert_eq!(Flavour::detect(Some("bitnet"), [0, 36]), Flavour::BitnetCpp);
        assert_eq!(Flavour::detect(Some("bitnet"), [0, 35]), Flavour::Unknown);
        assert_eq!(Flavour::detect(Some("gpt-oss"), [39]), Flavour::Upstream);
        assert_eq!(Flavour::detect(Some("bitnet"), [41]), Flavour::Upstream);
        assert_eq!(Flavour::detect(Some("llama"), [36, 0]), Flavour::BitnetCpp);
        assert_eq!(Flavour::detect(None, [36, 41]), Flavour::Unknown);
    }

    #[test]
    fn i2s_scale_reads_the_tail() {
        let mut data = vec![0u8; 32 + 32];
        data[32..36].copy_from_slice(&0.5f32.to_le_bytes());
        let (codes, s) = i2s_scale(&data, 128).unwrap();
        assert_eq!((codes.len(), s), (32, 0.5));
        assert!(i2s_scale(&data[..63], 128).is_none());
    }
}
