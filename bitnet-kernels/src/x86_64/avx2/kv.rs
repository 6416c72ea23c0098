//! AVX2 attention kernels of the low-bit KV formats (`crate::layout::kv`). A format is a const
//! parameter of one kernel shape: each 16-value half of a block is decoded in registers into
//! the same exact values the scalar reference uses, then scored against (or summed into) the
//! `G` query heads of a GQA group, so each row is decoded once per group. Group sizes 1, 2,
//! 4 and 8 have kernels; others run one head at a time.
//!
//! At depth the rows come from DRAM, one head's slice of every position: the kernels
//! prefetch rows ahead, and the weighted sum walks positions in L1-sized tiles so each row
//! is fetched once for all its passes over the output lanes (what the two bought:
//! `bench/2026-11-26-kernels-figures.md`).
//!
//! AVX-512 machines run these too (no 512-bit versions yet: the machine they were written
//! on has no AVX-512 to test them); `x86_64/avx512/mod.rs` says which ops reuse AVX2.

// acc[h][j] pairs head h with lane group j; index loops say that more plainly than zips.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use crate::layout::kv::{B1_BLOCK_BYTES, FP8_BLOCK_BYTES, KvQuant, Q8R_SCALE_BYTES, QK_KV};
use crate::layout::rows::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES};

pub(crate) const Q8R: u8 = 0;
const FP8: u8 = 1;
pub(crate) const Q40: u8 = 2;
const B1: u8 = 3;
pub(crate) const Q80: u8 = 4;

/// The f16 at `p` as f32 in every lane. Broadcast before the conversion: a scalar
/// conversion compiled to a `vpinsrw` merging into a live register, a false dependency that
/// chained every position's decode to the previous one.
///
/// # Safety
/// Two bytes at `p` readable; AVX2/FMA/F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f16_splat(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees the two bytes are readable.
    let h = unsafe { p.cast::<i16>().read_unaligned() };
    _mm256_cvtph_ps(_mm_set1_epi16(h))
}

/// Half `half` (values `16 half..16 half + 16`) of block `b` of the row at `row`, decoded:
/// `s_b * vals[j]` as two vectors of 8, the same products (bit for bit) as the scalar
/// reference's `decoded_block`.
///
/// # Safety
/// Block `b` of the row (and for Q8R the row's scale) must be readable; AVX2/FMA/F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn half_block<const F: u8>(row: *const u8, b: usize, half: usize) -> [__m256; 2] {
    // SAFETY: every load below stays inside block b, or reads the row's leading scale
    // (the caller's contract).
    let (s, v) = unsafe {
        match F {
            Q80 | Q8R => {
                let (s, p) = if F == Q80 {
                    let blk = row.add(Q8_0_BLOCK_BYTES * b);
                    (f16_splat(blk), blk.add(2 + 16 * half))
                } else {
                    let s = _mm256_set1_ps(row.cast::<f32>().read_unaligned());
                    (s, row.add(Q8R_SCALE_BYTES + QK_KV * b + 16 * half))
                };
                let x = _mm_loadu_si128(p.cast());
                let v = [
                    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x)),
                    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(x))),
                ];
                (s, v)
            }
            FP8 => {
                let blk = row.add(FP8_BLOCK_BYTES * b);
                let p = blk.add(2 + 16 * half);
                let pow = _mm256_set1_ps(f32::from_bits((127 + 120) << 23));
                let v = [0, 8].map(|o| {
                    let c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(o).cast()));
                    let sign =
                        _mm256_slli_epi32::<24>(_mm256_and_si256(c, _mm256_set1_epi32(0x80)));
                    let rest =
                        _mm256_slli_epi32::<20>(_mm256_and_si256(c, _mm256_set1_epi32(0x7f)));
                    _mm256_mul_ps(_mm256_castsi256_ps(_mm256_or_si256(sign, rest)), pow)
                });
                (f16_splat(blk), v)
            }
            Q40 => {
                let blk = row.add(Q4_0_BLOCK_BYTES * b);
                let x = _mm_loadu_si128(blk.add(2).cast());
                let x = if half == 0 { x } else { _mm_srli_epi16::<4>(x) };
                let n = _mm_sub_epi8(_mm_and_si128(x, _mm_set1_epi8(0x0f)), _mm_set1_epi8(8));
                let v = [
                    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(n)),
                    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(n))),
                ];
                (f16_splat(blk), v)
            }
            _ => {
                let blk = row.add(B1_BLOCK_BYTES * b);
                let bits = blk.add(2).cast::<u32>().read_unaligned();
                let lanes = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
                let v = [0, 1].map(|j| {
                    let byte = (bits >> (8 * (2 * half + j))) & 0xff;
                    let m = _mm256_and_si256(_mm256_set1_epi32(byte as i32), lanes);
                    let set = _mm256_castsi256_ps(_mm256_cmpeq_epi32(m, lanes));
                    _mm256_blendv_ps(_mm256_set1_ps(-1.0), _mm256_set1_ps(1.0), set)
                });
                (f16_splat(blk), v)
            }
        }
    };
    [_mm256_mul_ps(s, v[0]), _mm256_mul_ps(s, v[1])]
}

/// Rows ahead of the one being read whose lines are prefetched. A head's row is a fraction
/// of a position's bytes (the other KV heads sit between), and at depth the cache comes
/// from DRAM: the hardware prefetchers do not keep up with that pattern (without these hints
/// the rows were read at a fraction of the streaming bandwidth).
pub(crate) const PREFETCH_ROWS: usize = 16;

/// Positions the weighted sum reads per tile: every pass over a tile (16 or 32 output lanes)
/// finds its rows in L1/L2, so DRAM sees each row once.
const WSUM_TILE: usize = 64;

/// The bytes of a head's row of format `F` with `d` values.
#[inline(always)]
pub(crate) const fn row_bytes<const F: u8>(d: usize) -> usize {
    let nb = d / QK_KV;
    match F {
        Q80 => nb * Q8_0_BLOCK_BYTES,
        Q8R => Q8R_SCALE_BYTES + d,
        FP8 => nb * FP8_BLOCK_BYTES,
        Q40 => nb * Q4_0_BLOCK_BYTES,
        _ => nb * B1_BLOCK_BYTES,
    }
}

/// Asks for the cache lines of the `bytes` bytes at `row`.
///
/// # Safety
/// `row..row + bytes` must lie inside one allocation (prefetching never faults, but the
/// pointer arithmetic must stay in bounds).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn prefetch_row(row: *const u8, bytes: usize) {
    let mut off = 0;
    while off < bytes {
        // SAFETY: off < bytes, inside the row (the caller's contract).
        _mm_prefetch::<_MM_HINT_T0>(unsafe { row.add(off) }.cast());
        off += 64;
    }
    // The last line, when the row straddles one more than bytes / 64 of them.
    // SAFETY: bytes - 1 is the row's last byte.
    _mm_prefetch::<_MM_HINT_T0>(unsafe { row.add(bytes - 1) }.cast());
}

pub(crate) use crate::x86_64::hsum::hsum_ps as hsum;

/// Scores of `G` heads (`q` is `[G][d]`) against `n_pos` rows; `out` is `[G][n_pos]`. Two
/// accumulators per head keep the FMA chains short.
///
/// # Safety
/// AVX2/FMA/F16C; shapes as the safe API checks them.
#[target_feature(enable = "avx2,fma,f16c")]
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
        if p + PREFETCH_ROWS < n_pos {
            // SAFETY: that row lies inside k (checked by the safe API).
            unsafe { prefetch_row(k.as_ptr().add((p + PREFETCH_ROWS) * kv_stride), rb) };
        }
        // SAFETY: row p < n_pos lies inside k and q holds G d floats (checked by the safe API).
        unsafe {
            let row = k.as_ptr().add(p * kv_stride);
            let mut acc = [[_mm256_setzero_ps(); 2]; G];
            for b in 0..nb {
                for half in 0..2 {
                    let x = half_block::<F>(row, b, half);
                    for h in 0..G {
                        let qp = q.as_ptr().add(h * d + QK_KV * b + 16 * half);
                        acc[h][0] = _mm256_fmadd_ps(_mm256_loadu_ps(qp), x[0], acc[h][0]);
                        acc[h][1] = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(8)), x[1], acc[h][1]);
                    }
                }
            }
            for h in 0..G {
                out[h * n_pos + p] = scale * hsum(_mm256_add_ps(acc[h][0], acc[h][1]));
            }
        }
    }
}

/// `out[h] += Σ_p w[h][p] v_p` for `G` heads, 16 output lanes per pass, or a whole block (32)
/// for one or two heads (their 8 accumulators still fit): the block's scale and bytes are
/// then read and decoded once per position instead of once per half.
///
/// # Safety
/// AVX2/FMA/F16C; shapes as the safe API checks them.
#[target_feature(enable = "avx2,fma,f16c")]
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
    // Tiles of positions, each walked once per pass of output lanes: every lane still sums
    // its positions in order, so the bits do not depend on the tiling (or on block
    // boundaries, or on the lanes a pass takes).
    let mut p0 = 0;
    while p0 < n_pos {
        let tile = p0..(p0 + WSUM_TILE).min(n_pos);
        for b in 0..nb {
            for half0 in (0..2).step_by(halves) {
                let lane0 = QK_KV * b + 16 * half0;
                // SAFETY: lanes lane0..lane0 + 16 * halves lie below d of every head's output row.
                let mut acc: [[__m256; 4]; G] = std::array::from_fn(|h| unsafe {
                    let o = out.as_ptr().add(h * d + lane0);
                    std::array::from_fn(|i| {
                        if i < 2 * halves {
                            _mm256_loadu_ps(o.add(8 * i))
                        } else {
                            _mm256_setzero_ps()
                        }
                    })
                });
                for p in tile.clone() {
                    if lane0 == 0 && p + PREFETCH_ROWS < n_pos {
                        // SAFETY: that row lies inside v (checked by the safe API).
                        unsafe {
                            prefetch_row(v.as_ptr().add((p + PREFETCH_ROWS) * kv_stride), rb)
                        };
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
                    let x = [x0[0], x0[1], x1[0], x1[1]];
                    for h in 0..G {
                        let c = _mm256_set1_ps(w[h * n_pos + p]);
                        for i in 0..2 * halves {
                            acc[h][i] = _mm256_fmadd_ps(c, x[i], acc[h][i]);
                        }
                    }
                }
                for h in 0..G {
                    for i in 0..2 * halves {
                        // SAFETY: as for the loads.
                        unsafe {
                            _mm256_storeu_ps(out.as_mut_ptr().add(h * d + lane0 + 8 * i), acc[h][i])
                        };
                    }
                }
            }
        }
        p0 = tile.end;
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
        8 => (scores_g::<F, 8>, wsum_g::<F, 8>),
        _ => return None,
    })
}

fn kernels_of(fmt: KvQuant, g: usize) -> Option<(ScoresKernel, WsumKernel)> {
    match fmt {
        KvQuant::Q8_0 => kernels::<Q80>(g),
        KvQuant::Q8R => kernels::<Q8R>(g),
        KvQuant::Fp8 => kernels::<FP8>(g),
        // Q4_0 values take the integer-weighted sum (nibbles multiplied as bytes); this
        // module's decode-to-float kernel still scores Q4_0 keys against a float query.
        KvQuant::Q4_0 => {
            kernels::<Q40>(g).and_then(|(s, _)| Some((s, super::kv_q4_wsum::wsum_kernel(g)?)))
        }
        KvQuant::B1 => kernels::<B1>(g),
    }
}

/// `attn_scores` of `scalar/kv.rs`, 256 bits wide.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; shapes checked by the safe API.
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

/// `attn_weighted_sum` of `scalar/kv.rs`, 256 bits wide.
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
