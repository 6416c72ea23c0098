//! NEON attention kernels of the low-bit KV formats (`crate::layout::kv`). A format is a const
//! parameter of one kernel shape: each 16-value half of a block is decoded in registers into
//! the same exact values the scalar reference uses (`s_b * vals[j]`, one `FMUL`), then scored
//! against (or summed into) the `G` query heads of a GQA group, so each row is decoded once
//! per group. Group sizes 1, 2, 4 and 8 have kernels; others run one head at a time.
//!
//! Decoding, per 16 values: Q8_0 / Q8R codes `SXTL`x2 + `SCVTF`; Q4_0 nibbles `AND` / `USHR`,
//! less 8, then as Q8_0; FP8 E4M3 codes sign-extended and shifted into an f32's sign,
//! exponent and top mantissa bits (`SSHLL` #4, `SHLL` #16, one `AND` leaves sign | code<<20)
//! and scaled by 2^120 (exact, subnormal codes included), as `e4m3_to_f32`; B1 sign bits
//! tested per lane (`CMTST`) and selected between `s` and `-s` (`BSL`).
//!
//! Q4_0 weighted sums take the integer-weighted kernel of `kv_q4_wsum.rs` (the reference's
//! bits); Q4_0 scores against a float query are decoded here.

// acc[h][j] pairs head h with lane group j; index loops say that more plainly than zips.
#![allow(clippy::needless_range_loop)]

use std::arch::aarch64::*;

use crate::aarch64::half::f16_splat;
use crate::layout::kv::{B1_BLOCK_BYTES, FP8_BLOCK_BYTES, KvQuant, Q8R_SCALE_BYTES, QK_KV};
use crate::layout::rows::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES};
use crate::prefetch::prefetch_lines;

const Q8R: u8 = 0;
const FP8: u8 = 1;
const Q40: u8 = 2;
const B1: u8 = 3;
const Q80: u8 = 4;

/// Sixteen signed bytes as four f32x4 (exact).
#[inline]
#[target_feature(enable = "neon")]
fn i8x16_to_f32(x: int8x16_t) -> [float32x4_t; 4] {
    let (lo, hi) = (vmovl_s8(vget_low_s8(x)), vmovl_high_s8(x));
    [
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))),
        vcvtq_f32_s32(vmovl_high_s16(lo)),
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))),
        vcvtq_f32_s32(vmovl_high_s16(hi)),
    ]
}

/// Half `half` (values `16 half..16 half + 16`) of block `b` of the row at `row`, decoded:
/// `s_b * vals[j]` as four vectors, the same products (bit for bit) as the scalar
/// reference's `decoded_block`.
///
/// # Safety
/// Block `b` of the row (and for Q8R the row's scale) must be readable.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn half_block<const F: u8>(row: *const u8, b: usize, half: usize) -> [float32x4_t; 4] {
    // SAFETY: every load below stays inside block b, or reads the row's leading scale
    // (the caller's contract).
    let (s, v) = unsafe {
        match F {
            Q80 => {
                let blk = row.add(Q8_0_BLOCK_BYTES * b);
                let x = vld1q_s8(blk.add(2 + 16 * half).cast());
                (f16_splat(blk), i8x16_to_f32(x))
            }
            Q8R => {
                let s = vld1q_dup_f32(row.cast());
                let x = vld1q_s8(row.add(Q8R_SCALE_BYTES + QK_KV * b + 16 * half).cast());
                (s, i8x16_to_f32(x))
            }
            FP8 => {
                let blk = row.add(FP8_BLOCK_BYTES * b);
                let c = vld1q_s8(blk.add(2 + 16 * half).cast());
                // sext(c) << 20 keeps the sign in bit 31 and the code's low 7 bits in bits
                // 20..27; the mask drops the sign extension between them.
                let lo = vshll_n_s8::<4>(vget_low_s8(c));
                let hi = vshll_high_n_s8::<4>(c);
                let mask = vdupq_n_u32(0x87f0_0000);
                let pow = vdupq_n_f32(f32::from_bits((127 + 120) << 23));
                let w = [
                    vshll_n_s16::<16>(vget_low_s16(lo)),
                    vshll_high_n_s16::<16>(lo),
                    vshll_n_s16::<16>(vget_low_s16(hi)),
                    vshll_high_n_s16::<16>(hi),
                ];
                let v = w.map(|x| {
                    let bits = vandq_u32(vreinterpretq_u32_s32(x), mask);
                    vmulq_f32(vreinterpretq_f32_u32(bits), pow)
                });
                (f16_splat(blk), v)
            }
            Q40 => {
                let blk = row.add(Q4_0_BLOCK_BYTES * b);
                let x = vld1q_u8(blk.add(2));
                let n = if half == 0 {
                    vandq_u8(x, vdupq_n_u8(0x0f))
                } else {
                    vshrq_n_u8::<4>(x)
                };
                let n = vsubq_s8(vreinterpretq_s8_u8(n), vdupq_n_s8(8));
                (f16_splat(blk), i8x16_to_f32(n))
            }
            _ => {
                let blk = row.add(B1_BLOCK_BYTES * b);
                let bits = blk.add(2).cast::<u32>().read_unaligned() >> (16 * half);
                let s = f16_splat(blk);
                let ns = vnegq_f32(s);
                let wv = vdupq_n_u32(bits);
                let lanes: [u32; 4] = [1, 2, 4, 8];
                let lanes = vld1q_u32(lanes.as_ptr());
                // s * (+1 or -1) is +s or -s exactly.
                let v = [0, 4, 8, 12].map(|i| {
                    let set = vtstq_u32(wv, vshlq_u32(lanes, vdupq_n_s32(i)));
                    vbslq_f32(set, s, ns)
                });
                return v;
            }
        }
    };
    v.map(|x| vmulq_f32(s, x))
}

/// Rows ahead of the one being read whose lines are prefetched.
const PREFETCH_ROWS: usize = 16;

/// Positions the weighted sum reads per tile: every pass over a tile finds its rows in
/// L1/L2, so memory sees each row once.
const WSUM_TILE: usize = 64;

/// The bytes of a head's row of format `F` with `d` values.
#[inline(always)]
const fn row_bytes<const F: u8>(d: usize) -> usize {
    let nb = d / QK_KV;
    match F {
        Q80 => nb * Q8_0_BLOCK_BYTES,
        Q8R => Q8R_SCALE_BYTES + d,
        FP8 => nb * FP8_BLOCK_BYTES,
        Q40 => nb * Q4_0_BLOCK_BYTES,
        _ => nb * B1_BLOCK_BYTES,
    }
}

/// Scores of `G` heads (`q` is `[G][d]`) against `n_pos` rows; `out` is `[G][n_pos]`. Two
/// accumulators per head keep the FMA chains short.
///
/// # Safety
/// NEON; shapes as the safe API checks them.
#[target_feature(enable = "neon")]
unsafe fn scores_g<const F: u8, const G: usize>(
    q: &[f32],
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let d = q.len() / G;
    let nb = d / QK_KV;
    let rb = row_bytes::<F>(d);
    for p in 0..n_pos {
        prefetch_lines(k, (p + PREFETCH_ROWS) * kv_stride, rb.div_ceil(64));
        // SAFETY: row p < n_pos lies inside k and q holds G d floats (checked by the safe API).
        unsafe {
            let row = k.as_ptr().add(p * kv_stride);
            let mut acc = [[vdupq_n_f32(0.0); 2]; G];
            for b in 0..nb {
                for half in 0..2 {
                    let x = half_block::<F>(row, b, half);
                    for h in 0..G {
                        let qp = q.as_ptr().add(h * d + QK_KV * b + 16 * half);
                        for i in 0..4 {
                            let a = &mut acc[h][i % 2];
                            *a = vfmaq_f32(*a, vld1q_f32(qp.add(4 * i)), x[i]);
                        }
                    }
                }
            }
            for h in 0..G {
                out[h * n_pos + p] = scale * vaddvq_f32(vaddq_f32(acc[h][0], acc[h][1]));
            }
        }
    }
}

/// `out[h] += Σ_p w[h][p] v_p` for `G <= 4` heads: a whole block (32 lanes) per pass for
/// one or two heads, a half block (16 lanes) for four (16 accumulators either way). Every
/// lane adds its positions in order onto its starting value, so the bits depend neither on
/// the tiling nor on how positions are split into calls.
///
/// # Safety
/// NEON; shapes as the safe API checks them.
#[target_feature(enable = "neon")]
unsafe fn wsum_g<const F: u8, const G: usize>(
    w: &[f32],
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let d = out.len() / G;
    let nb = d / QK_KV;
    let rb = row_bytes::<F>(d);
    let halves: usize = if G <= 2 { 2 } else { 1 };
    let mut p0 = 0;
    while p0 < n_pos {
        let tile = p0..(p0 + WSUM_TILE).min(n_pos);
        for b in 0..nb {
            for half0 in (0..2).step_by(halves) {
                let lane0 = QK_KV * b + 16 * half0;
                // SAFETY: lanes lane0..lane0 + 16 * halves lie below d of every head's row.
                let mut acc: [[float32x4_t; 8]; G] = std::array::from_fn(|h| unsafe {
                    let o = out.as_ptr().add(h * d + lane0);
                    std::array::from_fn(|i| {
                        if i < 4 * halves {
                            vld1q_f32(o.add(4 * i))
                        } else {
                            vdupq_n_f32(0.0)
                        }
                    })
                });
                for p in tile.clone() {
                    if lane0 == 0 {
                        prefetch_lines(v, (p + PREFETCH_ROWS) * kv_stride, rb.div_ceil(64));
                    }
                    let row = v.as_ptr().wrapping_add(p * kv_stride);
                    // SAFETY: row p < n_pos lies inside v (checked by the safe API).
                    let x0 = unsafe { half_block::<F>(row, b, half0) };
                    let x1 = if halves == 2 {
                        // SAFETY: as above.
                        unsafe { half_block::<F>(row, b, 1) }
                    } else {
                        x0
                    };
                    let x = [x0[0], x0[1], x0[2], x0[3], x1[0], x1[1], x1[2], x1[3]];
                    for h in 0..G {
                        let c = w[h * n_pos + p];
                        for i in 0..4 * halves {
                            acc[h][i] = vfmaq_n_f32(acc[h][i], x[i], c);
                        }
                    }
                }
                for h in 0..G {
                    for i in 0..4 * halves {
                        // SAFETY: as for the loads.
                        unsafe {
                            vst1q_f32(out.as_mut_ptr().add(h * d + lane0 + 4 * i), acc[h][i])
                        };
                    }
                }
            }
        }
        p0 = tile.end;
    }
}

/// [`wsum_g`] for eight heads: two passes of four (16 accumulators each).
///
/// # Safety
/// As [`wsum_g`].
#[target_feature(enable = "neon")]
unsafe fn wsum_8<const F: u8>(
    w: &[f32],
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let d = out.len() / 8;
    let (w0, w1) = w.split_at(4 * n_pos);
    let (o0, o1) = out.split_at_mut(4 * d);
    // SAFETY: each half of the group has the checked shape of a group of four.
    unsafe {
        wsum_g::<F, 4>(w0, v, kv_stride, n_pos, o0);
        wsum_g::<F, 4>(w1, v, kv_stride, n_pos, o1);
    }
}

type ScoresKernel = unsafe fn(&[f32], &[u8], usize, usize, f32, &mut [f32]);
type WsumKernel = unsafe fn(&[f32], &[u8], usize, usize, &mut [f32]);

/// The kernels of format `F` for a group of `g` heads, if there are any.
fn kernels<const F: u8>(g: usize) -> Option<(ScoresKernel, WsumKernel)> {
    Some(match g {
        1 => (scores_g::<F, 1>, wsum_g::<F, 1>),
        2 => (scores_g::<F, 2>, wsum_g::<F, 2>),
        4 => (scores_g::<F, 4>, wsum_g::<F, 4>),
        8 => (scores_g::<F, 8>, wsum_8::<F>),
        _ => return None,
    })
}

fn kernels_of(fmt: KvQuant, g: usize) -> Option<(ScoresKernel, WsumKernel)> {
    match fmt {
        KvQuant::Q8_0 => kernels::<Q80>(g),
        KvQuant::Q8R => kernels::<Q8R>(g),
        KvQuant::Fp8 => kernels::<FP8>(g),
        KvQuant::Q4_0 => kernels::<Q40>(g),
        KvQuant::B1 => kernels::<B1>(g),
    }
}

/// `attn_scores` of `scalar/kv.rs`.
///
/// # Safety
/// The CPU must support NEON; shapes checked by the safe API.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn attn_scores(
    fmt: KvQuant,
    q: &[f32],
    n_q: usize,
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    if let Some((f, _)) = kernels_of(fmt, n_q) {
        // SAFETY: the caller guarantees the CPU features and the shapes.
        unsafe { f(q, k, kv_stride, n_pos, scale, out) };
        return;
    }
    let (f, _) = kernels_of(fmt, 1).expect("a one-head kernel for every format");
    let d = q.len() / n_q;
    for h in 0..n_q {
        let (qh, oh) = (&q[h * d..][..d], &mut out[h * n_pos..][..n_pos]);
        // SAFETY: one head of the checked group has the checked shape.
        unsafe { f(qh, k, kv_stride, n_pos, scale, oh) };
    }
}

/// `attn_weighted_sum` of `scalar/kv.rs` (Q4_0: the integer-weighted sum of
/// `kv_q4_wsum.rs`, the reference's bits).
///
/// # Safety
/// As [`attn_scores`].
pub(crate) unsafe fn attn_weighted_sum(
    fmt: KvQuant,
    w: &[f32],
    n_q: usize,
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    if fmt == KvQuant::Q4_0 {
        // SAFETY: the caller guarantees the CPU features and the shapes.
        return unsafe { super::kv_q4_wsum::wsum_q4_0(w, n_q, v, kv_stride, n_pos, out) };
    }
    if let Some((_, f)) = kernels_of(fmt, n_q) {
        // SAFETY: the caller guarantees the CPU features and the shapes.
        unsafe { f(w, v, kv_stride, n_pos, out) };
        return;
    }
    let (_, f) = kernels_of(fmt, 1).expect("a one-head kernel for every format");
    let d = out.len() / n_q;
    for h in 0..n_q {
        let (wh, oh) = (&w[h * n_pos..][..n_pos], &mut out[h * d..][..d]);
        // SAFETY: one head of the checked group has the checked shape.
        unsafe { f(wh, v, kv_stride, n_pos, oh) };
    }
}
