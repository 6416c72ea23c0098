//! NEON F16 -> Q8_0 row re-encoding (`--head q8` at load time): the operations of the
//! portable fused loop (`scalar/requant.rs`) on 32 values at a time, so the same bytes.
//! The largest magnitude comes from the f16 bits (`AND`, `UMAXV`: their order is the
//! values' order), the values are widened exactly (`FCVTL`), scaled (`FMUL`), clamped
//! (`FMAX`/`FMIN`), rounded half away from zero as `trunc(x + copysign(0.49999997, x))`
//! (`BSL`, `FADD`, `FCVTZS`) and narrowed (`XTN`).

use std::arch::aarch64::*;

use crate::aarch64::asm::f16x4_to_f32x4;
use crate::layout::half::{f16_to_f32, f32_to_f16};
use crate::layout::rows::{Q8_0_BLOCK_BYTES, QK8_0};
use crate::shared::requant::f16_q8_0_via_f32;

/// The portable `f16_q8_0` (`scalar/requant.rs`) with NEON arithmetic: the same IEEE
/// operations on the same values, so the same bytes.
///
/// # Safety
/// The CPU must support NEON; `out.len()` is a multiple of 34 and `src.len()` is 64 bytes
/// per block of `out`.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn f16_q8_0(src: &[u8], out: &mut [u8]) {
    debug_assert!(src.len() == out.len() / Q8_0_BLOCK_BYTES * 2 * QK8_0);
    let exp = vdupq_n_u16(0x7c00);
    let mag = vdupq_n_u16(0x7fff);
    let sign = vdupq_n_u32(0x8000_0000);
    let half = vdupq_n_f32(f32::from_bits(0x3eff_ffff));
    let (lo, hi) = (vdupq_n_f32(-127.0), vdupq_n_f32(127.0));
    for (sb, b) in src
        .chunks_exact(2 * QK8_0)
        .zip(out.chunks_exact_mut(Q8_0_BLOCK_BYTES))
    {
        // SAFETY: `sb` holds 64 bytes (32 f16); NEON loads need no alignment.
        let h = unsafe { vld1q_u16_x4(sb.as_ptr().cast()) };
        let h = [h.0, h.1, h.2, h.3];
        // An all-ones exponent (infinity or NaN) anywhere: the reference path (the portable
        // loop's too).
        let special = h.iter().fold(vdupq_n_u16(0), |acc, &v| {
            vorrq_u16(acc, vceqq_u16(vandq_u16(v, exp), exp))
        });
        if vmaxvq_u16(special) != 0 {
            f16_q8_0_via_f32(sb, b);
            continue;
        }
        let top = vmaxvq_u16(
            h.iter()
                .fold(vdupq_n_u16(0), |m, &v| vmaxq_u16(m, vandq_u16(v, mag))),
        );
        let d = f16_to_f32(top) / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let (db, qs) = b.split_at_mut(2);
        db.copy_from_slice(&f32_to_f16(d).to_le_bytes());
        let vid = vdupq_n_f32(id);
        let q: [int32x4_t; 8] = std::array::from_fn(|k| {
            let v = h[k / 2];
            let v = if k % 2 == 0 {
                vget_low_u16(v)
            } else {
                vget_high_u16(v)
            };
            // Finite: |v| <= amax, so |v * id| is at most about 127.
            let x = vminq_f32(vmaxq_f32(vmulq_f32(f16x4_to_f32x4(v), vid), lo), hi);
            // trunc(x + copysign(0.49999997, x)): see `round_q8` in `scalar/requant.rs`.
            vcvtq_s32_f32(vaddq_f32(x, vbslq_f32(sign, x, half)))
        });
        let q16: [int16x8_t; 4] =
            std::array::from_fn(|k| vmovn_high_s32(vmovn_s32(q[2 * k]), q[2 * k + 1]));
        let q8 = int8x16x2_t(
            vmovn_high_s16(vmovn_s16(q16[0]), q16[1]),
            vmovn_high_s16(vmovn_s16(q16[2]), q16[3]),
        );
        // SAFETY: `qs` holds the block's 32 quant bytes.
        unsafe { vst1q_s8_x2(qs.as_mut_ptr().cast(), q8) };
    }
}
