//! The half-width float formats and f32: IEEE binary16 (f16) and bfloat16, converted
//! exactly as the hardware converts them (F16C's `vcvtph2ps` / `vcvtps2ph`: round to nearest
//! even, NaN payloads kept and quieted). These are definitions, not kernels: the scalar
//! reference, the SIMD kernels' tails, the weight-format decoders and the loaders all read
//! f16 through them, so every kernel set sees the same values. The slice conversions that
//! have SIMD kernels are in `crate::float` ([`crate::float::f16_to_f32_slice`]).

/// IEEE binary16 -> binary32, exact. A NaN keeps its sign and payload and comes out quiet
/// (as `vcvtph2ps` does).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x03ff);
    let bits = match exp {
        0 if man == 0 => sign,
        0 => {
            // Subnormal: value = man * 2^-24; normalise the leading one into the implicit bit.
            let shift = man.leading_zeros() - 21; // 1..=10
            let e = 127 - 15 + 1 - shift;
            sign | (e << 23) | ((man << shift) & 0x03ff) << 13
        }
        0x1f if man == 0 => sign | 0x7f80_0000,
        0x1f => sign | 0x7fc0_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// IEEE binary32 -> binary16, round to nearest, ties to even; overflow gives infinity,
/// tiny values give signed zero or a subnormal; a NaN keeps its sign and top payload bits
/// and comes out quiet (as `vcvtps2ph` does).
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let abs = bits & 0x7fff_ffff;
    if abs >= 0x7f80_0000 {
        return if abs > 0x7f80_0000 {
            sign | 0x7e00 | ((abs >> 13) & 0x03ff) as u16
        } else {
            sign | 0x7c00
        };
    }
    if abs >= 0x477f_f000 {
        // >= 65520, halfway between 65504 (odd mantissa) and 2^16: rounds to infinity.
        return sign | 0x7c00;
    }
    if abs >= 0x3880_0000 {
        // Normal in f16 (>= 2^-14).
        let h = ((abs >> 13) - ((127 - 15) << 10)) as u16;
        let rest = abs & 0x1fff;
        let up = rest > 0x1000 || (rest == 0x1000 && h & 1 == 1);
        return sign | (h + u16::from(up)); // a carry rolls into the exponent, as it should
    }
    if abs <= 0x3300_0000 {
        // <= 2^-25, at most half the smallest subnormal: ties to even give zero.
        return sign;
    }
    // Subnormal in f16: units of 2^-24.
    let e = abs >> 23; // 102..=112
    let man = (abs & 0x007f_ffff) | 0x0080_0000;
    let shift = 126 - e; // 14..=24
    let h = man >> shift;
    let rest = man & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    let up = rest > half || (rest == half && h & 1 == 1);
    sign | (h + u32::from(up)) as u16
}

/// bfloat16 -> f32, exact.
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// f32 -> bfloat16, round to nearest, ties to even; a NaN stays a (quiet) NaN.
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x0040) as u16;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

/// The f16 at byte `i` of `b`.
pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}
