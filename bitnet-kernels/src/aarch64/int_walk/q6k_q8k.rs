//! Q6_K rows x Q8_K activations (a file's Q6_K output head), for one token or a few, over a
//! [`DotStep`]: one row at a time (one sequential stream), each block's codes rebuilt once
//! (low nibbles and 2-bit fields, minus 32: signed, -32..31) for up to eight tokens. Each 16
//! codes of one sub-block are one [`DotStep::dot_b127`] against the activations (never
//! -128), multiplied by the sub-block scale in i32 (`MLA`): the block's exact dot, whatever
//! the step's lane grouping. The float steps are the scalar reference's,
//! `sum += (d_w * d_a) * isum` rounded separately (no FMA), so the result is its bits.

use std::arch::aarch64::*;
use std::ops::Range;

use crate::aarch64::int_dot::DotStep;
use crate::layout::half::f16_to_f32;
use crate::layout::q8k::Q8KActs;
use crate::layout::rows::{Q6K_BLOCK_BYTES, QK_K};

/// Token rows a block's rebuilt codes serve at once (more: the block is rebuilt from L1).
const TILE: usize = 8;

/// The activations as raw pointers, for the inner loop.
#[derive(Clone, Copy)]
struct Acts {
    q: *const i8,
    d: *const f32,
    cols: usize,
    nb: usize,
}

/// Adds to `sums[t]`, for tokens `t0..t0 + T`, the row at `row` (`nb` blocks) dotted with
/// the token's activations, block by block as the reference does.
///
/// # Safety
/// `S`'s features; the row's `nb` blocks readable; the tokens below the activations'
/// capacity, whose width is `256 nb`.
#[inline(always)]
unsafe fn row_tokens<S: DotStep, const T: usize>(
    row: *const u8,
    x: Acts,
    t0: usize,
    sums: &mut [f32; T],
) {
    // SAFETY: block b of the row and token rows t0..t0 + T of the activations are readable
    // (the caller's guarantees): ql, qh, scales and d inside the block's 210 bytes, codes
    // at column 256 b + 128 n + 32 g + 16 h < 256 (b + 1); `S`'s features, NEON among them.
    unsafe {
        let m4 = vdupq_n_u8(0x0f);
        let m2 = vdupq_n_u8(0x30);
        let c32 = vdupq_n_u8(32);
        for b in 0..x.nb {
            let blk = row.add(b * Q6K_BLOCK_BYTES);
            let dw = f16_to_f32(blk.add(208).cast::<u16>().read_unaligned().to_le());
            let mut acc = [vdupq_n_s32(0); T];
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
                        // Elements 16 h..16 h + 16 of quarter g: sub-block 8 n + 2 g + h.
                        let sc = i32::from(*blk.add(192 + 8 * n + 2 * g + h) as i8);
                        let c = vreinterpretq_s8_u8(vsubq_u8(qg, c32));
                        let col = b * QK_K + 128 * n + 32 * g + 16 * h;
                        for (t, acc) in acc.iter_mut().enumerate() {
                            let a = vld1q_s8(x.q.add((t0 + t) * x.cols + col));
                            let d = S::dot_b127(vdupq_n_s32(0), c, a);
                            *acc = vmlaq_n_s32(*acc, d, sc);
                        }
                    }
                }
            }
            for (t, (sum, acc)) in sums.iter_mut().zip(acc).enumerate() {
                let da = *x.d.add((t0 + t) * x.nb + b);
                *sum += (dw * da) * vaddvq_s32(acc) as f32;
            }
        }
    }
}

/// Row `row` against tokens `t0..t0 + T`, written to `out[t * nr + i]`.
///
/// # Safety
/// As [`row_tokens`]; `out` writable at those places.
#[inline(always)]
unsafe fn row_tile<S: DotStep, const T: usize>(
    row: *const u8,
    x: Acts,
    t0: usize,
    out: *mut f32,
    nr: usize,
    i: usize,
) {
    let mut sums = [0.0f32; T];
    // SAFETY: forwarded from the caller.
    unsafe {
        row_tokens::<S, T>(row, x, t0, &mut sums);
        for (t, &s) in sums.iter().enumerate() {
            *out.add((t0 + t) * nr + i) = s;
        }
    }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU has `S`'s features, and the caller's `#[target_feature]` enables them; the shapes
/// were checked (`crate::layout::q8k::check_matmul_q6k`).
#[inline(always)]
pub(crate) unsafe fn matmul_q6k_q8k<S: DotStep>(
    w: &[u8],
    row_len: usize,
    x: &Q8KActs,
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let nb = row_len / QK_K;
    let rb = nb * Q6K_BLOCK_BYTES;
    let (q, d, _) = x.raw();
    let acts = Acts {
        q: q.as_ptr(),
        d: d.as_ptr(),
        cols: row_len,
        nb,
    };
    let (nr, o) = (rows.len(), out.as_mut_ptr());
    for (i, r) in rows.enumerate() {
        // SAFETY: the checked shapes: rows below `rows.end` lie in `w`, tokens below `n_tok`
        // in the activations, `out` is `n_tok x nr`; `S`'s features (caller).
        unsafe {
            let row = w.as_ptr().add(r * rb);
            let mut t0 = 0;
            while t0 < n_tok {
                let k = (n_tok - t0).min(TILE);
                match k {
                    1 => row_tile::<S, 1>(row, acts, t0, o, nr, i),
                    2 => row_tile::<S, 2>(row, acts, t0, o, nr, i),
                    3 => row_tile::<S, 3>(row, acts, t0, o, nr, i),
                    4 => row_tile::<S, 4>(row, acts, t0, o, nr, i),
                    5 => row_tile::<S, 5>(row, acts, t0, o, nr, i),
                    6 => row_tile::<S, 6>(row, acts, t0, o, nr, i),
                    7 => row_tile::<S, 7>(row, acts, t0, o, nr, i),
                    _ => row_tile::<S, 8>(row, acts, t0, o, nr, i),
                }
                t0 += k;
            }
        }
    }
}
