//! The vectorized `exp` of the AArch64 sets (softmax, SiLU): Cody-Waite reduction
//! `x = n ln2 + r` with ln 2 split in two so `n * LN2_HI` is exact, then Cephes' degree-6
//! polynomial on `r` (the constants of `x86_64/exp.rs`, repeated here because no tree
//! imports another's files), `2^n` built in the exponent field.

use std::arch::aarch64::*;

/// The high part of ln 2 (few mantissa bits: `n * LN2_HI` is exact for the `n` in range).
const LN2_HI: f32 = 0.693_359_4;
/// ln 2 - [`LN2_HI`].
const LN2_LO: f32 = -2.121_944_4e-4;
/// Cephes' `expf` polynomial, highest power first: `exp(r) ≈ 1 + r + r² p(r)`.
const POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_2e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    0.166_666_65,
    0.5,
];

/// `exp(x)` on four lanes: 0 below -87.33 (and for -inf), infinity above 88.72, NaN stays
/// NaN (`FMIN`/`FMAX` propagate it, and the range masks are written to keep it).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn exp4(x0: float32x4_t) -> float32x4_t {
    let x = vminq_f32(vdupq_n_f32(88.3), vmaxq_f32(vdupq_n_f32(-87.3), x0));
    // FCVTNS rounds to nearest even, as the x86 sets' round does.
    let ni = vcvtnq_s32_f32(vmulq_f32(x, vdupq_n_f32(std::f32::consts::LOG2_E)));
    let n = vcvtq_f32_s32(ni);
    let r = vfmsq_f32(x, n, vdupq_n_f32(LN2_HI));
    let r = vfmsq_f32(r, n, vdupq_n_f32(LN2_LO));
    let mut p = vdupq_n_f32(POLY[0]);
    for &c in &POLY[1..] {
        p = vfmaq_f32(vdupq_n_f32(c), p, r);
    }
    let y = vaddq_f32(vfmaq_f32(r, p, vmulq_f32(r, r)), vdupq_n_f32(1.0));
    let pow2 = vshlq_n_s32::<23>(vaddq_s32(ni, vdupq_n_s32(127)));
    let e = vmulq_f32(y, vreinterpretq_f32_s32(pow2));
    // Below the range: 0; `!(x0 < lo)` keeps NaN lanes (the compare is false for them).
    let low = vcltq_f32(x0, vdupq_n_f32(-87.33));
    let e = vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(e), low));
    vbslq_f32(
        vcgtq_f32(x0, vdupq_n_f32(88.72)),
        vdupq_n_f32(f32::INFINITY),
        e,
    )
}
