//! NEON weighted sum of Q4_0 values with integer weights (the specification:
//! `attn_weighted_sum_q4_0` in `scalar/kv_q4_wsum.rs`, bit for bit; the tile and the weight
//! rounding step are `crate::layout::kv`'s).
//!
//! Per 16-position tile, block and head, the products `c_p = w[h][p] * s_p,b` (the rows'
//! f16 block scales read by lane and widened with `FCVTL`) are rounded to integers of at most
//! 127 as the reference rounds them (`FMUL` by `127 / m`, `FCVTNS`: ties to even), and the
//! nibbles are multiplied as bytes: each position's 16 block bytes are split into low and
//! high nibbles (`AND`, `USHR`: the block's values 0-15 and 16-31 plus 8, as unsigned
//! bytes) once for the group, and each head adds `k_p * nibble` into 32 i16 lanes with
//! `SMLAL`/`SMLAL2` against its weight broadcast (`LD1R`). 16 products of at most
//! 15 x 127 stay below 2^15; the 8 the nibbles carry comes off once per tile as `8 Σ k`,
//! and the exact sum is widened (`SXTL`, `SCVTF`) and added with one `FMLA` by the step
//! `m / 127`. No gathers here, so rows any distance apart are taken.

// acc[h][i] pairs head h with lane group i; index loops say that more plainly.
#![allow(clippy::needless_range_loop)]

use std::arch::aarch64::*;

use crate::aarch64::half::f16x8_to_f32;
use crate::layout::kv::{Q4_0_WSUM_TILE, QK_KV, q4_0_wsum_step};
use crate::layout::rows::Q4_0_BLOCK_BYTES;
use crate::prefetch::prefetch_lines;

const TILE: usize = Q4_0_WSUM_TILE;
/// Heads whose accumulators (4 x 8 i16 lanes each) a pass keeps in registers.
const HEADS: usize = 4;
const _: () = assert!(
    TILE == 16,
    "the kernel holds a tile's weights as four vectors of 4 lanes"
);

/// The integer weights of the products `c` (lanes past the tile's positions hold 0) into
/// `bytes` (`k[p]` at byte `p`; zeros when the tile adds nothing), with the step they count
/// in and `8 Σ k`, as the reference's `q4_0_wsum_weights` gives them; `None` when the tile
/// adds nothing, a NaN step when a product is not finite.
#[inline]
#[target_feature(enable = "neon")]
fn tile_weights(c: [float32x4_t; 4], bytes: &mut [i8; TILE]) -> Option<(f32, i16)> {
    *bytes = [0; TILE];
    let a = c.map(|x| vabsq_f32(x));
    let lim = vdupq_n_f32(f32::MAX);
    // NaN and ±inf compare false: a product that is not finite makes the step NaN.
    let finite = vandq_u32(
        vandq_u32(vcleq_f32(a[0], lim), vcleq_f32(a[1], lim)),
        vandq_u32(vcleq_f32(a[2], lim), vcleq_f32(a[3], lim)),
    );
    if vminvq_u32(finite) == 0 {
        return Some((f32::NAN, 0));
    }
    let m = vmaxvq_f32(vmaxq_f32(vmaxq_f32(a[0], a[1]), vmaxq_f32(a[2], a[3])));
    let (step, inv) = q4_0_wsum_step(m)?;
    // c * (127 / m), rounded to nearest even, as the reference does.
    let k = c.map(|x| vcvtnq_s32_f32(vmulq_n_f32(x, inv)));
    let sum = vaddvq_s32(vaddq_s32(vaddq_s32(k[0], k[1]), vaddq_s32(k[2], k[3])));
    // i32 -> i16 -> i8, exact: |k| <= 127.
    let k16 = [
        vcombine_s16(vmovn_s32(k[0]), vmovn_s32(k[1])),
        vcombine_s16(vmovn_s32(k[2]), vmovn_s32(k[3])),
    ];
    let k8 = vcombine_s8(vmovn_s16(k16[0]), vmovn_s16(k16[1]));
    // SAFETY: `bytes` holds 16 bytes.
    unsafe { vst1q_s8(bytes.as_mut_ptr(), k8) };
    // |Σ k| <= 16 * 127: 8 Σ k fits an i16.
    Some((step, (8 * sum) as i16))
}

/// `out[h][j] += w[h][p] * (row p)[j]` for the `n_q` heads of Q4_0 rows, integer-weighted as
/// the module says.
///
/// # Safety
/// The CPU must support NEON; `w.len() == n_q * n_pos`, `out.len() == n_q * d` with `d` a
/// multiple of 32, rows `0..n_pos` of `d` Q4_0 values `kv_stride` bytes apart inside `v` (the
/// safe API checks these).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn wsum_q4_0(
    w: &[f32],
    n_q: usize,
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let d = out.len() / n_q;
    let nb = d / QK_KV;
    let rb = nb * Q4_0_BLOCK_BYTES;
    let m4 = vdupq_n_u8(0x0f);
    let mut t0 = 0;
    while t0 < n_pos {
        let n = TILE.min(n_pos - t0);
        let row = |p: usize| v.as_ptr().wrapping_add((t0 + p) * kv_stride);
        for p in t0 + TILE..n_pos.min(t0 + 2 * TILE) {
            prefetch_lines(v, p * kv_stride, rb.div_ceil(64));
        }
        for h0 in (0..n_q).step_by(HEADS) {
            let hn = HEADS.min(n_q - h0);
            // Each head's weights over the tile, zero past its positions.
            let wt: [[float32x4_t; 4]; HEADS] = std::array::from_fn(|h| {
                let mut buf = [0f32; TILE];
                if h < hn {
                    buf[..n].copy_from_slice(&w[(h0 + h) * n_pos + t0..][..n]);
                }
                // SAFETY: 16 floats in buf.
                std::array::from_fn(|i| unsafe { vld1q_f32(buf.as_ptr().add(4 * i)) })
            });
            for b in 0..nb {
                // The tile's block-b scales in position order, 0 past its positions (so
                // those products are exactly 0, as the reference leaves them out).
                let mut sb = [0u16; TILE];
                for (p, s) in sb.iter_mut().enumerate().take(n) {
                    // SAFETY: row p < n of the tile lies inside v; its block b's first two
                    // bytes are the scale.
                    *s = unsafe {
                        row(p)
                            .add(Q4_0_BLOCK_BYTES * b)
                            .cast::<u16>()
                            .read_unaligned()
                    };
                }
                // SAFETY: sb holds 16 halves.
                let s = unsafe {
                    let a = f16x8_to_f32(vld1q_u16(sb.as_ptr()));
                    let b = f16x8_to_f32(vld1q_u16(sb.as_ptr().add(8)));
                    [a[0], a[1], b[0], b[1]]
                };
                let mut bytes = [[0i8; TILE]; HEADS];
                let mut steps = [None; HEADS];
                for h in 0..hn {
                    let c: [float32x4_t; 4] = std::array::from_fn(|i| vmulq_f32(wt[h][i], s[i]));
                    steps[h] = tile_weights(c, &mut bytes[h]);
                }
                if steps.iter().all(|s| s.is_none()) {
                    continue;
                }
                let mut acc = [[vdupq_n_s16(0); 4]; HEADS];
                for p in 0..n {
                    // SAFETY: row p < n of the tile lies inside v, and its block b's 16
                    // nibble bytes.
                    let x = unsafe { vld1q_u8(row(p).add(Q4_0_BLOCK_BYTES * b + 2)) };
                    let lo = vreinterpretq_s8_u8(vandq_u8(x, m4));
                    let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(x));
                    for h in 0..hn {
                        // SAFETY: byte p < 16 of the head's weights.
                        let k = unsafe { vld1q_dup_s8(bytes[h].as_ptr().add(p)) };
                        let kl = vget_low_s8(k);
                        acc[h][0] = vmlal_s8(acc[h][0], vget_low_s8(lo), kl);
                        acc[h][1] = vmlal_high_s8(acc[h][1], lo, k);
                        acc[h][2] = vmlal_s8(acc[h][2], vget_low_s8(hi), kl);
                        acc[h][3] = vmlal_high_s8(acc[h][3], hi, k);
                    }
                }
                for h in 0..hn {
                    let Some((step, corr)) = steps[h] else {
                        continue;
                    };
                    let step = vdupq_n_f32(step);
                    let corr = vdupq_n_s16(corr);
                    let o = out.as_mut_ptr().wrapping_add((h0 + h) * d + QK_KV * b);
                    for i in 0..4 {
                        // Σ k (n - 8) fits i16 (|.| <= 16 * 127 * 8); the wrapped difference
                        // is it.
                        let x = vsubq_s16(acc[h][i], corr);
                        let halves = [vmovl_s16(vget_low_s16(x)), vmovl_high_s16(x)];
                        for (e, xe) in halves.into_iter().enumerate() {
                            // SAFETY: lanes 32 b + 8 i + 4 e .. + 4 of head h0 + h lie
                            // inside out.
                            unsafe {
                                let oe = o.add(8 * i + 4 * e);
                                vst1q_f32(oe, vfmaq_f32(vld1q_f32(oe), step, vcvtq_f32_s32(xe)));
                            }
                        }
                    }
                }
            }
        }
        t0 += n;
    }
}
