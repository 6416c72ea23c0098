//! f16 reads shared by the AArch64 attention and KV kernels: eight f16 bit patterns widened
//! to two f32x4 (`FCVTL` + `FCVTL2`, so a 16-byte load feeds both halves without moving the
//! upper half down first), an f16 scale broadcast to four lanes, and four rows' f16 scales
//! gathered into one vector (`LD1` by lane). Every conversion is exact (f16 -> f32 is).

#![allow(dead_code)]

use std::arch::aarch64::*;
use std::arch::asm;

use super::asm::f16x4_to_f32x4;

/// The upper four f16 of `h` widened to f32 (`FCVTL2`, ARMv8-A base).
#[inline(always)]
pub(crate) fn f16x8_high_to_f32x4(h: uint16x8_t) -> float32x4_t {
    let r: float32x4_t;
    // SAFETY: pure register arithmetic in the AArch64 base ISA.
    unsafe {
        asm!(
            "fcvtl2 {0:v}.4s, {1:v}.8h",
            out(vreg) r,
            in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    r
}

/// Eight f16 bit patterns as two f32x4 (lanes 0..4, 4..8).
#[inline(always)]
pub(crate) fn f16x8_to_f32(h: uint16x8_t) -> [float32x4_t; 2] {
    // SAFETY: `vget_low_u16` is register renaming (NEON is part of every AArch64 target).
    let lo = unsafe { vget_low_u16(h) };
    [f16x4_to_f32x4(lo), f16x8_high_to_f32x4(h)]
}

/// The little-endian f16 at `p` as f32 in all four lanes.
///
/// # Safety
/// Two bytes at `p` must be readable.
#[inline(always)]
pub(crate) unsafe fn f16_splat(p: *const u8) -> float32x4_t {
    // SAFETY: the caller guarantees the two bytes; `LD1R` has no alignment requirement.
    f16x4_to_f32x4(unsafe { vld1_dup_u16(p.cast()) })
}

/// The little-endian f16s at `p[0]`..`p[3]`, one per lane, as f32.
///
/// # Safety
/// Two bytes at each pointer must be readable.
#[inline(always)]
pub(crate) unsafe fn f16_lanes(p: [*const u8; 4]) -> float32x4_t {
    // SAFETY: the caller guarantees the bytes; `LD1` by lane has no alignment requirement.
    unsafe {
        let h = vld1_dup_u16(p[0].cast());
        let h = vld1_lane_u16::<1>(p[1].cast(), h);
        let h = vld1_lane_u16::<2>(p[2].cast(), h);
        f16x4_to_f32x4(vld1_lane_u16::<3>(p[3].cast(), h))
    }
}
