//! The constants of the `exp` both x86 sets vectorize (for softmax and SiLU): Cody-Waite
//! reduction `x = n ln2 + r` with ln 2 split in two so `n * LN2_HI` is exact, then Cephes'
//! degree-6 polynomial on `r`. Each set builds `2^n` its own way (AVX2 in the exponent
//! field, AVX-512 with `scalef`) and clamps to the range that way allows.

/// The high part of ln 2 (few mantissa bits: `n * LN2_HI` is exact for the `n` in range).
pub(crate) const LN2_HI: f32 = 0.693_359_4;
/// ln 2 - [`LN2_HI`].
pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
/// Cephes' `expf` polynomial, highest power first: `exp(r) ≈ 1 + r + r² p(r)` where
/// `p(r) = POLY[0] r^5 + ... + POLY[5]` (Horner from the first coefficient).
pub(crate) const POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_2e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    0.166_666_65,
    0.5,
];
