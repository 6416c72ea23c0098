//! The integer dot step of the AArch64 integer products, as a type parameter: one walk per op
//! (`int_walk/`) is written against [`DotStep`], and each tree picks the instructions
//! (llama.cpp swaps `ggml_vdotq_s32` the same way):
//!
//! - [`NeonStep`], the ARMv8-A baseline: `SMULL`/`SMLAL2` byte products into i16 lanes, then
//!   `SADDLP`/`SADALP` pairwise into i32 lanes; for 1-bit rows, `AND` with the mask and
//!   pairwise adds, no multiply at all;
//! - [`SdotStep`], FEAT_DotProd: one `SDOT` per 16 byte pairs, four products into each i32.
//!
//! The two group the products into lanes differently (NEON lane `i` gets products `2i`,
//! `2i + 1`, `2i + 8` and `2i + 9`, `SDOT` lane `i` products `4i..4i + 4`), so the walks rely
//! only on the sum of an accumulator's four lanes, which both make exact.
//!
//! Every step is `#[inline(always)]` and carries no `#[target_feature]` of its own: it lands
//! in the tree's entry function, whose features must cover the instructions.

use std::arch::aarch64::*;

use crate::aarch64::asm::sdot;

/// The steps an integer walk is written with. Each adds to `acc` four i32 lanes whose sum is
/// the step's exact result. A [`DotStep::dot`] adds four products of at most 2^14 to each
/// lane (in either grouping), so the walks' 32-byte blocks (Q8_0 and the KV blocks, two steps
/// from a zero accumulator) stay far inside i32. A [`DotStep::select_word`] adds at most
/// 16 x 128 to a lane, and a 1-bit row has at most `crate::layout::ternary::MAX_COLS` (2^22) columns,
/// so a row's sum stays within 2^29.
pub(crate) trait DotStep: Copy {
    /// `acc` plus the dot of the 16 signed bytes of `a` with those of `b`, any values.
    ///
    /// # Safety
    /// The CPU has the step's features.
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;

    /// [`DotStep::dot`], exact only where no byte of `b` is -128, which lets NEON add two
    /// products in one i16 lane: `|a_i b_i| <= 128 * 127`, and two of them stay within `i16`
    /// (a -128 in `b` can wrap a NEON lane: a wrong sum, no undefined behaviour).
    ///
    /// # Safety
    /// As [`DotStep::dot`].
    unsafe fn dot_b127(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;

    /// `acc` plus the selected sum of one 64-column word of a 1-bit row: the bytes of `a[j]`
    /// where `masks[j]` is -1 (all bits set) rather than 0, in the sign [`DotStep::selected`]
    /// reads back.
    ///
    /// # Safety
    /// As [`DotStep::dot`].
    unsafe fn select_word(acc: int32x4_t, masks: &[int8x16_t; 4], a: [int8x16_t; 4]) -> int32x4_t;

    /// The selected sum of an accumulator of [`DotStep::select_word`]s.
    fn selected(acc: int32x4_t) -> i32;
}

/// The ARMv8-A baseline step (NEON is mandatory on AArch64).
#[derive(Clone, Copy)]
pub(crate) struct NeonStep;

impl DotStep for NeonStep {
    #[inline(always)]
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // -128 x -128 = 2^14 fits an i16 lane alone, not two of them: one product per lane.
        // SAFETY: register arithmetic in NEON, which every AArch64 target has.
        unsafe {
            let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
            vpadalq_s16(vpadalq_s16(acc, lo), vmull_high_s8(a, b))
        }
    }

    #[inline(always)]
    unsafe fn dot_b127(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: register arithmetic in NEON, which every AArch64 target has.
        unsafe {
            let pairs = vmlal_high_s8(vmull_s8(vget_low_s8(a), vget_low_s8(b)), a, b);
            vpadalq_s16(acc, pairs)
        }
    }

    #[inline(always)]
    unsafe fn select_word(acc: int32x4_t, masks: &[int8x16_t; 4], a: [int8x16_t; 4]) -> int32x4_t {
        // The word's 64 bytes in one i16 set: a lane gains at most 4 * 2 * 128.
        // SAFETY: register arithmetic in NEON, which every AArch64 target has.
        unsafe {
            let s = vpaddlq_s8(vandq_s8(masks[0], a[0]));
            let s = vpadalq_s8(s, vandq_s8(masks[1], a[1]));
            let s = vpadalq_s8(s, vandq_s8(masks[2], a[2]));
            let s = vpadalq_s8(s, vandq_s8(masks[3], a[3]));
            vpadalq_s16(acc, s)
        }
    }

    #[inline(always)]
    fn selected(acc: int32x4_t) -> i32 {
        // SAFETY: register arithmetic in NEON, which every AArch64 target has.
        unsafe { vaddvq_s32(acc) }
    }
}

/// The FEAT_DotProd step.
#[derive(Clone, Copy)]
pub(crate) struct SdotStep;

impl DotStep for SdotStep {
    #[inline(always)]
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: the caller guarantees FEAT_DotProd.
        unsafe { sdot(acc, a, b) }
    }

    #[inline(always)]
    unsafe fn dot_b127(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: the caller guarantees FEAT_DotProd.
        unsafe { sdot(acc, a, b) }
    }

    #[inline(always)]
    unsafe fn select_word(acc: int32x4_t, masks: &[int8x16_t; 4], a: [int8x16_t; 4]) -> int32x4_t {
        // A mask byte is -1, so each SDOT adds minus the selected bytes: [`Self::selected`]
        // negates once per row instead of once per word.
        let mut acc = acc;
        for (&m, &x) in masks.iter().zip(&a) {
            // SAFETY: the caller guarantees FEAT_DotProd.
            acc = unsafe { sdot(acc, m, x) };
        }
        acc
    }

    #[inline(always)]
    fn selected(acc: int32x4_t) -> i32 {
        // SAFETY: register arithmetic in NEON, which every AArch64 target has.
        unsafe { vaddvq_s32(vnegq_s32(acc)) }
    }
}
