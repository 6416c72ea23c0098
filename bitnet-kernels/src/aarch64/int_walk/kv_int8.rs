//! Scoring of integer-coded keys (Q8_0, Q8R, Q4_0) against an int8 query
//! (`crate::float::kv::attn_scores_kv_int8_query`; the specification is `scalar/kv_int8.rs`).
//!
//! Rows are taken in tiles of `8 / G` for a group of `G` heads, so a tile holds eight
//! (row, head) units. Each key block is loaded once for the group as 32 signed values
//! (Q8_0 and Q8R codes as stored; Q4_0 nibbles masked, shifted and less 8), and each unit's
//! block dot is exact in 32-bit lanes: two [`DotStep::dot_b127`]s, the query codes being
//! within -127..=127 (`int8_query` rounds to at most 127 in magnitude). Two rounds of `ADDP`
//! gather four units' dots into one vector, so the conversion (`SCVTF`), the product of the
//! key's and the query's block scales and the `FMLA` are paid once per four units. Every
//! block dot is exact and each unit's lane adds its blocks in order from 0, so a head's score
//! does not depend on its group, its tile, or the number of rows.
//!
//! The kernels are reached through function pointers, one per format and group; each tree
//! compiles them with its features ([`ScoresEntry`]).

// acc[k] pairs with quad k of the tile; index loops say that more plainly.
#![allow(clippy::needless_range_loop)]

use std::arch::aarch64::*;

use crate::aarch64::half::{f16_lanes, f16_splat};
use crate::aarch64::int_dot::DotStep;
use crate::layout::kv::{KvQuant, Q8R_SCALE_BYTES, QK_KV};
use crate::layout::rows::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES};
use crate::prefetch::prefetch_lines;

const Q80: u8 = 0;
const Q8R: u8 = 1;
const Q40: u8 = 2;

/// Units (row, head) per tile: two quads.
const UNITS: usize = 8;
/// Blocks of a head dim the per-block query scale vectors are kept on the stack for
/// (d <= 1024 for groups of 8).
const STACK_VECS: usize = 64;
/// Positions ahead whose rows are prefetched.
const PREFETCH_POS: usize = 16;

/// The bytes of a head's row of format `F` with `d` values.
#[inline(always)]
const fn row_bytes<const F: u8>(d: usize) -> usize {
    let nb = d / QK_KV;
    match F {
        Q80 => nb * Q8_0_BLOCK_BYTES,
        Q8R => Q8R_SCALE_BYTES + d,
        _ => nb * Q4_0_BLOCK_BYTES,
    }
}

/// Block `b`'s 32 integer values of the row at `row`, as the reference's `block_ints`
/// gives them (values 0..16, 16..32).
///
/// # Safety
/// Block `b` of the row must be readable.
#[inline(always)]
unsafe fn block_codes<const F: u8>(row: *const u8, b: usize) -> [int8x16_t; 2] {
    // SAFETY: every load stays inside block b (the caller's contract).
    unsafe {
        match F {
            Q80 => {
                let p = row.add(Q8_0_BLOCK_BYTES * b + 2).cast::<i8>();
                [vld1q_s8(p), vld1q_s8(p.add(16))]
            }
            Q8R => {
                let p = row.add(Q8R_SCALE_BYTES + QK_KV * b).cast::<i8>();
                [vld1q_s8(p), vld1q_s8(p.add(16))]
            }
            _ => {
                // Byte j holds value j in its low nibble and value j + 16 in its high one.
                let x = vld1q_u8(row.add(Q4_0_BLOCK_BYTES * b + 2));
                let eight = vdupq_n_s8(8);
                [
                    vsubq_s8(vreinterpretq_s8_u8(vandq_u8(x, vdupq_n_u8(0x0f))), eight),
                    vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(x)), eight),
                ]
            }
        }
    }
}

/// The dot of a key block with a query block, as four i32 partial sums; exact for query
/// codes within -127..=127.
///
/// # Safety
/// `S`'s features.
#[inline(always)]
unsafe fn block_dot<S: DotStep>(k: [int8x16_t; 2], q: [int8x16_t; 2]) -> int32x4_t {
    // SAFETY: the caller's features.
    unsafe { S::dot_b127(S::dot_b127(vdupq_n_s32(0), k[0], q[0]), k[1], q[1]) }
}

/// Quad patterns of the query scales: a quad's lanes are the heads `(4k + l) % G`, which
/// repeat every quad unless `G = 8`.
#[inline(always)]
const fn patterns<const G: usize>() -> usize {
    if G > 4 { G / 4 } else { 1 }
}

/// The scores of `G` int8 query heads against the `P = 8 / G` rows `rows`, before the
/// attention scale: unit `j * G + h` (row `j`, head `h`) in lane `u % 4` of quad `u / 4`.
///
/// # Safety
/// `S`'s features; the rows hold `nb` blocks; `codes` holds `G * 32 nb` codes; `dq` holds
/// the query scale vectors of [`scores_g`] (`nb * patterns::<G>()`).
#[inline(always)]
unsafe fn scores_tile<S: DotStep, const F: u8, const G: usize, const P: usize>(
    codes: *const i8,
    dq: &[float32x4_t],
    nb: usize,
    rows: [*const u8; P],
) -> [float32x4_t; 2] {
    debug_assert!(G * P == UNITS);
    let pats = patterns::<G>();
    // Q8R's row scales hold for every block.
    let row_scale = |k: usize| {
        let s: [f32; 4] = std::array::from_fn(|l| {
            // SAFETY: each row starts with its f32 scale (the caller's contract).
            unsafe { rows[(4 * k + l) / G].cast::<f32>().read_unaligned() }
        });
        // SAFETY: `s` holds 4 floats.
        unsafe { vld1q_f32(s.as_ptr()) }
    };
    // SAFETY: NEON, which every AArch64 target has.
    let zero = unsafe { vdupq_n_f32(0.0) };
    let r8 = if F == Q8R {
        [row_scale(0), row_scale(1)]
    } else {
        [zero; 2]
    };
    let mut acc = [zero; 2];
    for b in 0..nb {
        // SAFETY: block b of each row, and head h's block b of the codes; `S`'s features (the
        // caller's contract).
        unsafe {
            let keys: [[int8x16_t; 2]; P] = std::array::from_fn(|j| block_codes::<F>(rows[j], b));
            let qs: [[int8x16_t; 2]; G] = std::array::from_fn(|h| {
                let p = codes.add((h * nb + b) * QK_KV);
                [vld1q_s8(p), vld1q_s8(p.add(16))]
            });
            for k in 0..2 {
                // A loop, not a closure, around the step: a closure would not inherit the entry's
                // features.
                let mut dots = [vdupq_n_s32(0); 4];
                for l in 0..4 {
                    let u = 4 * k + l;
                    dots[l] = block_dot::<S>(keys[u / G], qs[u % G]);
                }
                let sums = vpaddq_s32(vpaddq_s32(dots[0], dots[1]), vpaddq_s32(dots[2], dots[3]));
                let off = |l: usize| {
                    let blk = if F == Q80 {
                        Q8_0_BLOCK_BYTES
                    } else {
                        Q4_0_BLOCK_BYTES
                    };
                    rows[(4 * k + l) / G].add(blk * b)
                };
                let dk = if F == Q8R {
                    r8[k]
                } else if G >= 4 {
                    f16_splat(off(0))
                } else {
                    f16_lanes([off(0), off(1), off(2), off(3)])
                };
                let s = vmulq_f32(dk, dq[b * pats + k % pats]);
                acc[k] = vfmaq_f32(acc[k], vcvtq_f32_s32(sums), s);
            }
        }
    }
    acc
}

/// Scores of `G` int8 query heads (`codes` `[G][d]`, `scales` `[G][d / 32]`) against `n_pos`
/// rows; `out` is `[G][n_pos]`. Rows are taken `P` at a time; the last tile repeats its last
/// row for the rows past `n_pos`, and their scores are dropped.
///
/// # Safety
/// The CPU has `S`'s features, and the caller's `#[target_feature]` enables them; shapes as
/// the safe API checks them; `G * P == 8`.
#[inline(always)]
pub(crate) unsafe fn scores_g<S: DotStep, const F: u8, const G: usize, const P: usize>(
    codes: &[i8],
    scales: &[f32],
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let d = codes.len() / G;
    let nb = d / QK_KV;
    let rb = row_bytes::<F>(d);
    let pats = patterns::<G>();
    let n_vec = nb * pats;
    // SAFETY: NEON, which every AArch64 target has.
    let zero = unsafe { vdupq_n_f32(0.0) };
    let mut dq_stack = [zero; STACK_VECS];
    // Head dims past the stack's (none in use) take the heap.
    let mut dq_heap = Vec::new();
    let dq: &mut [float32x4_t] = if n_vec <= STACK_VECS {
        &mut dq_stack[..n_vec]
    } else {
        dq_heap.resize(n_vec, zero);
        &mut dq_heap
    };
    for b in 0..nb {
        for c in 0..pats {
            let lanes: [f32; 4] = std::array::from_fn(|l| scales[((4 * c + l) % G) * nb + b]);
            // SAFETY: `lanes` holds 4 floats.
            dq[b * pats + c] = unsafe { vld1q_f32(lanes.as_ptr()) };
        }
    }
    let mut lanes = [0.0f32; UNITS];
    let mut p = 0;
    while p < n_pos {
        for j in 0..P {
            prefetch_lines(k, (p + j + PREFETCH_POS) * kv_stride, rb.div_ceil(64));
        }
        let n = P.min(n_pos - p);
        // SAFETY: rows p..p + n lie inside k (checked by the safe API); the rest repeat
        // row p + n - 1.
        let rows =
            std::array::from_fn(|j| unsafe { k.as_ptr().add((p + j.min(n - 1)) * kv_stride) });
        // SAFETY: the rows hold nb blocks; codes and dq have the checked shapes.
        let quads = unsafe { scores_tile::<S, F, G, P>(codes.as_ptr(), dq, nb, rows) };
        // SAFETY: `lanes` holds 8 floats.
        unsafe {
            vst1q_f32(lanes.as_mut_ptr(), quads[0]);
            vst1q_f32(lanes.as_mut_ptr().add(4), quads[1]);
        }
        for j in 0..n {
            for h in 0..G {
                out[h * n_pos + p + j] = scale * lanes[j * G + h];
            }
        }
        p += n;
    }
}

/// A set's [`scores_g`], compiled with the set's features: each tree implements it as its
/// `#[target_feature]` entry, whose addresses the dispatch below takes.
pub(crate) trait ScoresEntry {
    /// [`scores_g`] with the set's step.
    ///
    /// # Safety
    /// The CPU has the set's features; as [`scores_g`].
    unsafe fn scores_g<const F: u8, const G: usize, const P: usize>(
        codes: &[i8],
        scales: &[f32],
        k: &[u8],
        kv_stride: usize,
        n_pos: usize,
        scale: f32,
        out: &mut [f32],
    );
}

type ScoresKernel = unsafe fn(&[i8], &[f32], &[u8], usize, usize, f32, &mut [f32]);

fn kernels<E: ScoresEntry, const F: u8>(g: usize) -> Option<ScoresKernel> {
    Some(match g {
        1 => E::scores_g::<F, 1, 8>,
        2 => E::scores_g::<F, 2, 4>,
        4 => E::scores_g::<F, 4, 2>,
        8 => E::scores_g::<F, 8, 1>,
        _ => return None,
    })
}

fn kernel_of<E: ScoresEntry>(fmt: KvQuant, g: usize) -> Option<ScoresKernel> {
    match fmt {
        KvQuant::Q8_0 => kernels::<E, Q80>(g),
        KvQuant::Q8R => kernels::<E, Q8R>(g),
        KvQuant::Q4_0 => kernels::<E, Q40>(g),
        KvQuant::Fp8 | KvQuant::B1 => None,
    }
}

/// `attn_scores_int8_query` of `scalar/kv_int8.rs`, with `E`'s kernels.
///
/// # Safety
/// The CPU has `E`'s features; `fmt` has integer codes; shapes checked by the safe API.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn attn_scores_int8_query<E: ScoresEntry>(
    fmt: KvQuant,
    codes: &[i8],
    scales: &[f32],
    n_q: usize,
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    if let Some(f) = kernel_of::<E>(fmt, n_q) {
        // SAFETY: the caller guarantees the CPU features and the shapes.
        unsafe { f(codes, scales, k, kv_stride, n_pos, scale, out) };
        return;
    }
    let f = kernel_of::<E>(fmt, 1).expect("a one-head kernel for every integer format");
    let d = codes.len() / n_q;
    let nb = d / QK_KV;
    for h in 0..n_q {
        let (ch, sh) = (&codes[h * d..][..d], &scales[h * nb..][..nb]);
        let oh = &mut out[h * n_pos..][..n_pos];
        // SAFETY: one head of the checked group has the checked shape.
        unsafe { f(ch, sh, k, kv_stride, n_pos, scale, oh) };
    }
}
