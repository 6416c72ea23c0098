//! NEON XNOR/popcount scores of B1 keys against a sign-quantized query (the reference is
//! `scalar/kv_b1_xnor.rs`): four positions per pass, one lane each.
//! Per block, the four keys' sign words (`LD1` by lane) and f16 scales (`LD1` by lane +
//! `FCVTL`) are read once for up to eight heads; each head's word is XORed in, the bits
//! counted (`CNT` per byte, `UADDLP` twice to 32-bit lanes), and `(32 - 2 count) * s_k`
//! multiplied-added with the head's block scale (`FMLA`), in the reference's block order and
//! with its roundings, so the lanes are its results bit for bit. The last `n_pos % 4`
//! positions are scored one at a time by the definition of one row's score,
//! `crate::layout::kv::b1_xnor_row`. No gathers, so rows any distance apart are taken.

// acc[h] pairs with head h0 + h; an index loop says that more plainly than a zip.
#![allow(clippy::needless_range_loop)]

use std::arch::aarch64::*;

use crate::aarch64::half::f16_lanes;
use crate::layout::kv::{B1_BLOCK_BYTES, b1_xnor_row};
use crate::prefetch::prefetch_lines;

/// Heads scored per pass over the keys (accumulators held in registers).
const HEADS: usize = 8;
/// Positions ahead whose rows are prefetched.
const PREFETCH_POS: usize = 16;

/// See the module docs; the safe wrapper checked the shapes.
///
/// # Safety
/// The CPU must support NEON; shapes as `crate::layout::kv` checks them.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn attn_scores_b1_xnor(
    qbits: &[u32],
    qscales: &[f32],
    n_q: usize,
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let nb = qbits.len() / n_q;
    let rb = nb * B1_BLOCK_BYTES;
    let full = n_pos / 4 * 4;
    let thirty_two = vdupq_n_s32(32);
    for h0 in (0..n_q).step_by(HEADS) {
        let hn = HEADS.min(n_q - h0);
        for p in (0..full).step_by(4) {
            if h0 == 0 {
                for j in 0..4 {
                    prefetch_lines(k, (p + PREFETCH_POS + j) * kv_stride, rb.div_ceil(64));
                }
            }
            // SAFETY: positions p..p + 4 are below n_pos, whose rows the caller checked.
            let rows: [*const u8; 4] =
                std::array::from_fn(|j| unsafe { k.as_ptr().add((p + j) * kv_stride) });
            let mut acc = [vdupq_n_f32(0.0); HEADS];
            for b in 0..nb {
                // SAFETY: block b < nb of rows p..p + 4 (see above): bytes 0..2 the scale,
                // 2..6 the signs.
                let (words, ks) = unsafe {
                    let blk = rows.map(|r| r.add(B1_BLOCK_BYTES * b));
                    let w = vld1q_dup_u32(blk[0].add(2).cast());
                    let w = vld1q_lane_u32::<1>(blk[1].add(2).cast(), w);
                    let w = vld1q_lane_u32::<2>(blk[2].add(2).cast(), w);
                    let w = vld1q_lane_u32::<3>(blk[3].add(2).cast(), w);
                    (w, f16_lanes(blk))
                };
                for h in 0..hn {
                    let i = (h0 + h) * nb + b;
                    let x = veorq_u32(words, vdupq_n_u32(qbits[i]));
                    let count = vpaddlq_u16(vpaddlq_u8(vcntq_u8(vreinterpretq_u8_u32(x))));
                    let agree =
                        vsubq_s32(thirty_two, vshlq_n_s32::<1>(vreinterpretq_s32_u32(count)));
                    let t = vmulq_f32(vcvtq_f32_s32(agree), ks);
                    acc[h] = vfmaq_f32(acc[h], t, vdupq_n_f32(qscales[i]));
                }
            }
            for h in 0..hn {
                let o = &mut out[(h0 + h) * n_pos + p..][..4];
                // SAFETY: o holds 4 floats.
                unsafe { vst1q_f32(o.as_mut_ptr(), vmulq_n_f32(acc[h], scale)) };
            }
        }
        // The last n_pos % 4 positions, one at a time.
        for h in h0..h0 + hn {
            let (qb, qs) = (&qbits[h * nb..][..nb], &qscales[h * nb..][..nb]);
            for p in full..n_pos {
                let row = &k[p * kv_stride..][..rb];
                out[h * n_pos + p] = scale * b1_xnor_row(qb, qs, row);
            }
        }
    }
}
