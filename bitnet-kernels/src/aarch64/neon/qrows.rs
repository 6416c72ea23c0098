//! NEON block-quantized rows (Q8_0, Q6_K) times f32 vectors: weight rows of heads and
//! embeddings kept in those formats. Each row is decoded in registers, never written out,
//! once for a tile of up to 4 token rows (the shared walk `crate::aarch64::rows`). Q4_0
//! (rare in heads) keeps the portable dequantize-a-chunk path.
//!
//! Decoding: quants widened `SXTL`/`SXTL2` (i8 -> i16 -> i32), converted (`SCVTF`) and
//! multiplied by the block scale (`FMUL`), which is exactly the reference's dequantized
//! value (`d * q`, or `(d * scale) * q` for Q6_K); then one `FMLA` per 4 weights and token,
//! four accumulators a token. Q6_K codes are rebuilt from their low nibbles and 2-bit
//! fields with byte logic (`AND`/`USHR`/`SHL`/`ORR`). The f16 scales are widened by `FCVTL`.
//! A token's sums take the same operations whatever its tile, so batched results equal
//! single-token ones bit for bit.

use std::arch::aarch64::*;
use std::ops::Range;

use crate::aarch64::rows::{Tile, f16_lanes, lane, walk};
use crate::extent::holds;
use crate::layout::rows::RowFormat;
use crate::layout::rows::{Q6K_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK_K, QK8_0};

/// The i8 lanes of `q` as four f32 vectors, in order.
#[inline]
#[target_feature(enable = "neon")]
fn i8x16_to_f32(q: int8x16_t) -> [float32x4_t; 4] {
    let lo = vmovl_s8(vget_low_s8(q));
    let hi = vmovl_high_s8(q);
    [
        vmovl_s16(vget_low_s16(lo)),
        vmovl_high_s16(lo),
        vmovl_s16(vget_low_s16(hi)),
        vmovl_high_s16(hi),
    ]
    .map(|v| vcvtq_f32_s32(v))
}

/// `acc[t][j] += w[j] * x[t][off + 4j..]` for the 16 weights `w` and each token row.
///
/// # Safety
/// NEON; 16 floats readable at `x[t] + 4 * off` bytes for every `t`.
#[inline(always)]
unsafe fn fma16<const T: usize>(
    acc: &mut [[float32x4_t; 4]; T],
    w: &[float32x4_t; 4],
    x: [*const u8; T],
    off: usize,
) {
    for t in 0..T {
        // SAFETY: the caller guarantees the 16 floats.
        unsafe {
            let xv = vld1q_f32_x4(x[t].cast::<f32>().add(off));
            let xv = [xv.0, xv.1, xv.2, xv.3];
            for j in 0..4 {
                acc[t][j] = vfmaq_f32(acc[t][j], w[j], xv[j]);
            }
        }
    }
}

/// The sums of a token's four accumulators.
#[inline]
#[target_feature(enable = "neon")]
fn reduce<const T: usize>(acc: [[float32x4_t; 4]; T]) -> [f32; T] {
    acc.map(|a| vaddvq_f32(vaddq_f32(vaddq_f32(a[0], a[1]), vaddq_f32(a[2], a[3]))))
}

/// Dots of one Q8_0 row of `nb` blocks with `T` token rows: each block decoded once.
///
/// # Safety
/// NEON; `w` readable for `nb` blocks, each `x[t]` for `32 nb` floats.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn dots_q8_0<const T: usize>(w: *const u8, x: [*const u8; T], nb: usize) -> [f32; T] {
    let mut acc = [[vdupq_n_f32(0.0); 4]; T];
    for b in 0..nb {
        // SAFETY: block b is below nb for the row and every token (caller).
        unsafe {
            let p = w.add(b * Q8_0_BLOCK_BYTES);
            let d = lane(f16_lanes([p], 0), 0);
            let q = vld1q_s8_x2(p.add(2).cast());
            for (h, qh) in [q.0, q.1].into_iter().enumerate() {
                let v = i8x16_to_f32(qh).map(|f| vmulq_f32(f, d));
                fma16(&mut acc, &v, x, QK8_0 * b + 16 * h);
            }
        }
    }
    reduce(acc)
}

/// Dots of one Q6_K row of `nb` super-blocks with `T` token rows: per 16 elements the
/// 6-bit codes (minus 32) are rebuilt, widened, and scaled by `d * scales[k]`.
///
/// # Safety
/// NEON; `w` readable for `nb` super-blocks, each `x[t]` for `256 nb` floats.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn dots_q6k<const T: usize>(w: *const u8, x: [*const u8; T], nb: usize) -> [f32; T] {
    let m4 = vdupq_n_u8(0x0f);
    let m2 = vdupq_n_u8(0x30);
    let mut acc = [[vdupq_n_f32(0.0); 4]; T];
    for b in 0..nb {
        // SAFETY: super-block b is below nb for the row and every token (caller); ql, qh,
        // scales and d lie inside its 210 bytes.
        unsafe {
            let blk = w.add(b * Q6K_BLOCK_BYTES);
            let d = lane(f16_lanes([blk], 208), 0);
            // (d * scale) * q, as the reference decoder: the 16 scales times d first.
            let ds = i8x16_to_f32(vld1q_s8(blk.add(192).cast())).map(|s| vmulq_f32(d, s));
            for n in 0..2 {
                for h in 0..2 {
                    let la = vld1q_u8(blk.add(64 * n + 16 * h));
                    let lb = vld1q_u8(blk.add(64 * n + 32 + 16 * h));
                    let qh = vld1q_u8(blk.add(128 + 32 * n + 16 * h));
                    let q = [
                        vorrq_u8(vandq_u8(la, m4), vandq_u8(vshlq_n_u8::<4>(qh), m2)),
                        vorrq_u8(vandq_u8(lb, m4), vandq_u8(vshlq_n_u8::<2>(qh), m2)),
                        vorrq_u8(vshrq_n_u8::<4>(la), vandq_u8(qh, m2)),
                        vorrq_u8(vshrq_n_u8::<4>(lb), vandq_u8(vshrq_n_u8::<2>(qh), m2)),
                    ];
                    for (g, &qg) in q.iter().enumerate() {
                        // Elements 16h..16h + 16 of quarter g share scale 8n + 2g + h.
                        let k = 8 * n + 2 * g + h;
                        let s = lane(ds[k / 4], k % 4);
                        let v = vreinterpretq_s8_u8(vsubq_u8(qg, vdupq_n_u8(32)));
                        let v = i8x16_to_f32(v).map(|f| vmulq_f32(s, f));
                        fma16(&mut acc, &v, x, QK_K * b + 128 * n + 32 * g + 16 * h);
                    }
                }
            }
        }
    }
    reduce(acc)
}

/// The [`Tile`] of one format's rows (one row a tile, up to 4 tokens).
#[derive(Clone, Copy)]
struct Rows<const Q6K: bool> {
    nb: usize,
}

impl<const Q6K: bool> Tile for Rows<Q6K> {
    const ROWS: usize = 1;
    const TOKENS: usize = 4;

    #[inline(always)]
    unsafe fn tile<const R: usize, const T: usize>(
        self,
        w: [*const u8; R],
        x: [*const u8; T],
    ) -> [[f32; T]; R] {
        // SAFETY: forwarded from the caller (NEON, whole rows); the walk never asks for
        // more than one row at a time (`ROWS` is 1), but every row is done the same way.
        unsafe {
            w.map(|wr| {
                if Q6K {
                    dots_q6k::<T>(wr, x, self.nb)
                } else {
                    dots_q8_0::<T>(wr, x, self.nb)
                }
            })
        }
    }
}

/// the reference `matmul_f32` of `scalar/float.rs` for `fmt` rows.
///
/// # Safety
/// NEON. Shapes are checked here.
#[inline(always)]
unsafe fn matmul<const Q6K: bool>(
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let fmt = if Q6K { RowFormat::Q6K } else { RowFormat::Q8_0 };
    let rb = fmt.row_bytes(row_len).expect("whole blocks");
    let nb = row_len / fmt.block_len();
    assert!(
        holds(data.len(), rows.end, rb)
            && holds(x.len(), n_tok, row_len)
            && holds(out.len(), n_tok, rows.len())
    );
    let (w, xp) = (data.as_ptr(), x.as_ptr().cast::<u8>());
    // SAFETY: NEON is the caller's; shapes checked above.
    unsafe { walk(Rows::<Q6K> { nb }, w, rb, xp, 4 * row_len, n_tok, rows, out) }
}

/// the reference `matmul_f32` of `scalar/float.rs` for Q8_0 rows.
///
/// # Safety
/// The CPU must support NEON. Shapes are checked here.
#[target_feature(enable = "neon")]
pub unsafe fn matmul_q8_0(
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    // SAFETY: this function enables NEON.
    unsafe { matmul::<false>(data, row_len, x, n_tok, rows, out) }
}

/// the reference `matmul_f32` of `scalar/float.rs` for Q6_K rows.
///
/// # Safety
/// The CPU must support NEON. Shapes are checked here.
#[target_feature(enable = "neon")]
pub unsafe fn matmul_q6k(
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    // SAFETY: this function enables NEON.
    unsafe { matmul::<true>(data, row_len, x, n_tok, rows, out) }
}
