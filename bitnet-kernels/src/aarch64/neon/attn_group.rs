//! NEON grouped-query attention over an f16 KV cache: the `n_q` query heads that share one
//! KV head are scored (and their values summed) in one pass, so each K and V row is loaded
//! and widened (`FCVTL`/`FCVTL2`) once per group instead of once per head.
//!
//! The per-head kernels in `attn.rs` stay the reference shape; these sum in another order
//! and are held to the same dot budget. Group sizes 2, 4 and 8 have register-resident
//! kernels: scores keep eight (head, position) accumulators (8 / G positions a tile), reduced
//! four at a time with `FADDP`; weighted sums keep 16 accumulators (32 / G output lanes per
//! head) while a tile of positions streams past, every lane adding its positions in order
//! onto its starting value (so a cache walked block by block gives the same bits). For other
//! sizes [`scores_group`] and [`wsum_group`] return `false` and the caller runs the per-head
//! kernels head by head.

// acc[j * G + h] pairs position j with head h; index loops say that more plainly.
#![allow(clippy::needless_range_loop)]

use std::arch::aarch64::*;

use crate::aarch64::asm::f16x4_to_f32x4;
use crate::aarch64::half::f16x8_to_f32;
use crate::prefetch::prefetch_lines;

/// How many positions ahead the grouped kernels prefetch rows.
const PREFETCH_POS: usize = 8;

/// The last `n < 4` halves at `p`, widened and zero-padded to four lanes.
///
/// # Safety
/// `n` halves at `p` readable.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn f16_tail(p: *const u16, n: usize) -> float32x4_t {
    let mut buf = [0u16; 4];
    // SAFETY: n < 4 halves at p (the caller's contract) into a buffer of 4.
    unsafe {
        std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n);
        f16x4_to_f32x4(vld1_u16(buf.as_ptr()))
    }
}

/// The last `n < 4` floats at `p`, zero-padded.
///
/// # Safety
/// `n` floats at `p` readable.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn f32_tail(p: *const f32, n: usize) -> float32x4_t {
    let mut buf = [0f32; 4];
    // SAFETY: n < 4 floats at p (the caller's contract) into a buffer of 4.
    unsafe {
        std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n);
        vld1q_f32(buf.as_ptr())
    }
}

/// Lane `i` of the result: the sum of `a[i]`'s lanes.
#[inline]
#[target_feature(enable = "neon")]
fn reduce4(a: [float32x4_t; 4]) -> float32x4_t {
    vpaddq_f32(vpaddq_f32(a[0], a[1]), vpaddq_f32(a[2], a[3]))
}

/// Scores of `G` heads against the positions `p0..p0 + P` (`G * P <= 8`): entry `j * G + h`
/// is `dot(q_h, k_{p0 + j})` (entries past `G * P` are 0).
///
/// # Safety
/// NEON; `q` holds `G * d` floats (head `h` at `h * d`); `k` holds `d` halves of each
/// position `p0..p0 + P`, position `p` at `p * kv_stride`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn scores_tile<const G: usize, const P: usize>(
    q: *const f32,
    d: usize,
    k: *const u16,
    kv_stride: usize,
    p0: usize,
) -> [f32; 8] {
    debug_assert!(G * P <= 8);
    let mut acc = [vdupq_n_f32(0.0); 8];
    let row = |j: usize| k.wrapping_add((p0 + j) * kv_stride);
    let mut c = 0;
    // SAFETY: every load reads lanes below d of a head or a position (the caller's contract).
    unsafe {
        while c + 8 <= d {
            let kv: [[float32x4_t; 2]; P] =
                std::array::from_fn(|j| f16x8_to_f32(vld1q_u16(row(j).add(c))));
            for h in 0..G {
                let qh = q.add(h * d + c);
                let (q0, q1) = (vld1q_f32(qh), vld1q_f32(qh.add(4)));
                for j in 0..P {
                    let u = j * G + h;
                    acc[u] = vfmaq_f32(acc[u], q0, kv[j][0]);
                    acc[u] = vfmaq_f32(acc[u], q1, kv[j][1]);
                }
            }
            c += 8;
        }
        if c < d {
            let n = (d - c).min(4);
            let tail = |p: *const u16| {
                if n == 4 {
                    f16x4_to_f32x4(vld1_u16(p))
                } else {
                    f16_tail(p, n)
                }
            };
            let kv: [float32x4_t; P] = std::array::from_fn(|j| tail(row(j).add(c)));
            let kv2: [float32x4_t; P] = if d - c > 4 {
                std::array::from_fn(|j| f16_tail(row(j).add(c + 4), d - c - 4))
            } else {
                [vdupq_n_f32(0.0); P]
            };
            for h in 0..G {
                let qh = q.add(h * d + c);
                let q0 = if n == 4 {
                    vld1q_f32(qh)
                } else {
                    f32_tail(qh, n)
                };
                let q1 = if d - c > 4 {
                    f32_tail(qh.add(4), d - c - 4)
                } else {
                    vdupq_n_f32(0.0)
                };
                for j in 0..P {
                    let u = j * G + h;
                    acc[u] = vfmaq_f32(acc[u], q0, kv[j]);
                    acc[u] = vfmaq_f32(acc[u], q1, kv2[j]);
                }
            }
        }
    }
    let mut out = [0.0f32; 8];
    // SAFETY: `out` holds 8 floats.
    unsafe {
        vst1q_f32(out.as_mut_ptr(), reduce4([acc[0], acc[1], acc[2], acc[3]]));
        if G * P > 4 {
            vst1q_f32(
                out.as_mut_ptr().add(4),
                reduce4([acc[4], acc[5], acc[6], acc[7]]),
            );
        }
    }
    out
}

/// # Safety
/// NEON; shapes as `crate::shared::attn` checks them; `G * P == 8`.
#[target_feature(enable = "neon")]
unsafe fn scores_g<const G: usize, const P: usize>(
    q: &[f32],
    k: &[u16],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let d = q.len() / G;
    // SAFETY: the f16 cache's bytes (same allocation, same length in bytes).
    let kb = unsafe { std::slice::from_raw_parts(k.as_ptr().cast::<u8>(), 2 * k.len()) };
    let lines = (2 * d).div_ceil(64);
    let mut p = 0;
    while p + P <= n_pos {
        for j in 0..P {
            prefetch_lines(kb, 2 * (p + PREFETCH_POS + j) * kv_stride, lines);
        }
        // SAFETY: positions p..p + P lie below n_pos, inside k (checked by the safe API).
        let s = unsafe { scores_tile::<G, P>(q.as_ptr(), d, k.as_ptr(), kv_stride, p) };
        for j in 0..P {
            for h in 0..G {
                out[h * n_pos + p + j] = scale * s[j * G + h];
            }
        }
        p += P;
    }
    while p < n_pos {
        // SAFETY: position p < n_pos lies inside k (checked by the safe API).
        let s = unsafe { scores_tile::<G, 1>(q.as_ptr(), d, k.as_ptr(), kv_stride, p) };
        for h in 0..G {
            out[h * n_pos + p] = scale * s[h];
        }
        p += 1;
    }
}

/// Positions per tile of the grouped weighted sum: their rows stay in L1 while every slice
/// of the output passes over them.
const WSUM_TILE_POS: usize = 32;

/// One pass over output lanes `c..c + 4 NV` of `G` heads for the positions `t`.
///
/// # Safety
/// NEON; `c + 4 NV <= d`; shapes as the safe API checks them.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn wsum_pass<const G: usize, const NV: usize>(
    w: &[f32],
    v: &[u16],
    kv_stride: usize,
    n_pos: usize,
    t: std::ops::Range<usize>,
    c: usize,
    out: &mut [f32],
) {
    let d = out.len() / G;
    let o = out.as_mut_ptr();
    let mut acc: [[float32x4_t; NV]; G] = std::array::from_fn(|h| {
        // SAFETY: lanes c..c + 4 NV lie below d of each head's output row.
        std::array::from_fn(|i| unsafe { vld1q_f32(o.add(h * d + c + 4 * i)) })
    });
    for p in t {
        // SAFETY: lanes c..c + 4 NV <= d of position p < n_pos lie inside v.
        let x: [float32x4_t; NV] = unsafe {
            let row = v.as_ptr().add(p * kv_stride + c);
            let mut x = [vdupq_n_f32(0.0); NV];
            let mut i = 0;
            while i + 2 <= NV {
                let y = f16x8_to_f32(vld1q_u16(row.add(4 * i)));
                x[i] = y[0];
                x[i + 1] = y[1];
                i += 2;
            }
            if i < NV {
                x[i] = f16x4_to_f32x4(vld1_u16(row.add(4 * i)));
            }
            x
        };
        for h in 0..G {
            let wp = w[h * n_pos + p];
            for i in 0..NV {
                acc[h][i] = vfmaq_n_f32(acc[h][i], x[i], wp);
            }
        }
    }
    for h in 0..G {
        for i in 0..NV {
            // SAFETY: as for the loads.
            unsafe { vst1q_f32(o.add(h * d + c + 4 * i), acc[h][i]) };
        }
    }
}

/// `out[h] += Σ_p w[h][p] v_p` for `G` heads, `4 NV` output lanes per pass (fewer at the
/// end; the last `d % 4` lanes zero-padded).
///
/// # Safety
/// NEON; shapes as the safe API checks them (`w` is `[G][n_pos]`, `out` is `[G][d]`, every
/// position's `d` values inside `v`).
#[target_feature(enable = "neon")]
unsafe fn wsum_g<const G: usize, const NV: usize>(
    w: &[f32],
    v: &[u16],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let d = out.len() / G;
    let full = d - d % 4;
    // SAFETY: the f16 cache's bytes (same allocation, same length in bytes).
    let vb = unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), 2 * v.len()) };
    let mut t0 = 0;
    while t0 < n_pos {
        let t = t0..(t0 + WSUM_TILE_POS).min(n_pos);
        for p in t.clone() {
            prefetch_lines(
                vb,
                2 * (p + WSUM_TILE_POS) * kv_stride,
                (2 * d).div_ceil(64),
            );
        }
        let mut c = 0;
        while c < full {
            // SAFETY: each pass's lanes lie below full <= d (shapes checked by the safe API).
            unsafe {
                if c + 4 * NV <= full {
                    wsum_pass::<G, NV>(w, v, kv_stride, n_pos, t.clone(), c, out);
                    c += 4 * NV;
                } else {
                    wsum_pass::<G, 1>(w, v, kv_stride, n_pos, t.clone(), c, out);
                    c += 4;
                }
            }
        }
        if full < d {
            let n = d - full;
            for h in 0..G {
                let mut o = [0.0f32; 4];
                o[..n].copy_from_slice(&out[h * d + full..][..n]);
                // SAFETY: o holds 4 floats.
                let mut acc = unsafe { vld1q_f32(o.as_ptr()) };
                for p in t.clone() {
                    // SAFETY: the n tail lanes of position p < n_pos lie inside v.
                    let x = unsafe { f16_tail(v.as_ptr().add(p * kv_stride + full), n) };
                    acc = vfmaq_n_f32(acc, x, w[h * n_pos + p]);
                }
                // SAFETY: o holds 4 floats.
                unsafe { vst1q_f32(o.as_mut_ptr(), acc) };
                out[h * d + full..][..n].copy_from_slice(&o[..n]);
            }
        }
        t0 = t.end;
    }
}

/// Grouped scores: `q` is `[n_q][d]`, `out` `[n_q][n_pos]`. Returns `false` (and does
/// nothing) for group sizes without a kernel here.
///
/// # Safety
/// The CPU must support NEON; shapes as `crate::shared::attn` checks them.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn scores_group(
    q: &[f32],
    n_q: usize,
    k: &[u16],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) -> bool {
    // SAFETY: the caller guarantees the CPU features and the shapes.
    unsafe {
        match n_q {
            2 => scores_g::<2, 4>(q, k, kv_stride, n_pos, scale, out),
            4 => scores_g::<4, 2>(q, k, kv_stride, n_pos, scale, out),
            8 => scores_g::<8, 1>(q, k, kv_stride, n_pos, scale, out),
            _ => return false,
        }
    }
    true
}

/// Grouped weighted sums: `w` is `[n_q][n_pos]`, `out` `[n_q][d]`. Returns `false` (and does
/// nothing) for group sizes without a kernel here.
///
/// # Safety
/// As [`scores_group`].
pub(crate) unsafe fn wsum_group(
    w: &[f32],
    n_q: usize,
    v: &[u16],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) -> bool {
    // SAFETY: the caller guarantees the CPU features and the shapes.
    unsafe {
        match n_q {
            2 => wsum_g::<2, 8>(w, v, kv_stride, n_pos, out),
            4 => wsum_g::<4, 4>(w, v, kv_stride, n_pos, out),
            8 => wsum_g::<8, 2>(w, v, kv_stride, n_pos, out),
            _ => return false,
        }
    }
    true
}
