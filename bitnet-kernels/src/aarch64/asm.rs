//! One-instruction wrappers for AArch64 instructions that `std::arch` has no stable
//! intrinsic for (Rust 1.95: `vdotq_s32` and `vmmlaq_s32` are behind the unstable
//! `stdarch_neon_dotprod` / `stdarch_neon_i8mm` features, and the f16 vector types behind
//! `stdarch_neon_f16`). Each is `#[inline(always)]` so it lands inside the calling kernel,
//! whose `#[target_feature]` must cover the instruction.
//!
//! The f16 conversions follow the FPCR's rounding mode, round-to-nearest-even unless a
//! program changes it, which is what [`crate::layout::half::f32_to_f16`] does.

#![allow(dead_code)]

use std::arch::aarch64::{float32x4_t, int8x16_t, int32x4_t, uint16x4_t};
use std::arch::asm;

/// `acc + ` the four dot products of the signed byte quads of `a` and `b` (`SDOT`).
///
/// # Safety
/// The CPU must have FEAT_DotProd (the caller's token proves it).
#[inline(always)]
pub(crate) unsafe fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut r = acc;
    // SAFETY: pure register arithmetic; the caller guarantees the instruction exists.
    unsafe {
        asm!(
            "sdot {0:v}.4s, {1:v}.16b, {2:v}.16b",
            inout(vreg) r,
            in(vreg) a,
            in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    r
}

/// `acc + ` the dot products of the four signed byte quads of `a` (lane `i`: bytes
/// `4i..4i + 4`) with quad `L` of `b` (bytes `4L..4L + 4`), the same quad for every lane
/// (`SDOT` by element).
///
/// # Safety
/// The CPU must have FEAT_DotProd (the caller's token proves it).
#[inline(always)]
pub(crate) unsafe fn sdot_lane<const L: i32>(
    acc: int32x4_t,
    a: int8x16_t,
    b: int8x16_t,
) -> int32x4_t {
    const { assert!(L >= 0 && L < 4) };
    let mut r = acc;
    // SAFETY: pure register arithmetic; the caller guarantees the instruction exists.
    unsafe {
        asm!(
            "sdot {0:v}.4s, {1:v}.16b, {2:v}.4b[{l}]",
            inout(vreg) r,
            in(vreg) a,
            in(vreg) b,
            l = const L,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    r
}

/// Asks for the cache line of `p` to be brought into L1 (`PRFM PLDL1KEEP`): a hint, which
/// reads nothing into the program and never faults, whatever the address.
#[inline(always)]
pub(crate) fn prefetch_l1(p: *const u8) {
    // SAFETY: `PRFM` is a hint in the AArch64 base ISA: it cannot fault or change memory.
    unsafe {
        asm!(
            "prfm pldl1keep, [{0}]",
            in(reg) p,
            options(nostack, readonly, preserves_flags)
        )
    };
}

/// `acc + A * B^T` with `a` the 2x8 signed bytes of A (row-major) and `b` the 2x8 of B:
/// lanes `[a0.b0, a0.b1, a1.b0, a1.b1]` (`SMMLA`).
///
/// # Safety
/// The CPU must have FEAT_I8MM (the caller's token proves it).
#[inline(always)]
pub(crate) unsafe fn smmla(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut r = acc;
    // SAFETY: pure register arithmetic; the caller guarantees the instruction exists.
    unsafe {
        asm!(
            "smmla {0:v}.4s, {1:v}.16b, {2:v}.16b",
            inout(vreg) r,
            in(vreg) a,
            in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    r
}

/// Four f16 bit patterns widened to f32, exactly (`FCVTL`, ARMv8-A base).
#[inline(always)]
pub(crate) fn f16x4_to_f32x4(h: uint16x4_t) -> float32x4_t {
    let r: float32x4_t;
    // SAFETY: pure register arithmetic in the AArch64 base ISA.
    unsafe {
        asm!(
            "fcvtl {0:v}.4s, {1:v}.4h",
            out(vreg) r,
            in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    r
}

/// Four f32 narrowed to f16 bit patterns, rounded to nearest even (`FCVTN`, ARMv8-A base).
#[inline(always)]
pub(crate) fn f32x4_to_f16x4(x: float32x4_t) -> uint16x4_t {
    let r: uint16x4_t;
    // SAFETY: pure register arithmetic in the AArch64 base ISA.
    unsafe {
        asm!(
            "fcvtn {0:v}.4h, {1:v}.4s",
            out(vreg) r,
            in(vreg) x,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    r
}
