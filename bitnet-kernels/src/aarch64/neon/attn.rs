//! NEON attention of one query head over one KV head of an f16, f32 or Q8_0 cache: the
//! names and contracts of `scalar/attn.rs`.
//!
//! f16 and f32 caches share one kernel shape (the element type a parameter): f16 rows are
//! widened with `FCVTL`/`FCVTL2` (exact) and then go through the same `FMLA`s as f32 rows, so
//! the two caches give the same bits for the same values. Scores take four positions per
//! pass against one load of the query, two accumulators each (eight independent FMA chains);
//! the weighted sums keep up to 32 output lanes in registers while a tile of positions
//! streams past, each lane summing its positions in order (`out` is the starting value), so a
//! cache walked block by block gives the bits of one pass. Q8_0 codes are widened
//! (`SXTL`x2, `SCVTF`) and scaled once per block, as `x86_64/avx2/attn.rs` does.

// acc[j] pairs with the j-th row or lane group; index loops say that more plainly.
#![allow(clippy::needless_range_loop)]

use std::arch::aarch64::*;

use crate::aarch64::half::{f16_splat, f16x8_to_f32};
use crate::extent::holds_strided;
use crate::layout::rows::Q8_0_BLOCK_BYTES;
use crate::prefetch::prefetch_lines;

/// A cache element the f16/f32 kernels read as f32.
trait Elem: Copy {
    const ZERO: Self;
    /// Eight elements at `p` as two f32x4.
    ///
    /// # Safety
    /// Eight elements at `p` readable.
    unsafe fn load8(p: *const Self) -> [float32x4_t; 2];
    /// Four elements at `p`.
    ///
    /// # Safety
    /// Four elements at `p` readable.
    unsafe fn load4(p: *const Self) -> float32x4_t;
}

impl Elem for u16 {
    const ZERO: Self = 0;
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> [float32x4_t; 2] {
        // SAFETY: the caller guarantees eight readable elements.
        f16x8_to_f32(unsafe { vld1q_u16(p) })
    }
    #[inline(always)]
    unsafe fn load4(p: *const Self) -> float32x4_t {
        // SAFETY: the caller guarantees four readable elements.
        crate::aarch64::asm::f16x4_to_f32x4(unsafe { vld1_u16(p) })
    }
}

impl Elem for f32 {
    const ZERO: Self = 0.0;
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> [float32x4_t; 2] {
        // SAFETY: the caller guarantees eight readable elements.
        unsafe { [vld1q_f32(p), vld1q_f32(p.add(4))] }
    }
    #[inline(always)]
    unsafe fn load4(p: *const Self) -> float32x4_t {
        // SAFETY: the caller guarantees four readable elements.
        unsafe { vld1q_f32(p) }
    }
}

/// The last `n < 4` elements at `p`, zero-padded to four lanes.
///
/// # Safety
/// `n` elements at `p` readable.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn load_tail<E: Elem>(p: *const E, n: usize) -> float32x4_t {
    let mut buf = [E::ZERO; 4];
    // SAFETY: n < 4 elements at p (the caller's contract) into a buffer of 4.
    unsafe {
        std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n);
        E::load4(buf.as_ptr())
    }
}

/// `dot(q, row_j)` for the `R` rows at `rows` (`d = q.len()` elements each): 8 lanes a step
/// into two accumulators per row, a 4-lane step, then the last `d % 4` lanes zero-padded.
///
/// # Safety
/// NEON; `d` elements readable at each row.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn dots<E: Elem, const R: usize>(q: &[f32], rows: [*const E; R]) -> [f32; R] {
    let d = q.len();
    let qp = q.as_ptr();
    let mut a0 = [vdupq_n_f32(0.0); R];
    let mut a1 = [vdupq_n_f32(0.0); R];
    let mut c = 0;
    // SAFETY: every load below reads lanes c..c + 8 (or + 4, or the tail) < d of q and of
    // each row (the caller's contract).
    unsafe {
        while c + 8 <= d {
            let (q0, q1) = (vld1q_f32(qp.add(c)), vld1q_f32(qp.add(c + 4)));
            for j in 0..R {
                let k = E::load8(rows[j].add(c));
                a0[j] = vfmaq_f32(a0[j], q0, k[0]);
                a1[j] = vfmaq_f32(a1[j], q1, k[1]);
            }
            c += 8;
        }
        if c + 4 <= d {
            let q0 = vld1q_f32(qp.add(c));
            for j in 0..R {
                a0[j] = vfmaq_f32(a0[j], q0, E::load4(rows[j].add(c)));
            }
            c += 4;
        }
        if c < d {
            let q0 = load_tail(qp.add(c), d - c);
            for j in 0..R {
                a1[j] = vfmaq_f32(a1[j], q0, load_tail(rows[j].add(c), d - c));
            }
        }
    }
    std::array::from_fn(|j| vaddvq_f32(vaddq_f32(a0[j], a1[j])))
}

/// Positions ahead whose rows the score and sum walks ask to be fetched.
const PREFETCH_POS: usize = 8;

/// Asks for the row of position `p` (of `rb` bytes) if it exists.
#[inline(always)]
fn prefetch_row<E>(k: &[E], p: usize, kv_stride: usize, rb: usize) {
    // SAFETY: the slice's bytes viewed as bytes (same allocation, same length in bytes).
    let bytes = unsafe { std::slice::from_raw_parts(k.as_ptr().cast::<u8>(), size_of_val(k)) };
    prefetch_lines(bytes, p * kv_stride * size_of::<E>(), rb.div_ceil(64));
}

/// `out[p] = scale * dot(q, k_p)` for `p < n_pos`, four positions a pass.
///
/// # Safety
/// NEON. The cache extent is checked here.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn scores<E: Elem>(
    q: &[f32],
    k: &[E],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let d = q.len();
    assert!(out.len() >= n_pos && holds_strided(k.len(), n_pos, kv_stride, d));
    let row = |p: usize| k.as_ptr().wrapping_add(p * kv_stride);
    let rb = d * size_of::<E>();
    let mut p = 0;
    while p + 4 <= n_pos {
        for j in 0..4 {
            prefetch_row(k, p + PREFETCH_POS + j, kv_stride, rb);
        }
        // SAFETY: positions p..p + 4 < n_pos lie inside k (checked above).
        let s = unsafe { dots::<E, 4>(q, [row(p), row(p + 1), row(p + 2), row(p + 3)]) };
        for j in 0..4 {
            out[p + j] = scale * s[j];
        }
        p += 4;
    }
    while p < n_pos {
        // SAFETY: position p < n_pos lies inside k (checked above).
        out[p] = scale * unsafe { dots::<E, 1>(q, [row(p)]) }[0];
        p += 1;
    }
}

/// Positions a weighted sum pass walks per tile: each row's lines are read from memory once
/// for all the passes over the output lanes.
const WSUM_TILE: usize = 64;

/// One pass of the weighted sum over `4 NV` output lanes from `c`, positions `t`.
///
/// # Safety
/// NEON; lanes `c..c + 4 NV <= out.len()` of each position in `t` readable at `v`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn wsum_pass<E: Elem, const NV: usize>(
    w: &[f32],
    v: *const E,
    kv_stride: usize,
    t: std::ops::Range<usize>,
    c: usize,
    out: &mut [f32],
) {
    let o = out.as_mut_ptr().wrapping_add(c);
    // SAFETY: lanes c..c + 4 NV lie inside out (the caller's contract).
    let mut acc: [float32x4_t; NV] = std::array::from_fn(|j| unsafe { vld1q_f32(o.add(4 * j)) });
    for p in t {
        let wp = w[p];
        let row = v.wrapping_add(p * kv_stride + c);
        let mut j = 0;
        while j + 2 <= NV {
            // SAFETY: lanes c + 4 j..c + 4 j + 8 of position p (the caller's contract).
            let x = unsafe { E::load8(row.add(4 * j)) };
            acc[j] = vfmaq_n_f32(acc[j], x[0], wp);
            acc[j + 1] = vfmaq_n_f32(acc[j + 1], x[1], wp);
            j += 2;
        }
        if j < NV {
            // SAFETY: as above, four lanes.
            acc[j] = vfmaq_n_f32(acc[j], unsafe { E::load4(row.add(4 * j)) }, wp);
        }
    }
    for j in 0..NV {
        // SAFETY: as for the loads.
        unsafe { vst1q_f32(o.add(4 * j), acc[j]) };
    }
}

/// `out += Σ_p w[p] v_p`; every lane adds its positions in order onto its starting value.
///
/// # Safety
/// NEON. The cache extent is checked here.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn weighted_sum<E: Elem>(
    w: &[f32],
    v: &[E],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let d = out.len();
    assert!(w.len() >= n_pos && holds_strided(v.len(), n_pos, kv_stride, d));
    let full = d - d % 4;
    let vp = v.as_ptr();
    let mut t0 = 0;
    while t0 < n_pos {
        let t = t0..(t0 + WSUM_TILE).min(n_pos);
        let mut c = 0;
        while c < full {
            let left = (full - c) / 4;
            // SAFETY: the pass's lanes lie below full <= d of every position of the tile,
            // inside v (checked above), and inside out.
            unsafe {
                if left >= 8 {
                    wsum_pass::<E, 8>(w, vp, kv_stride, t.clone(), c, out);
                    c += 32;
                } else if left >= 4 {
                    wsum_pass::<E, 4>(w, vp, kv_stride, t.clone(), c, out);
                    c += 16;
                } else if left >= 2 {
                    wsum_pass::<E, 2>(w, vp, kv_stride, t.clone(), c, out);
                    c += 8;
                } else {
                    wsum_pass::<E, 1>(w, vp, kv_stride, t.clone(), c, out);
                    c += 4;
                }
            }
        }
        if full < d {
            let n = d - full;
            let mut o = [0.0f32; 4];
            o[..n].copy_from_slice(&out[full..]);
            // SAFETY: o holds 4 floats.
            let mut acc = unsafe { vld1q_f32(o.as_ptr()) };
            for p in t.clone() {
                // SAFETY: the n tail lanes of position p lie inside v (checked above).
                let x = unsafe { load_tail(vp.add(p * kv_stride + full), n) };
                acc = vfmaq_n_f32(acc, x, w[p]);
            }
            // SAFETY: o holds 4 floats.
            unsafe { vst1q_f32(o.as_mut_ptr(), acc) };
            out[full..].copy_from_slice(&o[..n]);
        }
        t0 = t.end;
    }
}

/// `attn_scores_f16` of `scalar/attn.rs`.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn attn_scores_f16(
    q: &[f32],
    k: &[u16],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    // SAFETY: NEON is enabled here; the walk checks the cache extent.
    unsafe { scores(q, k, kv_stride, n_pos, scale, out) }
}

/// `attn_weighted_sum_f16` of `scalar/attn.rs`.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn attn_weighted_sum_f16(
    w: &[f32],
    v: &[u16],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    // SAFETY: NEON is enabled here; the walk checks the cache extent.
    unsafe { weighted_sum(w, v, kv_stride, n_pos, out) }
}

/// `attn_scores_f32` of `scalar/attn.rs`.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn attn_scores_f32(
    q: &[f32],
    k: &[f32],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    // SAFETY: NEON is enabled here; the walk checks the cache extent.
    unsafe { scores(q, k, kv_stride, n_pos, scale, out) }
}

/// `attn_weighted_sum_f32` of `scalar/attn.rs`.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn attn_weighted_sum_f32(
    w: &[f32],
    v: &[f32],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    // SAFETY: NEON is enabled here; the walk checks the cache extent.
    unsafe { weighted_sum(w, v, kv_stride, n_pos, out) }
}

/// The 32 codes of the Q8_0 block at `blk` as eight f32x4 (exact).
///
/// # Safety
/// The block's 34 bytes readable.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn q8_codes(blk: *const u8) -> [float32x4_t; 8] {
    // SAFETY: bytes 2..34 of the block (the caller's contract).
    let x = unsafe { [vld1q_s8(blk.add(2).cast()), vld1q_s8(blk.add(18).cast())] };
    let h = [
        vmovl_s8(vget_low_s8(x[0])),
        vmovl_high_s8(x[0]),
        vmovl_s8(vget_low_s8(x[1])),
        vmovl_high_s8(x[1]),
    ];
    std::array::from_fn(|i| {
        let w = if i % 2 == 0 {
            vmovl_s16(vget_low_s16(h[i / 2]))
        } else {
            vmovl_high_s16(h[i / 2])
        };
        vcvtq_f32_s32(w)
    })
}

/// `attn_scores_q8_0` of `scalar/attn.rs`: per block two chains of four FMAs against the
/// widened codes, then one FMA by the block's scale.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn attn_scores_q8_0(
    q: &[f32],
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let nb = q.len() / 32;
    let rb = nb * Q8_0_BLOCK_BYTES;
    assert!(out.len() >= n_pos && holds_strided(k.len(), n_pos, kv_stride, rb));
    for (p, o) in out.iter_mut().enumerate().take(n_pos) {
        prefetch_lines(k, (p + PREFETCH_POS) * kv_stride, rb.div_ceil(64));
        let mut acc = vdupq_n_f32(0.0);
        for b in 0..nb {
            // SAFETY: block b of position p < n_pos lies inside k (checked above); q holds
            // 32 nb floats.
            unsafe {
                let blk = k.as_ptr().add(p * kv_stride + b * Q8_0_BLOCK_BYTES);
                let v = q8_codes(blk);
                let qp = q.as_ptr().add(32 * b);
                let mut ta = vmulq_f32(vld1q_f32(qp), v[0]);
                let mut tb = vmulq_f32(vld1q_f32(qp.add(4)), v[1]);
                for j in (2..8).step_by(2) {
                    ta = vfmaq_f32(ta, vld1q_f32(qp.add(4 * j)), v[j]);
                    tb = vfmaq_f32(tb, vld1q_f32(qp.add(4 * j + 4)), v[j + 1]);
                }
                acc = vfmaq_f32(acc, vaddq_f32(ta, tb), f16_splat(blk));
            }
        }
        *o = scale * vaddvq_f32(acc);
    }
}

/// `attn_weighted_sum_q8_0` of `scalar/attn.rs`: a block's 32 output lanes in registers
/// while a tile of positions streams past, each adding `(w_p d_p) * code`.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn attn_weighted_sum_q8_0(
    w: &[f32],
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let nb = out.len() / 32;
    let rb = nb * Q8_0_BLOCK_BYTES;
    assert!(w.len() >= n_pos && holds_strided(v.len(), n_pos, kv_stride, rb));
    let mut t0 = 0;
    while t0 < n_pos {
        let t = t0..(t0 + WSUM_TILE).min(n_pos);
        for b in 0..nb {
            let o = out.as_mut_ptr().wrapping_add(32 * b);
            // Accumulate onto `out` (a cache walked block by block sums as one pass would).
            // SAFETY: out holds 32 nb floats.
            let mut acc: [float32x4_t; 8] =
                std::array::from_fn(|j| unsafe { vld1q_f32(o.add(4 * j)) });
            for p in t.clone() {
                if b == 0 {
                    prefetch_lines(v, (p + WSUM_TILE) * kv_stride, rb.div_ceil(64));
                }
                // SAFETY: block b of position p < n_pos lies inside v (checked above).
                unsafe {
                    let blk = v.as_ptr().add(p * kv_stride + b * Q8_0_BLOCK_BYTES);
                    let c = vmulq_n_f32(f16_splat(blk), w[p]);
                    let x = q8_codes(blk);
                    for j in 0..8 {
                        acc[j] = vfmaq_f32(acc[j], c, x[j]);
                    }
                }
            }
            for j in 0..8 {
                // SAFETY: out holds 32 nb floats.
                unsafe { vst1q_f32(o.add(4 * j), acc[j]) };
            }
        }
        t0 = t.end;
    }
}
